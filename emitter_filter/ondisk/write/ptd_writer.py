"""Pack a `.ptd` flatbuffer (`FlatTensor`) byte for byte as ExecuTorch writes it, in Python.

ExecuTorch does not build the `FlatTensor` with the flatbuffers Python builder:
`extension/flat_tensor/serialize/serialize.py:_serialize_to_flatbuffer` dumps the
`FlatTensor` dataclass to JSON and has the wheel's `flatc --binary` compile it.
This module writes what that flatc writes, with neither executorch nor flatc:

- flatc's JSON parser (`idl_parser.cpp`, `Parser::ParseTable`) builds children
  as it meets them, in JSON order (the dataclass field order: `version,
  segments, named_data`; `offset, size`; `key, segment_index, tensor_layout`;
  `scalar_type, sizes, dim_order`), each vector's elements in list order;
- it then adds a table's fields largest scalar first (8, 4, 2, 1 bytes; offsets
  count as 4), within one size in reverse JSON order; a field equal to its
  schema default (0) is not written, an empty vector is, a `null` table is not;
- `_FlatcBuilder` lays the bytes out as flatc's C++ `FlatBufferBuilder` does
  (alignment, padding, vtables shared when their bytes are equal, the root and
  file identifier). The flatbuffers Python `Builder` does so only in some
  releases (24.3 shares vtables whose table sizes differ), so it is not used.

`tests/ondisk/test_ptd_writer.py` compares this writer with ExecuTorch's
serializer and its flatc over generated inputs. Keep in sync with
extension/flat_tensor/serialize/flat_tensor.fbs and flat_tensor_schema.py.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from emitter_filter.ondisk.read.file_headers import FLAT_TENSOR_IDENTIFIER
from emitter_filter.program.generated_fields import vector_ints

__all__ = ["pack_flat_tensor"]

# Field ids (vtable slots) of flat_tensor.fbs, in declaration order.
_FLAT_TENSOR_VERSION, _FLAT_TENSOR_SEGMENTS, _FLAT_TENSOR_NAMED_DATA = 0, 1, 2
_SEGMENT_OFFSET, _SEGMENT_SIZE = 0, 1
_NAMED_DATA_KEY, _NAMED_DATA_SEGMENT_INDEX, _NAMED_DATA_TENSOR_LAYOUT = 0, 1, 2
_LAYOUT_SCALAR_TYPE, _LAYOUT_SIZES, _LAYOUT_DIM_ORDER = 0, 1, 2


class _FlatcBuilder:
    """flatc's `FlatBufferBuilder`, for what a FlatTensor needs; builds back to front.

    Offsets are `GetSize()` values: bytes written when the object was. The
    bytes are kept reversed (`_reversed`), so that writing is appending.
    """

    def __init__(self) -> None:
        self._reversed = bytearray()
        self._minalign = 1
        self._vtables: list[int] = []
        self._fields: list[tuple[int, int]] = []  # (voffset, offset) of the open table
        self._table_start = 0

    @property
    def size(self) -> int:
        return len(self._reversed)

    def _pad(self, count: int) -> None:
        self._reversed.extend(bytes(count))

    def _prealign(self, length: int, alignment: int) -> None:
        """`PreAlign`: pad so that `length` more bytes end aligned."""
        self._minalign = max(self._minalign, alignment)
        self._pad(-(self.size + length) % alignment)

    def _push(self, fmt: str, value: int) -> int:
        """`PushElement`: aligned to its own size."""
        data = struct.pack(fmt, value)
        self._prealign(0, len(data))
        self._reversed.extend(data[::-1])
        return self.size

    def _write(self, offset: int, fmt: str, value: int) -> None:
        """`WriteScalar` at the object that starts `offset` bytes from the end."""
        data = struct.pack(fmt, value)
        self._reversed[offset - len(data) : offset] = data[::-1]

    def _read(self, offset: int, count: int) -> bytes:
        return bytes(self._reversed[offset - count : offset][::-1])

    def _refer_to(self, offset: int) -> int:
        self._prealign(0, 4)
        return self.size - offset + 4

    def string(self, data: bytes) -> int:
        self._prealign(len(data) + 1, 4)
        self._pad(1)
        self._reversed.extend(data[::-1])
        return self._push("<I", len(data))

    def scalars(self, fmt: str, values: Sequence[int]) -> int:
        width = struct.calcsize(fmt)
        self._prealign(len(values) * width, 4)
        self._prealign(len(values) * width, width)
        for value in reversed(values):
            self._push(fmt, value)
        return self._push("<I", len(values))

    def offsets(self, offsets: Sequence[int]) -> int:
        self._prealign(len(offsets) * 4, 4)
        for offset in reversed(offsets):
            self._push("<I", self._refer_to(offset))
        return self._push("<I", len(offsets))

    def start_table(self) -> None:
        self._fields, self._table_start = [], self.size

    def add_scalar(self, field: int, fmt: str, value: int) -> None:
        """`AddElement`: not written when it is the default, 0."""
        if value:
            self._fields.append((4 + 2 * field, self._push(fmt, value)))

    def add_offset(self, field: int, offset: int) -> None:
        self._fields.append((4 + 2 * field, self._push("<I", self._refer_to(offset))))

    def end_table(self) -> int:
        """`EndTable`: the vtable below the table, or an earlier one with the same bytes."""
        table = self._push("<i", 0)
        vtable_size = max(max((v for v, _ in self._fields), default=0) + 2, 4)
        self._pad(vtable_size)
        self._write(self.size, "<H", vtable_size)
        self._write(self.size - 2, "<H", table - self._table_start)
        for voffset, offset in self._fields:
            self._write(self.size - voffset, "<H", table - offset)
        vtable = self._read(self.size, vtable_size)
        for earlier in self._vtables:
            # Its size first: only then are `vtable_size` bytes there its own.
            if self._read(earlier, 2) == vtable[:2] and self._read(earlier, vtable_size) == vtable:
                del self._reversed[table:]
                break
        else:
            earlier = self.size
            self._vtables.append(earlier)
        self._write(table, "<i", earlier - table)
        return table

    def finish(self, root: int, identifier: bytes) -> bytes:
        self._prealign(4 + len(identifier), self._minalign)
        self._reversed.extend(identifier[::-1])
        self._push("<I", self._refer_to(root))
        return bytes(self._reversed[::-1])


def _pack_segment(builder: _FlatcBuilder, segment) -> int:
    builder.start_table()
    builder.add_scalar(_SEGMENT_SIZE, "<Q", int(segment.size))
    builder.add_scalar(_SEGMENT_OFFSET, "<Q", int(segment.offset))
    return builder.end_table()


def _pack_tensor_layout(builder: _FlatcBuilder, layout) -> int:
    sizes = builder.scalars("<i", vector_ints(layout.sizes))
    dim_order = builder.scalars("<B", vector_ints(layout.dimOrder))
    builder.start_table()
    builder.add_offset(_LAYOUT_DIM_ORDER, dim_order)
    builder.add_offset(_LAYOUT_SIZES, sizes)
    builder.add_scalar(_LAYOUT_SCALAR_TYPE, "<b", int(layout.scalarType))
    return builder.end_table()


def _pack_named_data(builder: _FlatcBuilder, entry) -> int:
    # The key's bytes as stored: never re-encoded.
    key = entry.key if entry.key is not None else b""
    key = builder.string(key.encode("utf-8") if isinstance(key, str) else bytes(key))
    layout = entry.tensorLayout
    layout = None if layout is None else _pack_tensor_layout(builder, layout)
    builder.start_table()
    if layout is not None:
        builder.add_offset(_NAMED_DATA_TENSOR_LAYOUT, layout)
    builder.add_scalar(_NAMED_DATA_SEGMENT_INDEX, "<I", int(entry.segmentIndex))
    builder.add_offset(_NAMED_DATA_KEY, key)
    return builder.end_table()


def pack_flat_tensor(flat_tensor) -> bytes:
    """The `FlatTensor` flatbuffer flatc writes from ExecuTorch's JSON for it.

    Args:
        flat_tensor: The table to pack (`FlatTensor` as `read_ptd.read_ptd_flat_tensor`
            decodes it, or the generated object API's `FlatTensorT`). Not modified. Every
            field is written as ExecuTorch's dataclass has it: absent vectors as
            empty ones.

    Returns:
        The flatbuffer, file identifier included, without the `.ptd` header.
    """
    builder = _FlatcBuilder()
    segments = builder.offsets([_pack_segment(builder, s) for s in flat_tensor.segments or ()])
    named_data = builder.offsets(
        [_pack_named_data(builder, e) for e in flat_tensor.namedData or ()]
    )
    builder.start_table()
    builder.add_offset(_FLAT_TENSOR_NAMED_DATA, named_data)
    builder.add_offset(_FLAT_TENSOR_SEGMENTS, segments)
    builder.add_scalar(_FLAT_TENSOR_VERSION, "<I", int(flat_tensor.version))
    return builder.finish(builder.end_table(), FLAT_TENSOR_IDENTIFIER)
