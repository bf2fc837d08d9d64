"""XNNPACK's blobs: which named-data keys they read, as what, and which node reads each.

The blob says which keys: its `XNNGraph.constant_data[*].named_key`, and which of
its nodes reads each (the values of a node's inputs).

This module reads bytes only (no `executorch.exir`, whose import takes seconds),
so the in-memory hook and the file side can share it.
"""

from __future__ import annotations

import functools
import importlib
import struct
from typing import TYPE_CHECKING

from emitter_filter._program_fbs.fb_xnnpack.XNNDatatype import XNNDatatype
from emitter_filter._program_fbs.fb_xnnpack.XNNQuantParams import XNNQuantParams
from emitter_filter._program_fbs.fb_xnnpack.XValueUnion import XValueUnion
from emitter_filter.delegates.blob_format import BlobFormat
from emitter_filter.errors import ProgramFormatError
from emitter_filter.program.fbs_schemas import XNNPACK, XNNPACK_VALUES
from emitter_filter.program.flatbuffer_tables import FlatbufferError

if TYPE_CHECKING:
    from emitter_filter._program_fbs.fb_xnnpack.XNNGraph import XNNGraph
    from emitter_filter._program_fbs.fb_xnnpack.XNNTensorValue import XNNTensorValue

__all__ = [
    "XNNPACK_BACKEND_ID",
    "XNNPACK_FORMAT",
    "XNN_HEADER_SIZE",
    "xnnpack_flatbuffer_span",
    "xnnpack_named_keys",
    "xnnpack_constant_types",
    "xnnpack_node_keys",
    "xnnpack_scalar_type",
]

#: `BackendDelegate.id` of XNNPACK delegates: the name of
#: `backends/xnnpack/xnnpack_preprocess.py:XnnpackBackend`.
XNNPACK_BACKEND_ID = "XnnpackBackend"

# Mirrors `XNNHeader` in backends/xnnpack/serialization/xnnpack_graph_serialize.py
# and backends/xnnpack/runtime/XNNHeader.cpp, little-endian, unpadded: 4 zero
# bytes, magic "XH00", u16 header length, u32 flatbuffer offset, u32 flatbuffer
# size, u32 constant-data offset, u64 constant-data size. Like the runtime, only
# the magic and the flatbuffer offset and size are read.
_XNN_HEADER = struct.Struct("<4s4sHIIIQ")
_XNN_HEADER_MAGIC = b"XH00"
# The runtime reads both schema versions (XNNCompiler.cpp). XN00 is
# `runtime_schema.fbs`, whose XNNGraph and ConstantDataOffset have the same
# fields in the same slots as the XN01 `schema.fbs` the reader is generated from.
_XNN_FLATBUFFER_IDS = (b"XN00", b"XN01")


# XNNPACK's datatypes as the ScalarType whose elements they are stored as: quantized
# 8-bit kinds are int8 (quint8 uint8), 32-bit ones int32, 4-bit ones two per byte.
_XNNPACK_SCALAR_TYPES = {
    XNNDatatype.xnn_datatype_fp32: "FLOAT",
    XNNDatatype.xnn_datatype_pfp32: "FLOAT",
    XNNDatatype.xnn_datatype_fp16: "HALF",
    XNNDatatype.xnn_datatype_bf16: "BFLOAT16",
    XNNDatatype.xnn_datatype_qint8: "CHAR",
    XNNDatatype.xnn_datatype_qcint8: "CHAR",
    XNNDatatype.xnn_datatype_qdint8: "CHAR",
    XNNDatatype.xnn_datatype_qpint8: "CHAR",
    XNNDatatype.xnn_datatype_quint8: "BYTE",
    XNNDatatype.xnn_datatype_qint32: "INT",
    XNNDatatype.xnn_datatype_qcint32: "INT",
    XNNDatatype.xnn_datatype_int32: "INT",
    XNNDatatype.xnn_datatype_qcint4: "QUINT4X2",
    XNNDatatype.xnn_datatype_qbint4: "QUINT4X2",
}


def xnnpack_scalar_type(datatype: int) -> str:
    """The `ScalarType` name XNNPACK's `datatype` is stored as; `XNNDatatype(n)` if unknown."""
    return _XNNPACK_SCALAR_TYPES.get(datatype, f"XNNDatatype({datatype})")


# What the generated readers raise on bytes that are no XNNPACK graph.
_MALFORMED = (struct.error, IndexError, TypeError, ValueError, UnicodeDecodeError)

#: Bytes of a blob's head that `xnnpack_flatbuffer_span` needs.
XNN_HEADER_SIZE = _XNN_HEADER.size


def xnnpack_flatbuffer_span(head: bytes, blob_size: int) -> tuple[int, int]:
    """(offset, size) of the XNNGraph flatbuffer inside an XNNPACK blob.

    The file side reads only this span of a blob stored in a segment, never its
    constant data.

    Args:
        head: The blob's first `XNN_HEADER_SIZE` bytes (fewer if it is shorter).
        blob_size: The blob's size.
    """
    if len(head) >= _XNN_HEADER.size and head[4:8] == _XNN_HEADER_MAGIC:
        _, _, _, offset, size, _, _ = _XNN_HEADER.unpack_from(head)
        if offset + size > blob_size:
            raise ProgramFormatError(
                f"XNNPACK flatbuffer offset {offset} + size {size} > blob size {blob_size}"
            )
        return offset, size
    # No header: the whole blob is the flatbuffer, as the runtime also accepts.
    return 0, blob_size


def _graph_offset(processed: bytes) -> int:
    """Where a blob's XNNGraph flatbuffer starts, its identifier checked."""
    offset, size = xnnpack_flatbuffer_span(processed[: _XNN_HEADER.size], len(processed))
    identifier = processed[offset + 4 : offset + 8]
    if size < 8 or identifier not in _XNN_FLATBUFFER_IDS:
        raise ProgramFormatError(
            f"XNNPACK flatbuffer identifier {identifier!r} is not one of {_XNN_FLATBUFFER_IDS}"
        )
    return offset


def xnnpack_named_keys(processed: bytes) -> tuple[str, ...]:
    """The named-data keys an XNNPACK blob reads, in `constant_data` order, without repeats.

    Args:
        processed: An XNNPACK delegate's processed bytes. Not modified.

    Raises:
        ProgramFormatError: The blob is not an XNNPACK graph the runtime would load.
    """
    keys: dict[str, None] = {}
    try:
        graph = XNNPACK.read(processed, _graph_offset(processed))
        for entry in graph.constantData or ():
            # Entry 0 is the "no constant" placeholder; entries stored inside the
            # blob (offset != UINT64_MAX) have no key either.
            if entry.namedKey:
                keys[entry.namedKey.decode("utf-8")] = None
    except (FlatbufferError, UnicodeDecodeError) as e:
        raise ProgramFormatError(f"malformed XNNPACK flatbuffer: {e}") from e
    return tuple(keys)


def _graph(processed: bytes) -> XNNGraph:
    """The blob's `XNNGraph`, read by its generated reader (the fields `XNNPACK` leaves out)."""
    from emitter_filter._program_fbs.fb_xnnpack.XNNGraph import XNNGraph

    return XNNGraph.GetRootAs(processed, _graph_offset(processed))


def _xvalue_constants(
    graph: XNNGraph,
) -> list[tuple[XNNTensorValue | None, str | None, str | None]]:
    """Each of `graph`'s values as (its `XNNTensorValue`, the named key of its constant data,
    that of its per-channel-group scales), None where it has none."""
    from emitter_filter._program_fbs.fb_xnnpack.PerChannelGroupQuant import (
        PerChannelGroupQuant,
    )
    from emitter_filter._program_fbs.fb_xnnpack.XNNQuantizedTensorValue import (
        XNNQuantizedTensorValue,
    )
    from emitter_filter._program_fbs.fb_xnnpack.XNNTensorValue import XNNTensorValue

    keys = [graph.ConstantData(i).NamedKey() for i in range(graph.ConstantDataLength())]

    def key(index: int) -> str | None:
        named = keys[index] if 0 < index < len(keys) else None
        return named.decode("utf-8") if named else None

    values: list[tuple[XNNTensorValue | None, str | None, str | None]] = []
    for index in range(graph.XvaluesLength()):
        xvalue = graph.Xvalues(index)
        union, kind = xvalue.XvalueUnion(), xvalue.XvalueUnionType()
        scales = None
        if kind == XValueUnion.XNNQuantizedTensorValue:
            quantized = XNNQuantizedTensorValue()
            union = _present(union, index, "member")
            quantized.Init(union.Bytes, union.Pos)
            tensor = _present(quantized.TensorValue(), index, "tensor")
            if quantized.QuantParamsType() == XNNQuantParams.PerChannelGroupQuant:
                params = PerChannelGroupQuant()
                table = _present(quantized.QuantParams(), index, "quantization parameters")
                params.Init(table.Bytes, table.Pos)
                scales = key(params.ScaleBufferIdx())
        elif kind == XValueUnion.XNNTensorValue:
            tensor = XNNTensorValue()
            union = _present(union, index, "member")
            tensor.Init(union.Bytes, union.Pos)
        else:
            values.append((None, None, None))
            continue
        values.append((tensor, key(tensor.ConstantBufferIdx()), scales))
    return values


def _present(table, index: int, what: str):
    """`table`, a member the value's type says is there; a corrupt blob's None is refused
    in one line (each caller says "malformed XNNPACK flatbuffer"), not an AttributeError
    later."""
    if table is None:
        raise ProgramFormatError(f"value {index} has no {what}")
    return table


def xnnpack_constant_types(processed: bytes) -> dict[str, tuple[str, tuple[int, ...] | None]]:
    """The XNNPACK datatype and dims of each named constant a blob reads, in value order.

    Package-internal (not in `__all__`): `explain` gives XNNPACK's named data
    the type XNNPACK reads it as (a `ScalarType` name: `FLOAT`, `QUINT4X2`
    for XNNPACK's 4-bit kinds, ...), and its dims; a
    blockwise-quantized tensor's scales, when stored as named data too, are
    `("scales", None)`.

    Args:
        processed: The blob's bytes, or at least its header and flatbuffer
            (`xnnpack_flatbuffer_span`). Not modified.

    Raises:
        ProgramFormatError: The blob is not an XNNPACK graph the runtime would load.
    """
    try:
        return _constant_types(processed)
    except FlatbufferError:
        # What `flatbuffer_tables` refuses (a zero-length vtable, ...) the generated
        # readers may read, as the runtime's: theirs is the answer then.
        return _generated_constant_types(processed)


def _constant_types(processed: bytes) -> dict[str, tuple[str, tuple[int, ...] | None]]:
    """`xnnpack_constant_types` by `flatbuffer_tables`' reader (the generated one took 1 ms
    for 13 keys); a `FlatbufferError` where that reader refuses the graph."""
    types: dict[str, tuple[str, tuple[int, ...] | None]] = {}
    try:
        graph = XNNPACK_VALUES.read(processed, _graph_offset(processed))
        keys = [entry.namedKey for entry in graph.constantData or ()]
        for index, xvalue in enumerate(graph.xvalues or ()):
            kind, scales = xvalue.xvalueUnionType, None
            if kind == XValueUnion.XNNQuantizedTensorValue:
                quantized = _present(xvalue.xvalueUnion, index, "member")
                tensor = _present(quantized.tensorValue, index, "tensor")
                if quantized.quantParamsType == XNNQuantParams.PerChannelGroupQuant:
                    params = _present(quantized.quantParams, index, "quantization parameters")
                    scales = _key(keys, params.scaleBufferIdx)
            elif kind == XValueUnion.XNNTensorValue:
                tensor = _present(xvalue.xvalueUnion, index, "member")
            else:
                continue
            name = _key(keys, tensor.constantBufferIdx)
            if name is not None:
                dims = tuple(tensor.dims or ())
                types.setdefault(name, (xnnpack_scalar_type(tensor.datatype), dims))
            if scales is not None:
                types.setdefault(scales, ("scales", None))
    except FlatbufferError:
        raise  # A ValueError, but the caller's: not a `_MALFORMED` one.
    except _MALFORMED as e:
        raise ProgramFormatError(f"malformed XNNPACK flatbuffer: {e}") from e
    return types


def _generated_constant_types(processed: bytes) -> dict[str, tuple[str, tuple[int, ...] | None]]:
    """`xnnpack_constant_types` by the generated readers."""
    types: dict[str, tuple[str, tuple[int, ...] | None]] = {}
    try:
        for tensor, name, scales in _xvalue_constants(_graph(processed)):
            if tensor is None:
                continue
            if name is not None:
                dims = tuple(int(tensor.Dims(j)) for j in range(tensor.DimsLength()))
                types.setdefault(name, (xnnpack_scalar_type(tensor.Datatype()), dims))
            if scales is not None:
                types.setdefault(scales, ("scales", None))
    except _MALFORMED as e:
        raise ProgramFormatError(f"malformed XNNPACK flatbuffer: {e}") from e
    return types


def _key(keys: list, index: int) -> str | None:
    """The named key of `constant_data[index]`; None for entry 0 (no constant) or none."""
    named = keys[index] if 0 < index < len(keys) else None
    return named.decode("utf-8") if named else None


# The members of schema.fbs's `union XNodeUnion` that are another table (`XNNAdd:
# _XNNNode2x1`), by that table's name; every other member is a table of its own name.
# `tests/inprocess/test_xnnpack_nodes.py` checks it against the installed schema.
_XNODE_TABLES = {
    "XNNAdd": "_XNNNode2x1",
    "XNNSoftmax": "_XNNNode1x1",
    "XNNSigmoid": "_XNNNode1x1",
    "XNNClamp": "_XNNNode1x1",
    "XNNConv2d": "_XNNNodeConv",
    "XNNDiv": "_XNNNode2x1",
    "XNNAvgPooling2d": "_XNNPooling2D",
    "XNNMinimum": "_XNNNode2x1",
    "XNNDepthwiseConv2d": "_XNNNodeConv",
    "XNNMaxPooling2d": "_XNNPooling2D",
    "XNNMultiply": "_XNNNode2x1",
    "XNNSubtract": "_XNNNode2x1",
    "XNNFloor": "_XNNNode1x1",
    "XNNConvert": "_XNNNode1x1",
    "XNNGlobalAvgPooling2d": "_XNNNode1x1",
    "XNNSquareRoot": "_XNNNode1x1",
    "XNNCeiling": "_XNNNode1x1",
    "XNNHardswish": "_XNNNode1x1",
    "XNNMaximum": "_XNNNode2x1",
    "XNNNegate": "_XNNNode1x1",
    "XNNSquare": "_XNNNode1x1",
    "XNNAbs": "_XNNNode1x1",
    "XNNPReLU": "_XNNNode2x1",
    "XNNConcatenate2": "_XNNCat",
    "XNNConcatenate3": "_XNNCat",
    "XNNConcatenate4": "_XNNCat",
    "XNNBatchMatrixMultiply": "_XNNNode2x1",
    "XNNConcatenate5": "_XNNCat",
    "XNNConvTranspose2d": "_XNNNodeConv",
    "XNNReciprocalSquareRoot": "_XNNNode1x1",
    "XNNLog": "_XNNNode1x1",
    "XNNGelu": "_XNNNode1x1",
    "XNNTanh": "_XNNNode1x1",
    "XNNExp": "_XNNNode1x1",
    "XNNSin": "_XNNNode1x1",
    "XNNCopy": "_XNNNode1x1",
    "XNNCos": "_XNNNode1x1",
}


@functools.cache
def _node_table(kind: int) -> tuple[type | None, tuple[str, ...]]:
    """The generated table of `XNodeUnion` member `kind` and its accessors of the value ids
    the node reads: its `*_id` fields but its outputs' (`input1_id`, `filter_id`,
    `bias_id`, `query_id`, ...)."""
    from emitter_filter._program_fbs.fb_xnnpack.XNodeUnion import XNodeUnion

    member = next((name for name, number in vars(XNodeUnion).items() if number == kind), None)
    if member in (None, "NONE"):
        return None, ()
    table = _XNODE_TABLES.get(member, member)
    cls = getattr(importlib.import_module(f"emitter_filter._program_fbs.fb_xnnpack.{table}"), table)
    return cls, tuple(
        name
        for name in dir(cls)
        if name[0].isupper()
        and name.endswith("Id")
        and not name.startswith("Output")
        and callable(getattr(cls, name))
    )


def _node_inputs(xnode) -> list[int]:
    """The value ids an `XNode` reads."""
    cls, fields = _node_table(xnode.XnodeUnionType())
    union = xnode.XnodeUnion()
    if cls is None or union is None:
        return []
    node = cls()
    node.Init(union.Bytes, union.Pos)
    return [getattr(node, field)() for field in fields]


def xnnpack_node_keys(processed: bytes) -> tuple[tuple[str, ...], ...]:
    """The named-data keys each node of an XNNPACK graph reads, in `xnodes` order (the
    node's index is the id pte-adapter-model-explorer gives it): the keys of the constant
    tensors among its inputs, and of their per-channel-group scales.

    Args:
        processed: The blob's bytes, or at least its header and flatbuffer
            (`xnnpack_flatbuffer_span`). Not modified.

    Raises:
        ProgramFormatError: The blob is not an XNNPACK graph the runtime would load.
    """
    try:
        graph = _graph(processed)
        value_keys = [
            [k for k in (name, scales) if k is not None]
            for _, name, scales in _xvalue_constants(graph)
        ]
        nodes = []
        for index in range(graph.XnodesLength()):
            keys = [
                k
                for vid in _node_inputs(graph.Xnodes(index))
                if 0 <= vid < len(value_keys)
                for k in value_keys[vid]
            ]
            nodes.append(tuple(dict.fromkeys(keys)))
    except (*_MALFORMED, ModuleNotFoundError) as e:
        raise ProgramFormatError(f"malformed XNNPACK flatbuffer: {e}") from e
    return tuple(nodes)


XNNPACK_FORMAT = BlobFormat(
    backend_id=XNNPACK_BACKEND_ID,
    name="XNNPACK",
    head_size=XNN_HEADER_SIZE,
    graph_span=xnnpack_flatbuffer_span,
    keys=xnnpack_named_keys,
    types=xnnpack_constant_types,
)
