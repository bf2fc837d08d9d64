"""What `merge` wrote: `MergeReport`, its methods and where each came from.

The report renders itself: `to_json` (`merge --json`, versioned by `JSON_SCHEMA`)
and `summary` (the line the CLI prints and the log's one INFO line).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from emitter_filter.ondisk.merge_names import Choice

__all__ = ["JSON_SCHEMA", "MergedMethod", "MergeReport", "dropped_methods", "merged_methods"]

#: The value of the "schema" key of `MergeReport.to_json()` (`merge --json`).
JSON_SCHEMA = "emitter-filter-merge/1"


@dataclass(frozen=True)
class MergedMethod:
    """One method of the merged file: its name there, and where it came from.

    `same_in` are the other inputs whose method of that name is the same method
    (an exporter's constant method, in each of them): written once, from `source`.
    """

    name: str
    source: str
    source_method: str
    same_in: tuple[str, ...] = ()
    #: Which input `source` is (0 for the first): one file may be given twice.
    source_number: int = 0

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "source": self.source,
            "source_method": self.source_method,
            "same_in": list(self.same_in),
        }


@dataclass(frozen=True)
class MergeReport:
    """What `merge_files` wrote.

    Attributes:
        inputs: The programs, in the order given.
        output: The merged `.pte`.
        ptd_output: Its `.ptd` (`ptd_out`), if one was written.
        methods: Each method of the output, in order.
        bytes_before: The inputs' sizes, their `.ptd` files' included, summed.
        bytes_after: The outputs' sizes.
        stored_once: Bytes of data an input reads that the output holds once for
            several inputs (constants, delegate blobs, named data).
        dropped: The inputs' dead bytes (`audit`'s one count), not written.
        seconds: Wall time.
        dropped_methods: (input, method) of each method `--drop` left out.
        deduplicated_bytes: With `dedupe`, what storing repeats within the output
            once saved; None without.
        data: The `.ptd` files each input was read with (`data_files.data_files_for`).
        constant_buffer_inputs: The inputs that relied on the deprecated
            `constant_buffer` path, written with a constant segment instead.
    """

    inputs: tuple[str, ...]
    output: str
    ptd_output: str | None
    methods: tuple[MergedMethod, ...]
    bytes_before: int
    bytes_after: int
    stored_once: int
    dropped: int
    seconds: float
    dropped_methods: tuple[tuple[str, str], ...] = ()
    deduplicated_bytes: int | None = None
    data: tuple[tuple[str, ...], ...] = ()
    constant_buffer_inputs: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {
            "schema": JSON_SCHEMA,
            "data": [
                {"program": p, "data": list(f)} for p, f in zip(self.inputs, self.data, strict=True)
            ],
            "inputs": list(self.inputs),
            "output": self.output,
            "ptd_output": self.ptd_output,
            "methods": [m.to_json() for m in self.methods],
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "stored_once": self.stored_once,
            "dropped": self.dropped,
            "seconds": self.seconds,
            "dropped_methods": [{"source": f, "method": m} for f, m in self.dropped_methods],
            "deduplicated_bytes": self.deduplicated_bytes,
            "constant_buffer_inputs": list(self.constant_buffer_inputs),
        }

    def summary(self) -> str:
        methods = ", ".join(m.name for m in self.methods)
        count = len(self.inputs)
        written = self.output + ("" if self.ptd_output is None else f" + {self.ptd_output}")
        once = [m.name for m in self.methods if m.same_in]
        return (
            f"{count} program{'s' if count != 1 else ''} -> {written}: "
            f"{self.bytes_before:,} -> {self.bytes_after:,} B; methods {methods}"
            + (
                f" ({len(once)} the same in several inputs, written once: {', '.join(once)})"
                if once
                else ""
            )
            + (
                f"; dropped {', '.join(f'{f}:{m}' for f, m in self.dropped_methods)}"
                if self.dropped_methods
                else ""
            )
            + f"; {self.stored_once:,} B stored once for several inputs, "
            f"{self.dropped:,} B dead not written"
            + (
                ""
                if self.deduplicated_bytes is None
                else f", {self.deduplicated_bytes:,} B stored once within the output (--dedupe)"
            )
            + f", in {self.seconds * 1000:.1f} ms"
            + "".join(
                f"; {path} relied on the deprecated constant_buffer path: its "
                "constants are in the constant segment"
                for path in self.constant_buffer_inputs
            )
        )


def merged_methods(inputs: Sequence[str], choice: Choice) -> tuple[MergedMethod, ...]:
    """Each method written, with the inputs whose same method it stands for."""
    also: dict[tuple[int, int], list[str]] = {}
    for (number, _), kept in choice.same_as.items():
        also.setdefault(kept, []).append(inputs[number])
    return tuple(
        MergedMethod(name, inputs[number], method, tuple(also.get((number, position), ())), number)
        for number, (methods, names) in enumerate(zip(choice.originals, choice.names, strict=True))
        for position, (method, name) in enumerate(zip(methods, names, strict=True))
        if name is not None
    )


def dropped_methods(inputs: Sequence[str], choice: Choice) -> tuple[tuple[str, str], ...]:
    """(input, method) of each method `--drop` left out (not one written once for several)."""
    return tuple(
        (inputs[number], method)
        for number, (methods, names) in enumerate(zip(choice.originals, choice.names, strict=True))
        for position, (method, name) in enumerate(zip(methods, names, strict=True))
        if name is None and (number, position) not in choice.same_as
    )
