"""Pack a `.ptd` flatbuffer (`FlatTensor`) byte for byte as ExecuTorch writes it, in Python.

ExecuTorch does not build the `FlatTensor` with the flatbuffers Python builder:
`extension/flat_tensor/serialize/serialize.py:_serialize_to_flatbuffer` dumps the
`FlatTensor` dataclass to JSON and has the wheel's `flatc --binary` compile it.
flatc's JSON parser (`idl_parser.cpp`, `Parser::ParseTable`) lays the buffer out
in its own order, which this module reproduces with `flatbuffers.Builder`, so
that writing a `.ptd` needs neither executorch nor its `flatc`:

- children are built as the parser meets them, in JSON order (the dataclass
  field order: `version, segments, named_data`; `offset, size`;
  `key, segment_index, tensor_layout`; `scalar_type, sizes, dim_order`), each
  vector's elements in list order;
- a table's fields are then added largest scalar size first (8, 4, 2, 1 bytes;
  offsets count as 4), and within one size in reverse JSON order;
- a field equal to its schema default (0) is not written, an empty vector is,
  and a `null` table (`tensor_layout: None`) is left out.

Everything else (alignment, vtable sharing, the padding `Finish` adds for the
file identifier) is the same in flatc's C++ builder and the Python one.
`tests/test_flat_tensor_writer.py` compares this writer with ExecuTorch's
serializer and its flatc over generated inputs. Keep in sync with
extension/flat_tensor/serialize/flat_tensor.fbs and flat_tensor_schema.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import flatbuffers

from emitter_filter._program_fbs.flat_tensor_flatbuffer.FlatTensor import FlatTensorT
from emitter_filter.file_layout import FLAT_TENSOR_IDENTIFIER
from emitter_filter.pte_file import vector_ints

__all__ = ["pack_flat_tensor"]

# Field ids (vtable slots) of flat_tensor.fbs, in declaration order.
_FLAT_TENSOR_VERSION, _FLAT_TENSOR_SEGMENTS, _FLAT_TENSOR_NAMED_DATA = 0, 1, 2
_SEGMENT_OFFSET, _SEGMENT_SIZE = 0, 1
_NAMED_DATA_KEY, _NAMED_DATA_SEGMENT_INDEX, _NAMED_DATA_TENSOR_LAYOUT = 0, 1, 2
_LAYOUT_SCALAR_TYPE, _LAYOUT_SIZES, _LAYOUT_DIM_ORDER = 0, 1, 2


def _offsets_vector(builder: flatbuffers.Builder, offsets: Sequence[int]) -> int:
    builder.StartVector(4, len(offsets), 4)
    for offset in reversed(offsets):
        builder.PrependUOffsetTRelative(offset)
    return builder.EndVector()


def _scalars_vector(builder: flatbuffers.Builder, values: Sequence[int], size: int, prepend) -> int:
    builder.StartVector(size, len(values), size)
    for value in reversed(values):
        prepend(value)
    return builder.EndVector()


def _pack_segment(builder: flatbuffers.Builder, segment) -> int:
    builder.StartObject(2)
    builder.PrependUint64Slot(_SEGMENT_SIZE, int(segment.size), 0)
    builder.PrependUint64Slot(_SEGMENT_OFFSET, int(segment.offset), 0)
    return builder.EndObject()


def _pack_tensor_layout(builder: flatbuffers.Builder, layout) -> int:
    sizes = _scalars_vector(builder, vector_ints(layout.sizes), 4, builder.PrependInt32)
    dim_order = _scalars_vector(builder, vector_ints(layout.dimOrder), 1, builder.PrependUint8)
    builder.StartObject(3)
    builder.PrependUOffsetTRelativeSlot(_LAYOUT_DIM_ORDER, dim_order, 0)
    builder.PrependUOffsetTRelativeSlot(_LAYOUT_SIZES, sizes, 0)
    builder.PrependInt8Slot(_LAYOUT_SCALAR_TYPE, int(layout.scalarType), 0)
    return builder.EndObject()


def _pack_named_data(builder: flatbuffers.Builder, entry) -> int:
    # The key's bytes as stored: never re-encoded.
    key = builder.CreateString(entry.key if entry.key is not None else b"")
    layout = entry.tensorLayout
    layout = None if layout is None else _pack_tensor_layout(builder, layout)
    builder.StartObject(3)
    if layout is not None:
        builder.PrependUOffsetTRelativeSlot(_NAMED_DATA_TENSOR_LAYOUT, layout, 0)
    builder.PrependUint32Slot(_NAMED_DATA_SEGMENT_INDEX, int(entry.segmentIndex), 0)
    builder.PrependUOffsetTRelativeSlot(_NAMED_DATA_KEY, key, 0)
    return builder.EndObject()


def pack_flat_tensor(flat_tensor: FlatTensorT) -> bytes:
    """The `FlatTensor` flatbuffer flatc writes from ExecuTorch's JSON for it.

    Args:
        flat_tensor: The table to pack (the generated object API's `FlatTensorT`,
            as `pte_file.read_ptd_flat_tensor` returns it). Not modified. Every
            field is written as ExecuTorch's dataclass has it: absent vectors as
            empty ones.

    Returns:
        The flatbuffer, file identifier included, without the `.ptd` header.
    """
    builder = flatbuffers.Builder(1024)
    segments = _offsets_vector(
        builder, [_pack_segment(builder, s) for s in flat_tensor.segments or ()]
    )
    named_data = _offsets_vector(
        builder, [_pack_named_data(builder, e) for e in flat_tensor.namedData or ()]
    )
    builder.StartObject(3)
    builder.PrependUOffsetTRelativeSlot(_FLAT_TENSOR_NAMED_DATA, named_data, 0)
    builder.PrependUOffsetTRelativeSlot(_FLAT_TENSOR_SEGMENTS, segments, 0)
    builder.PrependUint32Slot(_FLAT_TENSOR_VERSION, int(flat_tensor.version), 0)
    builder.Finish(builder.EndObject(), file_identifier=FLAT_TENSOR_IDENTIFIER)
    return bytes(builder.Output())
