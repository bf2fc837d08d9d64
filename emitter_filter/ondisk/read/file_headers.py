"""The bytes around a file's flatbuffer: identifiers, the `.pte`'s extended header, the `.ptd`'s
FlatTensor header, and the alignment arithmetic every layout uses.

    .pte  [root | "ET12" | eh00 header, padded | program flatbuffer | pad | segments]
    .ptd  [root | "FT01" | FH01 header, padded | FlatTensor flatbuffer | pad | segments]

`read_pte` and `read_ptd` read the headers with the structs defined here; the writers
write them with `program_prefix`, `extended_header_prefix` and `ptd_prefix`.
Mirrors exir/_serialize/_program.py (`_ExtendedHeader`, `serialize_pte_binary`) and
extension/flat_tensor/serialize/serialize.py of ExecuTorch 1.5.1; keep in sync.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

__all__ = [
    "PROGRAM_IDENTIFIER",
    "EH_OFFSET",
    "EH_MAGIC",
    "EH",
    "EH_SEGMENT_DATA_SIZE",
    "EH_MINIMUM_LENGTH",
    "EH_LENGTH",
    "NUM_HEAD_BYTES",
    "FH_MAGIC",
    "FH",
    "FH_LENGTH",
    "FLAT_TENSOR_FLATBUFFER_ALIGNMENT",
    "FLAT_TENSOR_IDENTIFIER",
    "DEFAULT_SEGMENT_ALIGNMENT",
    "MAX_ALIGNMENT",
    "POWERS_OF_TWO",
    "aligned",
    "position_alignment",
    "preferring",
    "insert_header",
    "padded_header_length",
    "extended_header_prefix",
]

PROGRAM_IDENTIFIER = b"ET12"  # schema/program.fbs file_identifier

# Extended header, inserted after the file identifier when the file has segment
# data. `_ExtendedHeader` in exir/_serialize/_program.py (and
# schema/extended_header.cpp). Little-endian:
#   [8:12] b"eh00"  [12:16] u32 header length  [16:24] u64 program size
#   [24:32] u64 segment base offset  [32:40] u64 segment data size (length >= 32 only;
#   files from before it existed have length 24)
EH_OFFSET = 8
EH_MAGIC = b"eh00"
EH = struct.Struct("<4sIQQ")
EH_SEGMENT_DATA_SIZE = struct.Struct("<Q")
EH_MINIMUM_LENGTH = EH.size
EH_LENGTH = EH.size + EH_SEGMENT_DATA_SIZE.size  # _ExtendedHeader.EXPECTED_LENGTH
# kNumHeadBytes in schema/extended_header.cpp: enough for any extended header.
NUM_HEAD_BYTES = 64

# FlatTensorHeader, inserted after the `.ptd` file identifier
# (extension/flat_tensor/serialize/serialize.py):
#   [8:12] b"FH01"  [12:16] u32 header length  [16:24] u64 flatbuffer offset
#   [24:32] u64 flatbuffer size  [32:40] u64 segment base offset
#   [40:48] u64 segment data size
FLAT_TENSOR_IDENTIFIER = b"FT01"  # extension/flat_tensor/serialize/flat_tensor.fbs
FH_MAGIC = b"FH01"
FH = struct.Struct("<4sIQQQQ")
FH_LENGTH = FH.size  # FlatTensorHeader.EXPECTED_LENGTH
FLAT_TENSOR_FLATBUFFER_ALIGNMENT = 16  # _FLATBUFFER_ALIGNMENT in serialize.py

DEFAULT_SEGMENT_ALIGNMENT = 128  # serialize_pte_binary, FlatTensorConfig
MAX_ALIGNMENT = 1 << 16
POWERS_OF_TWO = tuple(1 << k for k in range(MAX_ALIGNMENT.bit_length()))


def aligned(size: int, alignment: int) -> int:
    """`padding.aligned_size`: `size` rounded up to a multiple of `alignment`."""
    return (size + alignment - 1) // alignment * alignment


def position_alignment(offset: int) -> int:
    """The alignment a position shows: the largest power of two dividing `offset`, at most 64 KiB.

    0 shows every alignment, so the largest.
    """
    return min(offset & -offset, MAX_ALIGNMENT) if offset else MAX_ALIGNMENT


def preferring(default: int, candidates: Sequence[int], largest: bool = False) -> list[int]:
    """`candidates`, the default first, then the smallest (or the largest) first."""
    return sorted(candidates, key=lambda a: (a != default, -a if largest else a))


def insert_header(flatbuffer: bytes, header: bytes) -> bytes:
    """`_insert_flatbuffer_header`: the header goes after the identifier, the root offset moves."""
    root = int.from_bytes(flatbuffer[0:4], "little") + len(header)
    return root.to_bytes(4, "little") + flatbuffer[4:8] + header + flatbuffer[8:]


def padded_header_length(program_data: bytes) -> int:
    """The bytes the extended header takes, padded, read from the zeros that follow it.

    For a rewrite that does not ask which serializer options wrote the file
    (`infer_pte_layout` reads them by packing the program again). The header is
    followed by zeros to its padded length (32 times a power of two), then by
    the flatbuffer's own padding (shorter than the schema's largest alignment,
    so than the header) and the root table's vtable, whose first byte (its
    size) is never zero. So the padded length is the largest candidate at most
    the distance to the first non-zero byte, looked for in the first 64 KiB.

    Args:
        program_data: The file's bytes up to the end of the program (header included).
    """
    head = program_data[:MAX_ALIGNMENT]
    start = EH_OFFSET + EH_LENGTH
    first = next((i for i in range(start, len(head)) if head[i]), len(head))
    length = EH_LENGTH
    while length * 2 <= first - EH_OFFSET:
        length *= 2
    return length


def extended_header_prefix(
    flatbuffer: bytes,
    padded_length: int,
    segment_alignment: int,
    segment_data_size: int,
    header_length: int = EH_LENGTH,
) -> tuple[bytes, int]:
    """(header and program flatbuffer, segment base offset) for a program with segment data.

    Args:
        flatbuffer: The program flatbuffer, without the extended header.
        padded_length: The bytes the header takes, padding included.
        segment_alignment: What the segment base offset is aligned to.
        segment_data_size: Bytes from the segment base offset to the file's end.
        header_length: The header's length field: 32, as this serializer
            writes it, or 24 (no segment data size), as older releases did.
    """
    program_size = padded_length + len(flatbuffer)
    base = aligned(program_size, segment_alignment)
    fields = EH.pack(EH_MAGIC, header_length, program_size, base)
    if header_length >= EH_LENGTH:
        fields += EH_SEGMENT_DATA_SIZE.pack(segment_data_size)
    return insert_header(flatbuffer, fields.ljust(padded_length, b"\0")), base
