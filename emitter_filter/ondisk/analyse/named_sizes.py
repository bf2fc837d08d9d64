"""`undersized_named_data`: XNNPACK constants whose named data holds fewer bytes than they read.

XNNPACK's runtime (XNNCompiler.cpp: getConstantDataPtr) takes the buffer a key's named
data resolves to and hands its pointer to XNNPACK without comparing its size with the
tensor's: a key whose segment is shorter than its tensor reads past the segment, into
whatever the file lays out after it. The program loads and runs, and computes values
that depend on the layout, so any rewrite that moves a segment changes them: such a
file is invalid (issue 55).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from emitter_filter.delegates import xnnpack_constant_types

__all__ = ["undersized_named_data", "xnnpack_tensor_bytes"]

#: Bytes per element of the `ScalarType` XNNPACK's datatypes are stored as
#: (`delegates.xnnpack.xnnpack_scalar_type`); 4-bit kinds two to a byte, so at least half a
#: byte each (XNNPACK packs them by row, which only rounds up).
_ELEMENT_BYTES = {"FLOAT": 4, "HALF": 2, "BFLOAT16": 2, "CHAR": 1, "BYTE": 1, "INT": 4}
_HALF_BYTE = ("QUINT4X2",)


def undersized_named_data(graphs: Iterable[bytes], held: Mapping[str, int]) -> list[str]:
    """One line for each XNNPACK constant whose named data is shorter than its tensor.

    Args:
        graphs: Each XNNPACK blob's header and flatbuffer (`readers.xnnpack_graphs`).
        held: Bytes each named-data key resolves to in the runtime's data maps (its
            segment's size); a key not in it is the missing-data check's.

    Raises:
        ProgramFormatError: A blob is malformed.
    """
    needed: dict[str, int] = {}
    for graph in graphs:
        for key, (dtype, dims) in xnnpack_constant_types(graph).items():
            nbytes = xnnpack_tensor_bytes(dtype, dims)
            if nbytes is not None:
                needed[key] = max(needed.get(key, 0), nbytes)
    return [
        f"XNNPACK constant {key!r} needs {nbytes:,} B, its named data holds {held[key]:,}"
        for key, nbytes in sorted(needed.items())
        if key in held and held[key] < nbytes
    ]


def xnnpack_tensor_bytes(dtype: str, dims: tuple[int, ...] | None) -> int | None:
    """The fewest bytes XNNPACK reads for a tensor; None where that is not known."""
    if dims is None:
        return None
    count = math.prod(dims)
    if dtype in _HALF_BYTE:
        return (count + 1) // 2
    size = _ELEMENT_BYTES.get(dtype)
    return None if size is None else count * size
