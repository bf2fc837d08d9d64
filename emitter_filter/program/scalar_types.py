"""One dtype vocabulary: program.fbs's `ScalarType` names, with torch's name beside them.

A `.pte`'s tensors carry a `ScalarType` (`CHAR`), XNNPACK's graph its own
`XNNDatatype` (`qcint8`) for the same bytes. Every report names a tensor's
type by the schema's `ScalarType`, a backend's types mapped onto it (by its module
in `delegates`), and shows
the name a user knows beside it: `CHAR (int8)`. Each type's element size gives a
tensor's bytes (`tensor_nbytes`), which the reader, the validator and the proof ask.
"""

from __future__ import annotations

from emitter_filter._program_fbs.executorch_flatbuffer.ScalarType import ScalarType
from emitter_filter.errors import ProgramFormatError
from emitter_filter.program.generated_fields import vector_ints

__all__ = ["SCALAR_TYPE_NAMES", "dtype_label", "tensor_nbytes"]

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


def dtype_label(dtype: str | None) -> str:
    """`CHAR (int8)`: the name as stored, and torch's name where it is not just lower case.

    `-` for no dtype; a name outside `ScalarType` (XNNPACK's `scales`) as it is.
    """
    if dtype is None:
        return "-"
    alias = _TORCH_NAMES.get(dtype)
    return f"{dtype} ({alias})" if alias else dtype


# Bytes per element for each ScalarType, as the runtime's elementSize() has them.
_ELEMENT_SIZE = {
    ScalarType.BYTE: 1,
    ScalarType.CHAR: 1,
    ScalarType.SHORT: 2,
    ScalarType.INT: 4,
    ScalarType.LONG: 8,
    ScalarType.HALF: 2,
    ScalarType.FLOAT: 4,
    ScalarType.DOUBLE: 8,
    ScalarType.BOOL: 1,
    ScalarType.QINT8: 1,
    ScalarType.QUINT8: 1,
    ScalarType.QINT32: 4,
    ScalarType.BFLOAT16: 2,
    ScalarType.QUINT4X2: 1,
    ScalarType.QUINT2X4: 1,
    ScalarType.BITS16: 2,
    ScalarType.FLOAT8E5M2: 1,
    ScalarType.FLOAT8E4M3FN: 1,
    ScalarType.FLOAT8E5M2FNUZ: 1,
    ScalarType.FLOAT8E4M3FNUZ: 1,
    ScalarType.UINT16: 2,
    ScalarType.UINT32: 4,
    ScalarType.UINT64: 8,
}


def tensor_nbytes(tensor, where: str) -> int | None:
    """numel * element size: what the serializer wrote for a constant tensor, and what the
    runtime reads or plans for any tensor; None for a `scalar_type` it does not know."""
    size = _ELEMENT_SIZE.get(tensor.scalarType)
    if size is None:
        return None
    for dim in vector_ints(tensor.sizes):
        if dim < 0:
            raise ProgramFormatError(
                f"{where}: size {dim} < 0 in sizes {vector_ints(tensor.sizes)}"
            )
        size *= dim
    return size
