"""One dtype vocabulary: program.fbs's `ScalarType` names, with torch's name beside them.

A `.pte`'s tensors carry a `ScalarType` (`CHAR`), XNNPACK's graph its own
`XNNDatatype` (`qcint8`) for the same bytes. Every report names a tensor's
type by the schema's `ScalarType`, XNNPACK's types mapped onto it, and shows
the name a user knows beside it: `CHAR (int8)`.
"""

from __future__ import annotations

from emitter_filter._program_fbs.executorch_flatbuffer.ScalarType import ScalarType
from emitter_filter._program_fbs.fb_xnnpack.XNNDatatype import XNNDatatype

__all__ = ["SCALAR_TYPE_NAMES", "dtype_label", "xnnpack_scalar_type"]

#: `ScalarType` value -> its name in program.fbs.
SCALAR_TYPE_NAMES = {
    value: name for name, value in vars(ScalarType).items() if not name.startswith("_")
}

# torch's name for each ScalarType (c10's ScalarType list), where it differs in more
# than case.
_TORCH_NAMES = {
    "BYTE": "uint8",
    "CHAR": "int8",
    "SHORT": "int16",
    "INT": "int32",
    "LONG": "int64",
    "HALF": "float16",
    "FLOAT": "float32",
    "DOUBLE": "float64",
    "FLOAT8E5M2": "float8_e5m2",
    "FLOAT8E4M3FN": "float8_e4m3fn",
    "FLOAT8E5M2FNUZ": "float8_e5m2fnuz",
    "FLOAT8E4M3FNUZ": "float8_e4m3fnuz",
}

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


def dtype_label(dtype: str | None) -> str:
    """`CHAR (int8)`: the name as stored, and torch's name where it is not just lower case.

    `-` for no dtype; a name outside `ScalarType` (XNNPACK's `scales`) as it is.
    """
    if dtype is None:
        return "-"
    alias = _TORCH_NAMES.get(dtype)
    return f"{dtype} ({alias})" if alias else dtype
