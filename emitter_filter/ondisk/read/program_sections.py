"""Which bytes of the program flatbuffer each plan's values, instructions and operators take.

`explain` splits the program flatbuffer by what its bytes hold. A flatbuffer
object's bytes are known exactly: a table's inline fields (`vtable[1]` bytes from
its start) and its vtable, a vector's length and elements, a string's length,
bytes and NUL. This walks the tables of `schema/program.fbs` (ExecuTorch 1.5.1;
keep `_SCHEMA` in sync) from each plan's `values`, `chains` and `operators` and
counts the bytes of every object it reaches once (a vtable several tables share
counts for the first). The rest of the flatbuffer (the other tables, the
padding the builder inserts) stays `program` in `explain`.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Mapping

from emitter_filter._program_fbs.executorch_flatbuffer.InstructionArguments import (
    InstructionArguments,
)
from emitter_filter._program_fbs.executorch_flatbuffer.KernelTypes import KernelTypes
from emitter_filter.errors import PteFormatError

__all__ = ["SECTIONS", "count_plan_sections"]

#: The sections `count_plan_sections` counts, per plan: `ExecutionPlan`'s fields.
SECTIONS = {"values": 2, "instructions": 5, "operators": 6}  # field slots in ExecutionPlan

# Field kinds: None (a scalar), "string", ("vector", element size), ("tables", table),
# ("table", table), ("union", {type: table}) in the slot after its type's.
_KERNEL_TYPES = {
    KernelTypes.Null: "Empty",
    KernelTypes.Int: "Scalars",
    KernelTypes.Bool: "Scalars",
    KernelTypes.Double: "Scalars",
    KernelTypes.Tensor: "Tensor",
    KernelTypes.String: "String",
    KernelTypes.IntList: "List8",
    KernelTypes.DoubleList: "List8",
    KernelTypes.BoolList: "List1",
    KernelTypes.TensorList: "List4",
    KernelTypes.OptionalTensorList: "List4",
}
_INSTRUCTIONS = {
    InstructionArguments.KernelCall: "Call",
    InstructionArguments.DelegateCall: "Call",
    InstructionArguments.MoveCall: "Scalars",
    InstructionArguments.JumpFalseCall: "Scalars",
    InstructionArguments.FreeCall: "Scalars",
}
_SCHEMA: Mapping[str, tuple] = {
    "Empty": (),
    "Scalars": (),
    "String": ("string",),
    "List1": (("vector", 1),),
    "List4": (("vector", 4),),
    "List8": (("vector", 8),),
    "EValue": (None, ("union", _KERNEL_TYPES)),
    "Tensor": (
        None,
        None,
        ("vector", 4),
        ("vector", 1),
        None,
        None,
        ("table", "Scalars"),
        None,
        None,
        ("table", "ExtraTensorInfo"),
    ),
    "ExtraTensorInfo": (None, "string"),
    "Operator": ("string", "string"),
    "Instruction": (None, ("union", _INSTRUCTIONS)),
    "Call": (None, ("vector", 4)),
    "Chain": (("vector", 4), ("vector", 4), ("tables", "Instruction"), ("tables", "FrameList")),
    "FrameList": (("tables", "Frame"),),
    "Frame": ("string", None, "string", "string"),
}
_ROOTS = {
    "values": ("tables", "EValue"),
    "instructions": ("tables", "Chain"),
    "operators": ("tables", "Operator"),
}


class _Walker:
    """Counts the bytes of the objects reachable from one field, each object once."""

    def __init__(self, data: bytes, name: str) -> None:
        self.data, self.name = data, name
        self.seen: dict[int, int] = {}  # start -> size of every object counted
        # The bytes counted so far, as sorted disjoint [start, end) spans: an object's span can
        # overlap another's where a producer shares a vtable between tables of different sizes
        # (flatbuffers 24.3's Python builder does), so the table size its vtable gives is the
        # other table's; such bytes count once, in the first section that reaches them.
        self._starts: list[int] = []
        self._ends: list[int] = []
        self.nbytes = 0

    def _u32(self, at: int) -> int:
        if not 0 <= at <= len(self.data) - 4:
            raise PteFormatError(self.name, f"program flatbuffer: offset {at} outside it", at)
        return struct.unpack_from("<I", self.data, at)[0]

    def _u16(self, at: int) -> int:
        if not 0 <= at <= len(self.data) - 2:
            raise PteFormatError(self.name, f"program flatbuffer: offset {at} outside it", at)
        return struct.unpack_from("<H", self.data, at)[0]

    def _claim(self, start: int, size: int) -> bool:
        """Counts `size` bytes at `start` unless that object was counted already."""
        if start in self.seen:
            return False
        if start + size > len(self.data):
            raise PteFormatError(self.name, "program flatbuffer: object past its end", start)
        self.seen[start] = size
        self.nbytes += self._cover(start, start + size)
        return True

    def _cover(self, start: int, end: int) -> int:
        """Adds [start, end) to the counted spans; returns how many of its bytes are new."""
        first = bisect.bisect_left(self._ends, start)
        last = bisect.bisect_right(self._starts, end)
        spans = list(zip(self._starts[first:last], self._ends[first:last], strict=True))
        covered = sum(max(0, min(e, end) - max(s, start)) for s, e in spans)
        merged = (min([start, *(s for s, _ in spans)]), max([end, *(e for _, e in spans)]))
        self._starts[first:last], self._ends[first:last] = [merged[0]], [merged[1]]
        return end - start - covered

    def check_disjoint(self, reserved: tuple[int, int]) -> None:
        """No object counted overlaps the `reserved` range (the header)."""
        start, size = reserved
        spans = zip(self._starts, self._ends, strict=True)
        hit = next((s for s, e in spans if s < start + size and start < e), None)
        if size and hit is not None:
            raise PteFormatError(
                self.name, f"program flatbuffer: an object at {hit} overlaps the header", hit
            )

    def field(self, kind, at: int, union_type: int | None = None) -> None:
        """The object a field at absolute `at` refers to (an offset relative to `at`)."""
        target = at + self._u32(at)
        if kind == "string":
            self._claim(target, 4 + self._u32(target) + 1)
        elif kind[0] == "vector":
            self._claim(target, 4 + self._u32(target) * kind[1])
        elif kind[0] == "tables":
            count = self._u32(target)
            if self._claim(target, 4 + 4 * count):
                for i in range(count):
                    element = target + 4 + 4 * i
                    self.table(kind[1], element + self._u32(element))
        elif kind[0] == "table":
            self.table(kind[1], target)
        elif kind[0] == "union":
            table = kind[1].get(union_type)
            if table is not None:
                self.table(table, target)

    def table(self, name: str, at: int) -> None:
        vtable = (
            at - struct.unpack_from("<i", self.data, at)[0] if 0 <= at <= len(self.data) - 4 else -1
        )
        vtable_size, table_size = self._u16(vtable), self._u16(vtable + 2)
        self._claim(vtable, vtable_size)
        if not self._claim(at, table_size):
            return
        union_type = None
        for slot, kind in enumerate(_SCHEMA[name]):
            if 4 + 2 * slot >= vtable_size:
                break
            offset = self._u16(vtable + 4 + 2 * slot)
            if not offset:
                continue
            if kind is None:
                union_type = self.data[at + offset]
            else:
                self.field(kind, at + offset, union_type)


def count_plan_sections(
    data: bytes, name: str, header: tuple[int, int] = (8, 0)
) -> list[dict[str, int]]:
    """Bytes of each plan's `values`, `instructions` (its chains) and `operators`, by plan.

    Args:
        data: The program flatbuffer (the file's first `program_size` bytes). Not modified.
        name: The file's name, for errors.
        header: (offset, length) of the extended header, which no object may overlap.

    Raises:
        PteFormatError: An offset points outside the flatbuffer.
    """
    walker = _Walker(data, name)
    root = walker._u32(0)
    program_vtable = root - struct.unpack_from("<i", data, root)[0]
    plans_slot = 1  # Program.execution_plan
    if 4 + 2 * plans_slot >= walker._u16(program_vtable):
        return []
    plans_field = walker._u16(program_vtable + 4 + 2 * plans_slot)
    if not plans_field:
        return []
    vector = root + plans_field + walker._u32(root + plans_field)
    counts = []
    for i in range(walker._u32(vector)):
        element = vector + 4 + 4 * i
        plan = element + walker._u32(element)
        plan_vtable = plan - struct.unpack_from("<i", data, plan)[0]
        vtable_size = walker._u16(plan_vtable)
        found = {}
        for section, slot in SECTIONS.items():
            walker.nbytes = 0
            offset = walker._u16(plan_vtable + 4 + 2 * slot) if 4 + 2 * slot < vtable_size else 0
            if offset:
                walker.field(_ROOTS[section], plan + offset)
            found[section] = walker.nbytes
        counts.append(found)
    walker.check_disjoint(header)
    return counts
