"""Does each method of a new program compute, bit for bit, what its old method computes?

Before: OLD.pte (+ .ptd), a method `forward`. After: NEW.pte (+ .ptd) written from it, its
method `forward` (or another name for it, `--method NEW=OLD`). Each pair of methods runs
in one runtime (`runtimes.find_runtime`), each side a fresh load, on the same inputs
(`inputs.py`); the outputs must have the same count, dtypes, sizes and bytes. The first
pair that differs is the report's `difference`: a new method that does not load, inputs
the two methods describe differently, or an output whose bytes differ. An old method that
does not load or run is no difference: nothing can be verified against it (`VerifyError`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

from emitter_filter.errors import VerifyError
from emitter_filter.verify.inputs import InputFile, seeded_inputs
from emitter_filter.verify.runtimes import RuntimeFailure, find_runtime

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
]

logger = logging.getLogger(__name__)

#: The value of the "schema" key of `VerifyReport.to_json()` (`verify --json`).
JSON_SCHEMA = "emitter-filter-verify/1"


@dataclass(frozen=True)
class Program:
    """A `.pte` as a runtime loads it: with its `.ptd` files (at most one)."""

    pte: str
    data: tuple[str, ...] = ()

    def data_file(self) -> str | None:
        """The one `.ptd` a runtime's Python API takes, or None."""
        if len(self.data) > 1:
            raise VerifyError(
                f"{self.pte} loads with {len(self.data)} .ptd files "
                f"({', '.join(self.data)}); the runtimes' Python APIs load one"
            )
        return self.data[0] if self.data else None


@dataclass(frozen=True)
class MethodPair:
    """The method `new_method` of `new`, to compute what `old_method` of `old` computes."""

    new: Program
    new_method: str
    old: Program
    old_method: str

    def describe(self) -> str:
        return (
            f"{self.new.pte} method {self.new_method!r} (from {self.old.pte} method "
            f"{self.old_method!r})"
        )


@dataclass(frozen=True)
class Difference:
    """Where a new method first computes otherwise.

    Attributes:
        pair: The methods compared.
        output: The index of the first output that differs, or None when the method
            does not load or run, or its inputs or output count differ.
        reason: What differs, one line.
    """

    pair: MethodPair
    output: int | None
    reason: str

    def line(self) -> str:
        where = "" if self.output is None else f" output {self.output}"
        return f"{self.pair.describe()}{where}: {self.reason}"


@dataclass(frozen=True)
class VerifyReport:
    """What `verify_pairs` ran.

    Attributes:
        runtime: The runtime both sides ran in.
        verified: The pairs that computed alike, in order.
        difference: The first that did not, or None; the pairs after it are not run.
        seeded: How many of the methods ran on seeded inputs (the rest on `--inputs`).
        seconds: Wall time.
    """

    runtime: str
    verified: tuple[MethodPair, ...]
    difference: Difference | None
    seeded: int
    seconds: float

    @property
    def ok(self) -> bool:
        return self.difference is None

    def summary(self) -> str:
        """One line, for the CLI."""
        if self.difference is not None:
            return f"verify failed in {self.runtime}: {self.difference.line()}"
        count = len(self.verified)
        given = count - self.seeded
        return (
            f"verified in {self.runtime}: {count} method{'s' if count != 1 else ''}, "
            f"outputs bit-identical ("
            + (f"{self.seeded} on seeded inputs" if self.seeded else "")
            + (", " if self.seeded and given else "")
            + (f"{given} on --inputs" if given else "")
            + f") in {self.seconds:.2f} s"
        )

    def to_json(self) -> dict:
        def pair(p: MethodPair) -> dict:
            return {
                "new": p.new.pte,
                "new_method": p.new_method,
                "new_data": list(p.new.data),
                "old": p.old.pte,
                "old_method": p.old_method,
                "old_data": list(p.old.data),
            }

        difference = self.difference
        return {
            "schema": JSON_SCHEMA,
            "runtime": self.runtime,
            "ok": self.ok,
            "verified": [pair(p) for p in self.verified],
            "difference": None
            if difference is None
            else {
                **pair(difference.pair),
                "output": difference.output,
                "reason": difference.reason,
            },
            "seeded": self.seeded,
            "seconds": self.seconds,
        }


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
    old: Program, new: Program, methods: Sequence[str] = (), runtime=None
) -> list[MethodPair]:
    """Every method of `new` with the method of `old` of its name, or the one `methods`
    (`NEW=OLD`) gives it.

    Raises:
        VerifyError: A rename names what is not there, or a method of `new` has no
            method of `old` to compare with.
    """
    runtime = runtime or find_runtime()
    renames = _renames(methods)
    new_methods = _method_names(runtime, new)
    old_methods = _method_names(runtime, old)
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


def _method_names(runtime, program: Program) -> list[str]:
    try:
        return runtime.method_names(program.pte)
    except RuntimeFailure as failure:
        raise VerifyError(f"{program.pte} does not load in {runtime.name}: {failure}") from None


def verify_pairs(
    pairs: Sequence[MethodPair],
    *,
    inputs: str | os.PathLike | InputFile | None = None,
    runtime=None,
) -> VerifyReport:
    """Runs each pair's methods on the same inputs and compares their outputs bit for bit.

    Args:
        pairs: The methods to compare, in order. Their files are not modified.
        inputs: An `.npz` of inputs (`inputs.InputFile`); methods it does not name
            run on seeded ones.
        runtime: The runtime to use (`runtimes.find_runtime()`'s by default).

    Returns:
        The pairs that computed alike, and the first that did not.

    Raises:
        VerifyError: No runtime imports; a file needs what the runtime lacks; an old
            method does not load or run; `inputs` does not fit.
    """
    started = time.perf_counter()
    runtime = runtime or find_runtime()
    given = inputs if inputs is None or isinstance(inputs, InputFile) else InputFile(inputs)
    if given is not None:
        given.check_methods([p.new_method for p in pairs])
    verified: list[MethodPair] = []
    seeded = 0
    for pair in pairs:
        difference, was_seeded = _verify_pair(runtime, pair, given)
        seeded += was_seeded
        if difference is not None:
            return _report(runtime, verified, difference, seeded, started)
        logger.debug("verified %s", pair.describe())
        verified.append(pair)
    return _report(runtime, verified, None, seeded, started)


def _verify_pair(
    runtime, pair: MethodPair, given: InputFile | None
) -> tuple[Difference | None, bool]:
    """Both methods of `pair` on the same inputs: (what differs or None, whether seeded)."""
    old_data, new_data = pair.old.data_file(), pair.new.data_file()
    runtime.check_data(pair.old.pte, old_data)
    runtime.check_data(pair.new.pte, new_data)
    specs = _old(
        runtime, pair, lambda: runtime.input_specs(pair.old.pte, old_data, pair.old_method)
    )
    try:
        new_specs = runtime.input_specs(pair.new.pte, new_data, pair.new_method)
    except RuntimeFailure as failure:
        return Difference(pair, None, f"does not load: {failure}"), False
    if new_specs != specs:
        return Difference(
            pair, None, f"takes inputs {_specs(new_specs)}, the old method {_specs(specs)}"
        ), False
    values = None if given is None else given.inputs_for(pair.new_method, specs)
    seeded = values is None
    if seeded:
        values = seeded_inputs(pair.new_method, specs)
    want = _old(runtime, pair, lambda: runtime.run(pair.old.pte, old_data, pair.old_method, values))
    try:
        got = runtime.run(pair.new.pte, new_data, pair.new_method, values)
    except RuntimeFailure as failure:
        return Difference(pair, None, f"does not run: {failure}"), seeded
    return _compare(pair, want, got), seeded


def verify_programs(
    old: Program,
    new: Program,
    methods: Sequence[str] = (),
    *,
    inputs: str | os.PathLike | None = None,
    runtime=None,
) -> VerifyReport:
    """`verify_pairs` of every method of `new` with its method of `old` (`pairs_by_name`)."""
    runtime = runtime or find_runtime()
    return verify_pairs(pairs_by_name(old, new, methods, runtime), inputs=inputs, runtime=runtime)


class Verifier:
    """`--verify` of a command that writes programs: what can be checked before anything
    is written (a runtime imports, `--inputs` reads, each input loads in it), then the
    verification of what was written.

    Programs are given as (pte, .ptd files) pairs, as the commands hold them.
    """

    def __init__(
        self,
        inputs: Sequence[tuple[str, Sequence[str]]],
        input_file: str | os.PathLike | None = None,
        runtime=None,
    ) -> None:
        self.runtime = runtime or find_runtime()
        self.inputs = None if input_file is None else InputFile(input_file)
        for pte, data in inputs:
            program = Program(pte, tuple(data))
            self.runtime.check_data(program.pte, program.data_file())
            _method_names(self.runtime, program)

    def programs(
        self, pairs: Sequence[tuple[tuple[str, Sequence[str]], tuple[str, Sequence[str]]]]
    ) -> VerifyReport:
        """Every method of each new program against the old one's of its name."""
        found = [
            p
            for (old, new) in pairs
            for p in pairs_by_name(
                Program(old[0], tuple(old[1])), Program(new[0], tuple(new[1])), (), self.runtime
            )
        ]
        return verify_pairs(found, inputs=self.inputs, runtime=self.runtime)

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
        return verify_pairs(found, inputs=self.inputs, runtime=self.runtime)


def _old(runtime, pair: MethodPair, call):
    """`call()` on the old side, whose refusal is no difference but a verify that cannot be."""
    try:
        return call()
    except RuntimeFailure as failure:
        limits = f"; {runtime.limits}" if runtime.limits else ""
        raise VerifyError(
            f"{pair.old.pte} method {pair.old_method!r} does not run in "
            f"{runtime.name}, so nothing can be verified against it: "
            f"{failure}{limits}"
        ) from None


def _specs(specs) -> str:
    return (
        "("
        + ", ".join("value" if s.dtype is None else f"{s.dtype} {list(s.shape)}" for s in specs)
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
