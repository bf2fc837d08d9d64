"""What each method needs in memory, read from the file, beside its bytes.

    forward: planned 16,640 B (memory id 1: 16,640); constants 1,056,768 B; .ptd 0 B
      XNNPACK packs this method's weights into memory of its own at load unless its
      weights cache is on (not counted)

The planned arenas are `read.planned_memory`'s (`non_const_buffer_sizes`); the
constants and `.ptd` bytes a method reads are `explain`'s parts whose readers are
its calls. What a runtime adds at load is said where it applies and never made a
number: XNNPACK packs a delegate's weights per method unless its weights cache is
on, and a named-data or `.ptd` key read by several methods is loaded once per
method when the loader reads rather than maps (C++ `Module`'s `LoadMode::File`;
`Method::parse_external_constants`). `explain`, `diff`, `budget` and the plugin
(through `budget`) all ask `method_memory`.
"""

from __future__ import annotations

import fractions
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from emitter_filter.ondisk.explain_part import Part
from emitter_filter.ondisk.read.planned_memory import PlannedMemory

__all__ = [
    "MethodMemory",
    "MemoryChange",
    "method_memory",
    "memory_json",
    "memory_lines",
    "memory_changes",
    "memory_record",
    "memory_over_budget",
    "recorded_memory",
]

_PTE_CONSTANTS = ("constant", "named_data")
_PTD_CONSTANTS = ("external", "named_data")
_KEYED = ("named_data", "external")


class _Explained(Protocol):
    """What an `explanation.Explanation` holds that a method's memory is read from: a
    protocol, so that the explanation, which renders its methods' memory, is not imported
    back."""

    @property
    def path(self) -> str: ...
    @property
    def files(self) -> tuple[tuple[str, int], ...]: ...
    @property
    def parts(self) -> tuple[Part, ...]: ...
    @property
    def outside(self) -> tuple[Part, ...]: ...
    @property
    def memory(self) -> tuple[PlannedMemory, ...]: ...
    @property
    def programs(self) -> Sequence[_Explained]: ...


@dataclass(frozen=True)
class MethodMemory:
    """One method: its planned arenas, the constant bytes it reads, and what a runtime
    adds at load that the file does not say.

    Attributes:
        planned: Its arenas (`planned_memory.PlannedMemory`).
        constant_bytes: The `.pte`'s constant and named-data bytes its calls read.
        external_bytes: The `.ptd` bytes its calls read (external tensors of no `.ptd`
            given: sized from their shapes).
        multipliers: What a runtime loads more than once, said, not counted.
    """

    planned: PlannedMemory
    constant_bytes: int
    external_bytes: int
    multipliers: tuple[str, ...] = ()

    @property
    def method(self) -> str:
        return self.planned.method

    def to_json(self) -> dict:
        return {
            "method": self.method,
            "planned_bytes": self.planned.planned_bytes,
            "memory_ids": [
                {"memory_id": memory_id, "planned_bytes": size}
                for memory_id, size in self.planned.by_memory_id.items()
            ],
            "constant_bytes": self.constant_bytes,
            "external_bytes": self.external_bytes,
            "load_multipliers": list(self.multipliers),
        }

    def line(self) -> str:
        arenas = ", ".join(
            f"memory id {memory_id}: {size:,}"
            for memory_id, size in self.planned.by_memory_id.items()
        )
        return (
            f"{self.method}: planned {self.planned.planned_bytes:,} B"
            f"{f' ({arenas})' if arenas else ''}; constants {self.constant_bytes:,} B; "
            f".ptd {self.external_bytes:,} B"
        )


def _reads(part: Part, method: str) -> bool:
    return method in part.methods


def _multipliers(explanation: _Explained, method: str) -> tuple[str, ...]:
    notes = []
    xnnpack = any(
        _reads(p, method) and any("xnnpack" in name.lower() for name in p.names)
        for p in explanation.parts
        if p.storage in ("delegate", "delegate_inline")
    )
    if xnnpack:
        notes.append(
            "XNNPACK packs this method's weights into memory of its own at load, unless its "
            "weights cache is on (not counted)"
        )
    shared = [
        p
        for p in (*explanation.parts, *explanation.outside)
        if p.storage in _KEYED and _reads(p, method) and len(p.methods) > 1
    ]
    if shared:
        others = sorted({m for p in shared for m in p.methods} - {method})
        notes.append(
            f"{len(shared)} key(s), {sum(p.nbytes for p in shared):,} B, also read by "
            f"{', '.join(others)}: loaded once per method where the loader reads rather than "
            "maps (C++ Module's LoadMode::File; not counted)"
        )
    return tuple(notes)


def method_memory(explanation: _Explained) -> tuple[MethodMemory, ...]:
    """What each method of an explained program plans, reads and adds at load."""
    pte = explanation.files[0][0] if explanation.files else explanation.path
    found = []
    for planned in explanation.memory:
        method = planned.method
        constants = sum(
            p.nbytes
            for p in explanation.parts
            if p.file == pte and p.storage in _PTE_CONSTANTS and _reads(p, method)
        )
        external = sum(
            p.nbytes
            for p in (*explanation.parts, *explanation.outside)
            if p.file != pte and p.storage in _PTD_CONSTANTS and _reads(p, method)
        )
        found.append(MethodMemory(planned, constants, external, _multipliers(explanation, method)))
    return tuple(found)


def memory_json(explanation: _Explained) -> list[dict]:
    """`explain --json`'s "methods": each method's `MethodMemory.to_json`."""
    return [m.to_json() for m in method_memory(explanation)]


def memory_lines(explanation: _Explained) -> list[str]:
    """`explain`'s lines: each method's memory, then what loading multiplies (a set's:
    each program's, under its path)."""
    lines = []
    for program in explanation.programs:
        lines += [f"{program.path}: {line}" for line in memory_lines(program)]
    for memory in method_memory(explanation):
        lines.append(f"memory {memory.line()}")
        lines += [f"  {note}" for note in memory.multipliers]
    return lines


@dataclass(frozen=True)
class MemoryChange:
    """One arena of one method, in OLD and NEW (0 where a side has none)."""

    method: str
    memory_id: int
    old: int
    new: int

    @property
    def delta(self) -> int:
        return self.new - self.old

    def line(self) -> str:
        verb = "grew" if self.delta > 0 else "shrank"
        return (
            f"{self.method} memory id {self.memory_id}: planned {verb} "
            f"{self.old:,} -> {self.new:,} B ({self.delta:+,})"
        )

    def to_json(self) -> dict:
        return {
            "method": self.method,
            "memory_id": self.memory_id,
            "old": self.old,
            "new": self.new,
            "delta": self.delta,
        }


def _arenas(memory: Sequence[PlannedMemory]) -> dict[str, dict[int, int]]:
    return {m.method: m.by_memory_id for m in memory}


def memory_changes(
    old: Sequence[PlannedMemory], new: Sequence[PlannedMemory]
) -> tuple[MemoryChange, ...]:
    """Each method's arenas that grew or shrank, by method then memory id (methods only on
    one side count from 0)."""
    before, after = _arenas(old), _arenas(new)
    changes = []
    for method in dict.fromkeys([*before, *after]):
        was, now = before.get(method, {}), after.get(method, {})
        for memory_id in sorted({*was, *now}):
            if was.get(memory_id, 0) != now.get(memory_id, 0):
                changes.append(
                    MemoryChange(method, memory_id, was.get(memory_id, 0), now.get(memory_id, 0))
                )
    return tuple(changes)


def memory_record(memory: Sequence[PlannedMemory]) -> dict:
    """A budget file's "methods": each method's planned bytes, and per memory id."""
    return {
        m.method: {
            "planned_bytes": m.planned_bytes,
            "memory_ids": {str(i): size for i, size in m.by_memory_id.items()},
        }
        for m in memory
    }


def recorded_memory(record: Mapping) -> tuple[PlannedMemory, ...]:
    """The arenas a budget's "methods" recorded, as `PlannedMemory` (index 0 reserved)."""
    found = []
    for method, entry in record.items():
        ids = {int(i): int(size) for i, size in entry.get("memory_ids", {}).items()}
        arenas = [0] * (max(ids, default=0) + 1)
        for memory_id, size in ids.items():
            arenas[memory_id] = size
        found.append(PlannedMemory(method, tuple(arenas)))
    return tuple(found)


def memory_over_budget(
    record: Mapping, memory: Sequence[PlannedMemory], tolerance_percent: float = 0.0
) -> tuple[str, ...]:
    """Each method planning more than its recorded planned bytes plus `tolerance_percent`:
    a line naming the method, the growth and the memory ids that grew. A method the
    record lacks counts from 0."""
    # Exactly, as a fraction: a float product overflows for a huge tolerance.
    allowed = 1 + fractions.Fraction(tolerance_percent) / 100
    over = []
    recorded = recorded_memory(record)
    by_method = {m.method: m for m in recorded}
    changes = memory_changes(recorded, memory)
    for now in memory:
        budget = by_method[now.method].planned_bytes if now.method in by_method else 0
        limit = int(budget * allowed)
        if now.planned_bytes <= limit:
            continue
        grew = "; ".join(c.line() for c in changes if c.method == now.method and c.delta > 0)
        over.append(
            f"{now.method}: planned memory {now.planned_bytes:,} B, budget {budget:,} B "
            f"(allowed {limit:,}): {now.planned_bytes - budget:+,} B ({grew})"
        )
    return tuple(over)
