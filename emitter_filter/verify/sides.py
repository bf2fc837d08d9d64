"""One side of a verification (every old method, or every new one) run in a runtime:
each program loaded once, its methods run in that load, the load released before the
next program's; outputs kept, so that the old program is gone from memory before the
new one loads.

A method runs at most once per load: a stateful method (a KV cache, a mutated buffer)
starts from the file's state. A method asked to run twice on other inputs (two new
methods from one old method, each given its own `--inputs`) gets a load of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from emitter_filter.verify.runtimes import RuntimeFailure

__all__ = ["Call", "ProgramRefused", "input_key", "run_side"]


@dataclass(frozen=True)
class Call:
    """A method of a program (`compare.Program`) to run on `values` ((spec, array) each),
    or only to load (None)."""

    program: Any  # compare.Program, which imports this module
    method: str
    values: Sequence | None


class ProgramRefused(Exception):
    """A program the runtime does not load at all."""

    def __init__(self, program, failure: RuntimeFailure) -> None:
        super().__init__(str(failure))
        self.program, self.failure = program, failure


def input_key(method: str, values: Sequence | None) -> tuple:
    """What tells two runs of `method` apart: their inputs' types, sizes and bytes (None:
    the method is only loaded)."""
    if values is None:
        return (method, None)
    return (method, tuple((str(a.dtype), a.shape, a.tobytes()) for _, a in values))


def run_side(runtime, calls: Sequence[Call], known: dict | None = None) -> list:
    """Each call's outputs (numpy arrays) or its method's `RuntimeFailure`, in order.

    `known` holds outputs already run ({(program, input_key): outputs}); what is run
    here is added to it.

    Raises:
        ProgramRefused: A program does not load.
    """
    known = {} if known is None else known
    keys = [(c.program, input_key(c.method, c.values)) for c in calls]
    # Each program's runs in rounds: a method once per round (one load each).
    rounds: dict[Any, list[dict[str, tuple]]] = {}
    for call, key in zip(calls, keys, strict=True):
        if key in known:
            continue
        program_rounds = rounds.setdefault(call.program, [])
        for round_ in program_rounds:
            if round_.get(call.method, key) == key:
                round_[call.method] = key
                break
        else:
            program_rounds.append({call.method: key})
    values = {key: call.values for call, key in zip(calls, keys, strict=True)}
    for program, program_rounds in rounds.items():
        for round_ in program_rounds:
            run = [(method, values[key]) for method, key in round_.items()]
            try:
                results = runtime.run_methods(program.pte, program.data_file(), run)
            except RuntimeFailure as failure:
                raise ProgramRefused(program, failure) from None
            for key, result in zip(round_.values(), results, strict=True):
                known[key] = result
    return [known[key] for key in keys]
