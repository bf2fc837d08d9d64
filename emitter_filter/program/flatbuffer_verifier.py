"""What the flatbuffers Verifier refuses in a flatbuffer, read by its schema (`flatbuffer_tables`).

`Schema.read` needs every offset inside the buffer; the Verifier (which ExecuTorch's
`InternalConsistency` verification runs) wants more: tables 4-aligned, vtables 2-aligned
and of even size, scalars aligned to their size, offsets 4-aligned and never 0, vectors
and strings 4-aligned, strings ending in NUL. The validator asks it of every program
(`validate`), `read_ptn` of a `.ptn`'s graph.
"""

from __future__ import annotations

import struct

from emitter_filter.program.flatbuffer_tables import _SCALARS, Schema

__all__ = ["verify_flatbuffer"]

_U16 = struct.Struct("<H").unpack_from
_U32 = struct.Struct("<I").unpack_from
_I32 = struct.Struct("<i").unpack_from


def verify_flatbuffer(schema: Schema, buffer: bytes, offset: int = 0) -> str | None:
    """What the flatbuffers Verifier refuses in the flatbuffer of `schema` at `offset` of
    `buffer`, or None. Walks the tables with an explicit stack, in the schema's field order."""
    checker = _Verifier(schema, buffer)
    try:
        return checker.run(offset)
    except struct.error as error:
        return f"offset outside the buffer: {error}"


class _Verifier:
    """`verify_flatbuffer`'s walk: the first thing the flatbuffers Verifier refuses."""

    def __init__(self, schema: Schema, buffer: bytes) -> None:
        self.schema, self.buffer = schema, buffer

    def _inside(self, at: int, size: int, what: str) -> str | None:
        if at < 0 or at + size > len(self.buffer):
            return f"{what} at {at} ({size} bytes) outside the buffer ({len(self.buffer)})"
        return None

    def _offset(self, at: int, what: str) -> tuple[int | None, str | None]:
        """The target of the uoffset at `at` (flatbuffers `Verifier::VerifyOffset`); None
        and the problem when it has none."""
        if at % 4:
            return None, f"{what}: offset at {at} is not 4-aligned"
        problem = self._inside(at, 4, what)
        if problem:
            return None, problem
        value = _U32(self.buffer, at)[0]
        if value == 0 or value >= 1 << 31:
            return None, f"{what}: offset {value} at {at}"
        problem = self._inside(at + value, 1, what)
        return (None, problem) if problem else (at + value, None)

    def _vector(self, at: int, item_size: int, what: str, string: bool = False) -> str | None:
        if at % 4:
            return f"{what}: vector at {at} is not 4-aligned"
        problem = self._inside(at, 4, what)
        if problem:
            return problem
        count = _U32(self.buffer, at)[0]
        problem = self._inside(at + 4, count * item_size + (1 if string else 0), what)
        if problem:
            return problem
        if string and self.buffer[at + 4 + count] != 0:
            return f"{what}: string at {at} does not end in NUL"
        return None

    def run(self, offset: int) -> str | None:
        root, problem = self._offset(offset, "root")
        if root is None:
            return problem
        stack = [(root, self.schema.root)]
        while stack:
            pos, table = stack.pop()
            problem = self._table(pos, table, stack)
            if problem:
                return problem
        return None

    def _table(self, pos: int, table: str, stack: list) -> str | None:
        """Checks one table's vtable and fields; pushes the tables it points to."""
        buffer = self.buffer
        if pos % 4:
            return f"{table} at {pos} is not 4-aligned"
        problem = self._inside(pos, 4, table)
        if problem:
            return problem
        vtable = pos - _I32(buffer, pos)[0]
        if vtable % 2 or self._inside(vtable, 4, f"{table} vtable"):
            return f"{table} at {pos}: vtable at {vtable}"
        size, inline = _U16(buffer, vtable)[0], _U16(buffer, vtable + 2)[0]
        if (
            size % 2
            or size < 4
            or self._inside(vtable, size, "vtable")
            or self._inside(pos, inline, table)
        ):
            return f"{table} at {pos}: vtable of {size} bytes, table of {inline}"
        slot = 0
        for field, kind in self.schema.tables[table]:
            union_type = 0  # the union's type byte: 0 is NONE (and not a union)
            if kind in self.schema.unions:
                at = _U16(buffer, vtable + 4 + 2 * slot)[0] if 4 + 2 * slot < size else 0
                union_type = buffer[pos + at] if at else 0
                slot += 1
            at = _U16(buffer, vtable + 4 + 2 * slot)[0] if 4 + 2 * slot < size else 0
            slot += 1
            if not at or kind is None:
                continue
            what = f"{table}.{field}"
            at += pos
            if kind in _SCALARS:
                width = struct.calcsize(_SCALARS[kind])
                if at % width or self._inside(at, width, what):
                    return f"{what} at {at} is not {width}-aligned or outside the buffer"
                continue
            target, problem = self._offset(at, what)
            if target is None:
                return problem
            if kind == "string":
                problem = self._vector(target, 1, what, string=True)
            elif kind.startswith("["):
                item = kind[1:-1]
                width = struct.calcsize(_SCALARS[item]) if item in _SCALARS else 4
                problem = self._vector(target, width, what)
                if not problem and item not in _SCALARS:
                    for index in range(_U32(buffer, target)[0]):
                        element, problem = self._offset(target + 4 + 4 * index, what)
                        if element is None:
                            return problem
                        stack.append((element, item))
            elif kind in self.schema.unions:
                members = self.schema.unions[kind]
                if 0 < union_type <= len(members):
                    stack.append((target, members[union_type - 1]))
            else:
                stack.append((target, kind))
            if problem:
                return problem
        return None
