"""Read a `.ptd` file (ExecuTorch's FlatTensor): its header, flatbuffer and segment table.

Segment data is not read. A FlatTensor of the early-2025 layout (same identifier,
more fields) is refused rather than misread.
"""

from __future__ import annotations

import os

from emitter_filter.errors import PteFormatError
from emitter_filter.ondisk.read.byte_source import ByteSource, check_identifier, read_root
from emitter_filter.ondisk.read.file_headers import (
    FH,
    FH_MAGIC,
    FLAT_TENSOR_IDENTIFIER,
    NUM_HEAD_BYTES,
)
from emitter_filter.ondisk.read.file_model import NamedData, PtdFile, Segment, segment_at
from emitter_filter.program.fbs_schemas import FLAT_TENSOR
from emitter_filter.program.flatbuffer_tables import Table
from emitter_filter.program.generated_fields import table_text, vector_ints

__all__ = ["read_ptd", "read_ptd_flat_tensor"]

# flat_tensor.fbs has three FlatTensor fields; the layout of ExecuTorch 0.6
# (early 2025, same identifier and version) had five: tensor_alignment and
# tensors before segments and named_data.
_FLAT_TENSOR_FIELDS = 3
_FLAT_TENSOR_VERSION = 0  # _FLAT_TENSOR_VERSION in serialize.py: the newest the runtime loads


def read_ptd(path: str | os.PathLike | ByteSource) -> PtdFile:
    """Reads a `.ptd` file's header and flatbuffer, not its segment data.

    Raises:
        PteFormatError: The file is not a `.ptd`, or an offset points outside it.
    """
    return read_ptd_flat_tensor(path)[0]


def _check_flat_tensor_fields(source: ByteSource, buffer: bytes) -> None:
    """Refuses a FlatTensor whose table has more fields than flat_tensor.fbs.

    The early-2025 schema kept the identifier and version but had
    `tensor_alignment` and `tensors` where `segments` and `named_data` are now,
    so reading it with today's schema would misread every field.
    """
    root = int.from_bytes(buffer[0:4], "little")
    if not 8 <= root <= len(buffer) - 4:
        raise PteFormatError(
            source.name, f"flatbuffer: root offset {root} outside 8..{len(buffer)}", 0
        )
    vtable = root - int.from_bytes(buffer[root : root + 4], "little", signed=True)
    if not 0 <= vtable <= len(buffer) - 4:
        raise PteFormatError(
            source.name, f"flatbuffer: vtable at {vtable} outside the buffer", root
        )
    fields = (int.from_bytes(buffer[vtable : vtable + 2], "little") - 4) // 2
    if fields > _FLAT_TENSOR_FIELDS:
        raise PteFormatError(
            source.name,
            f"FlatTensor table with {fields} fields (flat_tensor.fbs has {_FLAT_TENSOR_FIELDS}): "
            "the .ptd layout of ExecuTorch 0.6 (FlatTensor.tensor_alignment, tensors) "
            "is not supported; export it again with ExecuTorch 0.7 or later",
            vtable,
        )


def _read_header(source: ByteSource) -> tuple[int, int, int]:
    """(flatbuffer end, segment base offset, segment data size) from the `FH01` header."""
    head = source.read(0, min(NUM_HEAD_BYTES, source.size), "file header")
    check_identifier(source, head, FLAT_TENSOR_IDENTIFIER, "PTD")
    if len(head) < 8 + FH.size or head[8:12] != FH_MAGIC:
        raise PteFormatError(source.name, f"missing {FH_MAGIC!r} header", 8)
    _, length, fb_offset, fb_size, base, data_size = FH.unpack_from(head, 8)
    if length < FH.size:
        raise PteFormatError(source.name, f"{FH_MAGIC!r} header length {length} < {FH.size}", 12)
    if fb_offset + fb_size > source.size or base + data_size > source.size:
        raise PteFormatError(
            source.name,
            f"truncated: flatbuffer ends at {fb_offset + fb_size}, segment data at "
            f"{base + data_size}, file has {source.size} bytes",
            16,
        )
    return fb_offset + fb_size, base, data_size


def _read_segments(source: ByteSource, flat_tensor, base: int, data_size: int) -> list[Segment]:
    segments = []
    for index, segment in enumerate(flat_tensor.segments or ()):
        if segment.offset + segment.size > data_size:
            raise PteFormatError(
                source.name,
                f"segment {index} (offset {segment.offset}, size {segment.size}) "
                f"outside segment data ({data_size} bytes)",
                base + segment.offset,
            )
        segments.append(Segment(index, base + segment.offset, segment.size))
    return segments


def read_ptd_flat_tensor(path: str | os.PathLike | ByteSource) -> tuple[PtdFile, Table]:
    """`read_ptd`, plus the decoded `FlatTensor` (`fbs_schemas.FLAT_TENSOR`), for a rewrite.

    `path` may be an open `ByteSource` (the caller's: not closed here).
    """
    source = path if isinstance(path, ByteSource) else ByteSource(path)
    try:
        flatbuffer_end, base, data_size = _read_header(source)
        buffer = source.read(0, flatbuffer_end, "flatbuffer")
        _check_flat_tensor_fields(source, buffer)
        flat_tensor = read_root(source, FLAT_TENSOR, buffer, "flatbuffer")
        if flat_tensor.version > _FLAT_TENSOR_VERSION:
            raise PteFormatError(
                source.name,
                f"FlatTensor version {flat_tensor.version} is newer than the supported "
                f"{_FLAT_TENSOR_VERSION}",
                int.from_bytes(buffer[0:4], "little"),
            )
        segments = _read_segments(source, flat_tensor, base, data_size)
        named: dict[str, NamedData] = {}
        layouts: dict[str, tuple[int, tuple[int, ...]]] = {}
        for entry in flat_tensor.namedData or ():
            key = table_text(entry.key) or ""
            segment = segment_at(source.name, segments, entry.segmentIndex, f"named data {key!r}")
            named[key] = NamedData(key, source.name, segment.index, segment.offset, segment.size)
            if entry.tensorLayout is not None:
                layout = entry.tensorLayout
                layouts[key] = (layout.scalarType, tuple(vector_ints(layout.sizes)))
        ptd = PtdFile(
            source.name, source.size, named, layouts, flatbuffer_end, base, tuple(segments)
        )
        return ptd, flat_tensor
    finally:
        if source is not path:
            source.close()
