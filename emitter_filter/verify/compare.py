"""Does each method of a new program compute, bit for bit, what its old method computes?

Before: OLD.pte (+ .ptd), a method `forward`. After: NEW.pte (+ .ptd) written from it, its
method `forward` (or another name for it, `--method NEW=OLD`). First, from the files alone
(`plan.read_plan`): each pair's input and output metadata must be equal (a differing
signature is the difference), each program's `.ptd` given, its load within the memory
limit. Then each side runs in one runtime (`runtimes.find_runtime`, or its child process),
each program loaded once (`sides.run_side`), on the same inputs (`inputs.py`, seeded from
the old method's metadata); the outputs must have the same count, dtypes, sizes and bytes.
The first pair that differs is the report's `difference` (`report.VerifyReport`). An old method that does not
load or run is no difference: nothing can be verified against it (`VerifyError`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence

from emitter_filter.errors import VerifyError
from emitter_filter.verify.inputs import InputFile, seeded_inputs
from emitter_filter.verify.plan import ProgramPlan, check_plan, memory_limit, read_plan
from emitter_filter.verify.report import JSON_SCHEMA, Difference, MethodPair, Program, VerifyReport
from emitter_filter.verify.runtimes import RuntimeFailure, find_runtime
from emitter_filter.verify.sides import Call, ProgramRefused, run_side

__all__ = [
    "JSON_SCHEMA",
    "Program",
    "MethodPair",
    "Difference",
    "VerifyReport",
    "pairs_by_name",
    "verify_pairs",
    "verify_programs",
    "Verifier",
    "Plans",
]

logger = logging.getLogger(__name__)


def _renames(specs: Sequence[str]) -> dict[str, str]:
    """`NEW=OLD` specs as {new method: old method}."""
    renames = {}
    for spec in specs:
        new, equals, old = spec.partition("=")
        if not (equals and new and old):
            raise VerifyError(f"--method {spec!r}: expected NEW=OLD, e.g. decode=forward")
        renames[new] = old
    return renames


def pairs_by_name(
    old: Program, new: Program, methods: Sequence[str] = (), plans: Plans | None = None
) -> list[MethodPair]:
    """Every method of `new` with the method of `old` of its name, or the one `methods`
    (`NEW=OLD`) gives it; the methods read from the files (`plan.read_plan`).

    Raises:
        VerifyError: A rename names what is not there, or a method of `new` has no
            method of `old` to compare with.
    """
    plans = Plans() if plans is None else plans
    renames = _renames(methods)
    new_methods = list(plans.of(new).methods)
    old_methods = list(plans.of(old).methods)
    for new_name, old_name in renames.items():
        if new_name not in new_methods:
            raise VerifyError(
                f"--method {new_name}={old_name}: {new.pte} has no method "
                f"{new_name!r} (it has {', '.join(new_methods)})"
            )
    pairs = []
    for name in new_methods:
        old_name = renames.get(name, name)
        if old_name not in old_methods:
            raise VerifyError(
                f"{new.pte} method {name!r}: {old.pte} has no method "
                f"{old_name!r} (it has {', '.join(old_methods)}); pair them "
                f"with --method {name}=OLD"
            )
        pairs.append(MethodPair(new, name, old, old_name))
    return pairs


class Plans:
    """Each program's `ProgramPlan`, read once, checked for what it needs before it
    loads (`plan.check_plan`): every `.ptd` its keys are in, and no more memory than
    `max_memory` (bytes; by default a share of what is available, `plan.memory_limit`)."""

    def __init__(self, max_memory: int | None = None) -> None:
        self.limit = memory_limit(max_memory)
        self._plans: dict[Program, ProgramPlan] = {}

    def of(self, program: Program) -> ProgramPlan:
        found = self._plans.get(program)
        if found is None:
            found = self._plans[program] = read_plan(program.pte, program.data)
            check_plan(found, self.limit)
        return found


def verify_pairs(
    pairs: Sequence[MethodPair],
    *,
    inputs: str | os.PathLike | InputFile | None = None,
    runtime=None,
    plans: Plans | None = None,
    known: dict | None = None,
    started: float | None = None,
) -> VerifyReport:
    """Runs each pair's methods on the same inputs and compares their outputs bit for bit.

    What the files say is checked first, before any runtime loads them: each method
    pair's inputs and outputs (count, dtypes, sizes) must be alike, each program's data
    given, its memory within the limit (`Plans`). Then every old program runs, each once,
    and is released; then every new one.

    Args:
        pairs: The methods to compare, in order. Their files are not modified.
        inputs: An `.npz` of inputs (`inputs.InputFile`); methods it does not name
            run on inputs seeded from the old method's metadata.
        runtime: The runtime to use (`runtimes.find_runtime()`'s by default).
        plans: The programs as read (`Plans`), if read already.
        known: Old outputs already run (`sides.run_side`'s), as `Verifier` keeps them.
        started: When the verification began (`time.perf_counter()`), if before this.

    Returns:
        The pairs that computed alike, and the first that did not.

    Raises:
        VerifyError: No runtime imports; a file needs what the runtime lacks; an old
            method does not load or run; `inputs` does not fit.
    """
    started = time.perf_counter() if started is None else started
    plans = Plans() if plans is None else plans
    for pair in pairs:
        difference = _signature_difference(pair, plans)
        if difference is not None:
            return VerifyReport("", (), difference, 0, time.perf_counter() - started)
    runtime = runtime or find_runtime()
    given = inputs if inputs is None or isinstance(inputs, InputFile) else InputFile(inputs)
    if given is not None:
        given.check_methods([p.new_method for p in pairs])
    for pair in pairs:
        old = plans.of(pair.old).method(pair.old_method)
        runtime.check_outputs(pair.old.pte, pair.old_method, old.outputs)
    values, seeded = [], 0
    for pair in pairs:
        specs = plans.of(pair.old).method(pair.old_method).inputs
        chosen = None if given is None else given.inputs_for(pair.new_method, specs)
        if chosen is None:
            seeded += 1
            chosen = seeded_inputs(pair.new_method, specs)
        values.append(chosen)
    want = _run_old(runtime, pairs, values, known)
    try:
        got = run_side(
            runtime, [Call(p.new, p.new_method, v) for p, v in zip(pairs, values, strict=True)]
        )
    except ProgramRefused as refused:
        first = next(p for p in pairs if p.new == refused.program)
        difference = Difference(first, None, f"does not load: {refused.failure}")
        return _report(runtime, [], difference, seeded, started)
    verified: list[MethodPair] = []
    for pair, a, b in zip(pairs, want, got, strict=True):
        if isinstance(b, RuntimeFailure):
            difference = Difference(pair, None, f"does not run: {b}")
        else:
            difference = _compare(pair, a, b)
        if difference is not None:
            return _report(runtime, verified, difference, seeded, started)
        logger.debug("verified %s", pair.describe())
        verified.append(pair)
    return _report(runtime, verified, None, seeded, started)


def _run_old(runtime, pairs: Sequence[MethodPair], values: list, known: dict | None) -> list:
    """The old methods' outputs: what the new ones must compute.

    Raises:
        VerifyError: An old program does not load, or an old method does not run:
            nothing can be verified against it.
    """
    try:
        want = run_side(
            runtime,
            [Call(p.old, p.old_method, v) for p, v in zip(pairs, values, strict=True)],
            known,
        )
    except ProgramRefused as refused:
        raise VerifyError(
            f"{refused.program.pte} does not load in {runtime.name}, so nothing can be "
            f"verified against it: {refused.failure}{_limits(runtime)}"
        ) from None
    for pair, outputs in zip(pairs, want, strict=True):
        if isinstance(outputs, RuntimeFailure):
            raise VerifyError(
                f"{pair.old.pte} method {pair.old_method!r} does not run in "
                f"{runtime.name}, so nothing can be verified against it: "
                f"{outputs}{_limits(runtime)}"
            )
    return want


def _signature_difference(pair: MethodPair, plans: Plans) -> Difference | None:
    """Where the two methods' metadata differ (input or output count, dtypes, sizes):
    nothing can be compared on inputs one of them never accepted."""
    old = plans.of(pair.old).method(pair.old_method)
    new = plans.of(pair.new).method(pair.new_method)
    for what, a, b in (("inputs", old.inputs, new.inputs), ("outputs", old.outputs, new.outputs)):
        if a != b:
            return Difference(pair, None, f"{what} {_specs(b)}, the old method's {_specs(a)}")
    return None


def _limits(runtime) -> str:
    return f"; {runtime.limits}" if runtime.limits else ""


def verify_programs(
    old: Program,
    new: Program,
    methods: Sequence[str] = (),
    *,
    inputs: str | os.PathLike | None = None,
    runtime=None,
    max_memory: int | None = None,
    announce=None,
    isolated: bool = False,
) -> VerifyReport:
    """`verify_pairs` of every method of `new` with its method of `old` (`pairs_by_name`);
    `isolated`: the runtime in a child process (`child.ChildRuntime`)."""
    started = time.perf_counter()
    plans = Plans(max_memory)
    pairs = pairs_by_name(old, new, methods, plans)
    return verify_pairs(
        pairs,
        inputs=inputs,
        runtime=runtime or _runtime_if_needed(pairs, plans, announce, isolated),
        plans=plans,
        started=started,
    )


def _runtime_if_needed(pairs: Sequence[MethodPair], plans: Plans, announce, isolated: bool):
    """The runtime, unless the files' metadata answer already (None: verify_pairs says)."""
    if any(_signature_difference(p, plans) for p in pairs):
        return None
    return _find_runtime(announce, isolated)


def _find_runtime(announce, isolated: bool):
    """`find_runtime`'s, here or in a child process (`child.ChildRuntime`)."""
    if isolated:
        from emitter_filter.verify.child import shared_child

        return shared_child(announce)
    return find_runtime(announce)


class Verifier:
    """`--verify` of a command that writes programs: what can be checked before anything
    is written (a runtime imports, `--inputs` reads, each input's `.ptd` is given, it fits
    in memory, it loads, each of its methods loads and runs), then the verification of
    what was written. The inputs' outputs on seeded inputs are kept: each input loads
    once, and is released before anything is written.

    Programs are given as (pte, .ptd files) pairs, as the commands hold them.
    """

    def __init__(
        self,
        inputs: Sequence[tuple[str, Sequence[str]]],
        input_file: str | os.PathLike | None = None,
        runtime=None,
        *,
        max_memory: int | None = None,
        announce=None,
        isolated: bool = False,
    ) -> None:
        started = time.perf_counter()
        self.plans = Plans(max_memory)
        programs = list(dict.fromkeys(Program(pte, tuple(data)) for pte, data in inputs))
        for program in programs:
            self.plans.of(program)
        self.runtime = runtime or _find_runtime(announce, isolated)
        self.inputs = None if input_file is None else InputFile(input_file)
        self.known: dict = {}
        for program in programs:
            self._run_input(program)
        self.seconds = time.perf_counter() - started

    def _run_input(self, program: Program) -> None:
        """Loads `program` and each method; runs those seeded inputs can run."""
        calls = []
        for method in self.plans.of(program).methods.values():
            self.runtime.check_outputs(program.pte, method.name, method.outputs)
            try:
                values = seeded_inputs(method.name, method.inputs)
            except VerifyError:
                values = None  # Only loaded: its inputs come from --inputs, or it is refused.
            calls.append(Call(program, method.name, values))
        try:
            results = run_side(self.runtime, calls, self.known)
        except ProgramRefused as refused:
            raise VerifyError(
                f"{program.pte} does not load in {self.runtime.name}: "
                f"{refused.failure}{_limits(self.runtime)}"
            ) from None
        for call, result in zip(calls, results, strict=True):
            if isinstance(result, RuntimeFailure):
                raise VerifyError(
                    f"{program.pte} method {call.method!r} does not run in "
                    f"{self.runtime.name}, so nothing can be verified against it: "
                    f"{result}{_limits(self.runtime)}"
                )

    def _verify(self, found: Sequence[MethodPair]) -> VerifyReport:
        started = time.perf_counter() - self.seconds
        return verify_pairs(
            found,
            inputs=self.inputs,
            runtime=self.runtime,
            plans=self.plans,
            known=self.known,
            started=started,
        )

    def programs(
        self, pairs: Sequence[tuple[tuple[str, Sequence[str]], tuple[str, Sequence[str]]]]
    ) -> VerifyReport:
        """Every method of each new program against the old one's of its name."""
        found = [
            p
            for (old, new) in pairs
            for p in pairs_by_name(
                Program(old[0], tuple(old[1])), Program(new[0], tuple(new[1])), (), self.plans
            )
        ]
        return self._verify(found)

    def methods(self, pairs: Sequence[tuple]) -> VerifyReport:
        """(new, new method, old, old method) each, programs as (pte, .ptd files)."""
        found = [
            MethodPair(
                Program(new[0], tuple(new[1])),
                new_method,
                Program(old[0], tuple(old[1])),
                old_method,
            )
            for new, new_method, old, old_method in pairs
        ]
        return self._verify(found)


def _specs(specs) -> str:
    return (
        "("
        + ", ".join(
            (s.kind or "value") if s.dtype is None else f"{s.dtype} {list(s.shape)}" for s in specs
        )
        + ")"
    )


def _compare(pair: MethodPair, want: Sequence, got: Sequence) -> Difference | None:
    """The first output whose dtype, sizes or bytes differ, as a `Difference`."""
    if len(want) != len(got):
        return Difference(pair, None, f"{len(got)} outputs, the old method {len(want)}")
    for index, (a, b) in enumerate(zip(want, got, strict=True)):
        if a.dtype != b.dtype or a.shape != b.shape:
            return Difference(
                pair,
                index,
                f"{b.dtype} {list(b.shape)}, the old method's {a.dtype} {list(a.shape)}",
            )
        if a.tobytes() != b.tobytes():
            return Difference(pair, index, _how_far(a, b))
    return None


def _how_far(want, got) -> str:
    """How many elements differ, and by how much where they are numbers."""
    import numpy as np

    a, b = (np.ascontiguousarray(np.atleast_1d(x)) for x in (want, got))
    by_element = a.view(np.uint8).reshape(a.size, -1) != b.view(np.uint8).reshape(b.size, -1)
    text = f"{int(np.count_nonzero(by_element.any(axis=1)))} of {a.size} elements differ"
    if a.dtype.kind in "fiu":
        with np.errstate(all="ignore"):
            gap = np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))
        text += f" (max |diff| {gap:.6g})"
    return text


def _report(runtime, verified, difference, seeded, started) -> VerifyReport:
    return VerifyReport(
        runtime.name, tuple(verified), difference, seeded, time.perf_counter() - started
    )
