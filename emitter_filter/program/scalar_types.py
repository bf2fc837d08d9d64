"""One dtype vocabulary: program.fbs's `ScalarType` names, with torch's name beside them.

A `.pte`'s tensors carry a `ScalarType` (`CHAR`), XNNPACK's graph its own
`XNNDatatype` (`qcint8`) for the same bytes. Every report names a tensor's
type by the schema's `ScalarType`, a backend's types mapped onto it (by its module
in `delegates`), and shows
the name a user knows beside it: `CHAR (int8)`.
"""

from __future__ import annotations

from emitter_filter._program_fbs.executorch_flatbuffer.ScalarType import ScalarType

__all__ = ["SCALAR_TYPE_NAMES", "dtype_label"]

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
