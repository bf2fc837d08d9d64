"""Which serializer options wrote a `.pte`, read back by packing its program again.

`prune`, `dedupe`, `share` and `merge` ask `read_pte_layout` which options wrote a file,
and lay the rewritten file out with the same ones (`pack_program` here, the headers in
`file_headers`, the segments in `segment_layout`).

The options of `ExecutorchBackendConfig` (`constant_tensor_alignment`,
`delegate_alignment`; `segment_alignment` is `segment_layout`'s) are not stored in
the file; they are read back from what they did to it:
- `constant_tensor_alignment`: each constant but the last is padded to it;
- `delegate_alignment`: the force_align of inline delegate data
  (`BackendDelegateInlineData.data`), so the position of each inline blob;
- both: the extended header is padded to the larger of them (at least 32).
Where several values fit: for the tensor alignment the default (16), then the
largest; for the delegate alignment the default (16), then the smallest with
which the input's own program packs to the input's bytes. Packing the input's
program again with the layout found and getting its bytes back
(`PteLayout.reproduced`) shows the file was written by this serializer with these
options (or with others that write the same file), so the pruned file is the one
it writes for the pruned program.
Mirrors exir/_serialize/_program.py (`serialize_pte_binary`) and
exir/_serialize/_flatbuffer_program.py of ExecuTorch 1.5.1; keep in sync.
"""

from __future__ import annotations

import itertools
import logging
import struct
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from emitter_filter.ondisk.read.file_headers import (
    EH,
    EH_LENGTH,
    EH_MAGIC,
    EH_MINIMUM_LENGTH,
    EH_OFFSET,
    EH_SEGMENT_DATA_SIZE,
    POWERS_OF_TWO,
    PROGRAM_IDENTIFIER,
    aligned,
    extended_header_prefix,
    insert_header,
    preferring,
)
from emitter_filter.ondisk.read.segment_layout import (
    choose_segment_alignment,
    pte_segment_candidates,
)
from emitter_filter.program.fbs_schemas import PROGRAM
from emitter_filter.program.flatbuffer_tables import Table, to_object_api
from emitter_filter.program.generated_fields import vector_ints
from emitter_filter.program.reachability import DataSpace

if TYPE_CHECKING:
    import flatbuffers

    from emitter_filter.ondisk.read.file_model import PteFile

__all__ = [
    "program_prefix",
    "PteLayout",
    "pack_program",
    "infer_pte_layout",
    "read_pte_layout",
    "patch_program",
]

logger = logging.getLogger(__name__)

_DEFAULT_TENSOR_ALIGNMENT = 16  # exir.tensor.ALIGNMENT
# program.fbs: force_align of Buffer.storage (@executorch-tensor-alignment) and of
# BackendDelegateInlineData.data (@executorch-delegate-alignment), unless patched.
_SCHEMA_FORCE_ALIGN = 16


@dataclass(frozen=True)
class _AlignedBytesTable:
    """A `Buffer` or `BackendDelegateInlineData`: one [ubyte] field, force-aligned.

    Packs as `_pack_buffer` / `_pack_backend_delegate_inline_data` in
    exir/_serialize/_flatbuffer_program.py do, with the schema's force_align as
    patched by the serializer's options; the generated `Pack` knows neither.
    """

    data: bytes | None
    alignment: int

    def Pack(self, builder: flatbuffers.Builder) -> int:  # noqa: N802 (the object API's name)
        vector = 0
        if self.data is not None:
            builder.StartVector(1, len(self.data), self.alignment)
            builder.head = builder.Head() - len(self.data)
            builder.Bytes[builder.Head() : builder.Head() + len(self.data)] = self.data
            vector = builder.EndVector()
        builder.StartObject(1)
        if vector:
            builder.PrependUOffsetTRelativeSlot(0, vector, 0)
        return builder.EndObject()


def _blob(table, field: str, alignment: int) -> _AlignedBytesTable:
    data = getattr(table, field)
    return _AlignedBytesTable(None if data is None else bytes(bytearray(data)), alignment)


def pack_program(program: Table, tensor_alignment: int, delegate_alignment: int) -> bytes:
    """The program flatbuffer `_program_to_flatbuffer` writes, without the extended header.

    Packed by the generated object API (`flatbuffer_tables.to_object_api`), as
    ExecuTorch's serializer packs it; so only a rewrite imports `flatbuffers`.

    Args:
        program: The decoded program (`read_pte_program`'s), maybe changed. Not modified.
        tensor_alignment: The force_align of inline `Buffer.storage`.
        delegate_alignment: The force_align of inline delegate data.
    """
    import flatbuffers

    packed = to_object_api(program)
    constant_buffer, inline = packed.constantBuffer, packed.backendDelegateData
    try:
        if constant_buffer:
            packed.constantBuffer = [_blob(b, "storage", tensor_alignment) for b in constant_buffer]
        if inline:
            packed.backendDelegateData = [_blob(d, "data", delegate_alignment) for d in inline]
        builder = flatbuffers.Builder(1024)
        builder.Finish(packed.Pack(builder), file_identifier=PROGRAM_IDENTIFIER)
        return bytes(builder.Output())
    finally:
        # `packed` is `program` itself when that is the object API's already.
        packed.constantBuffer, packed.backendDelegateData = constant_buffer, inline


@dataclass(frozen=True)
class PteLayout:
    """The serializer options a `.pte` was written with, as far as the file shows them.

    Attributes:
        segment_alignment: `segment_alignment`.
        tensor_alignment: `constant_tensor_alignment` (16 by default).
        delegate_alignment: `delegate_alignment` (16 by default).
        header_length: The extended header's length field: 32, or 24 for files
            from releases without the segment data size.
        header_padded_length: The bytes the header takes, padded to the largest
            force_align of the schema the serializer used.
        segment_alignments: Per input segment, its own alignment (named data
            can ask for one; 1 for the rest).
        reproduced: Packing the input's own program with this layout gives its
            bytes back: the file was written by ExecuTorch's serializer.
    """

    segment_alignment: int
    tensor_alignment: int
    delegate_alignment: int
    header_length: int
    header_padded_length: int
    segment_alignments: tuple[int, ...]
    reproduced: bool


def _tensor_alignments(offsets: Sequence[int], nbytes: dict[int, int]) -> list[int]:
    """Every `constant_tensor_alignment` the constant offsets allow, the default first.

    Each entry but the last was padded to it; entries whose storage is longer
    than their tensor hide it, so they are not asked.
    """

    def consistent(alignment: int) -> bool:
        if any(o % alignment for o in offsets):
            return False
        return all(
            offsets[i + 1] - offsets[i] == aligned(n, alignment)
            for i, n in nbytes.items()
            if i + 1 < len(offsets)
        )

    return preferring(
        _DEFAULT_TENSOR_ALIGNMENT, [a for a in POWERS_OF_TWO if consistent(a)], largest=True
    )


def _vector_start(program_data: bytes, table: Table, field: str) -> int:
    """Where the first element of `table`'s vector `field` is, of a vector the reader found."""
    start = PROGRAM.vector_at(program_data, table, field)
    assert start is not None, f"{field} was read, so it is stored"
    return start


def _vector_positions(program: Table, program_data: bytes) -> tuple[list[int], list[int]]:
    """Where each inline `Buffer.storage` and each non-empty inline delegate blob starts."""
    storage = [
        _vector_start(program_data, buffer, "storage")
        for buffer in program.constantBuffer or ()
        if buffer.storage is not None
    ]
    delegate = [
        _vector_start(program_data, blob, "data")
        for blob in program.backendDelegateData or ()
        if blob.data
    ]
    return storage, delegate


def _dividing(positions: Sequence[int]) -> list[int]:
    """The force_align values that put a vector at each of `positions`, the default first."""
    return (
        preferring(
            _SCHEMA_FORCE_ALIGN, [a for a in POWERS_OF_TWO if not any(p % a for p in positions)]
        )
        if positions
        else [_SCHEMA_FORCE_ALIGN]
    )


def _header_padded_length(tensor_alignment: int, delegate_alignment: int) -> int:
    """`aligned_size(EXPECTED_LENGTH, max_alignment)`: the schema's largest force_align."""
    return aligned(EH_LENGTH, max(tensor_alignment, delegate_alignment))


def infer_pte_layout(
    program: Table,
    program_data: bytes,
    header_length: int,
    segment_candidates: dict[int, tuple[int, ...]],
    segment_alignment: int | None,
    constant_offsets: Sequence[int],
    constant_nbytes: dict[int, int],
) -> PteLayout:
    """Reads the serializer options back from a `.pte` (module docstring).

    Args:
        program: The unpacked program. Not modified.
        program_data: The file's bytes up to the end of the program (header included).
        header_length: The extended header's length field; 0 when there is none.
        segment_candidates: `segment_alignments` of the file.
        segment_alignment: The one to take if the file allows it (what its
            `.ptd` files allow too).
        constant_offsets: `constant_segment.offsets`.
        constant_nbytes: The tensor size of each constant entry a tensor uses.
    """
    segment_alignment, own = choose_segment_alignment(
        segment_candidates, segment_alignment, len(program.segments or ())
    )
    tensor_candidates = _tensor_alignments(constant_offsets, constant_nbytes) or [
        _DEFAULT_TENSOR_ALIGNMENT
    ]
    storage, positions = _vector_positions(program, program_data)
    # Only inline vectors change the flatbuffer; try each alignment their positions allow.
    packing = list(
        itertools.product(
            [t for t in tensor_candidates if not any(p % t for p in storage)]
            if storage
            else tensor_candidates[:1],
            _dividing(positions),
        )
    )

    # The header written: the 24-byte one of older releases where the input has it,
    # else the one this serializer writes (the fields of a longer one are unknown).
    written_length = EH_MINIMUM_LENGTH if 0 < header_length < EH_LENGTH else EH_LENGTH
    found = _reproducing_alignments(
        program,
        program_data,
        header_length,
        packing,
        tensor_candidates,
        bool(storage),
        bool(positions),
    )
    if found is None:
        tensor, delegate = packing[0] if packing else (tensor_candidates[0], _SCHEMA_FORCE_ALIGN)
        logger.info(
            "the program is not laid out as ExecuTorch's serializer lays it out: "
            "the pruned file is the same program in that layout"
        )
        found = (tensor, delegate, _header_padded_length(tensor, delegate), False)
    tensor, delegate, padded, reproduced = found
    return PteLayout(segment_alignment, tensor, delegate, written_length, padded, own, reproduced)


def _reproducing_alignments(
    program: Table,
    program_data: bytes,
    header_length: int,
    packing: Sequence[tuple[int, int]],
    tensor_candidates: Sequence[int],
    inline_storage: bool,
    inline_delegates: bool,
) -> tuple[int, int, int, bool] | None:
    """(tensor alignment, delegate alignment, header padded length, reproduced) of the first
    (tensor, delegate) in `packing` with which the program packs to the input's bytes.

    A packing that gives the flatbuffer back but whose header padding fits no
    options keeps that padding, not reproduced (no ExecuTorch release wrote such
    a file). None when no packing gives the flatbuffer back.
    """
    packs_alike = None
    for tensor, delegate in packing:
        flatbuffer = pack_program(program, tensor, delegate)
        if not header_length:
            if flatbuffer == program_data:
                return tensor, delegate, _header_padded_length(tensor, delegate), True
            continue
        padded = len(program_data) - len(flatbuffer)
        if padded < header_length:
            continue
        header = program_data[EH_OFFSET : EH_OFFSET + header_length].ljust(padded, b"\0")
        if insert_header(flatbuffer, header) != program_data:
            continue
        # The padding is the larger of the two alignments; without inline blobs,
        # the delegate alignment shows nowhere else, so any value may explain it.
        tensors = [tensor] if inline_storage else tensor_candidates
        delegates = (
            [delegate] if inline_delegates else preferring(_SCHEMA_FORCE_ALIGN, POWERS_OF_TWO)
        )
        for t, d in itertools.product(tensors, delegates):
            if _header_padded_length(t, d) == padded:
                return t, d, padded, True
        packs_alike = packs_alike or (tensor, delegate, padded, False)
    return packs_alike


def read_pte_layout(
    pte: PteFile,
    program: Table,
    program_data: bytes,
    aliased: Collection[int] = (),
    segment_alignment: int | None = None,
    *,
    required: bool = False,
) -> PteLayout:
    """The serializer options a `.pte` was written with: what `prune` and `dedupe` write with.

    Args:
        pte: The file as read. Not modified.
        program: Its unpacked program, before any rewrite. Not modified.
        program_data: The file's bytes up to the end of the program (header included).
        aliased: Segments sharing another reference's range (`pte_segment_alignments`).
        segment_alignment: The one to take if the file allows it (what its `.ptd`
            files allow too: `shared_segment_alignment`).
        required: Refuse a file whose segment offsets fit no segment alignment,
            instead of laying it out with the default.

    Raises:
        PteFormatError: `required`, and the offsets fit no segment alignment.
    """
    candidates = pte_segment_candidates(pte, aliased, segment_alignment, required)
    constant = program.constantSegment
    offsets = vector_ints(constant.offsets) if constant is not None else []
    return infer_pte_layout(
        program,
        program_data,
        pte.header_length,
        candidates,
        segment_alignment,
        offsets,
        {i: e.nbytes for i, e in pte.entries[DataSpace.CONSTANT].items()},
    )


def patch_program(
    head: bytes,
    program: Table,
    segments: dict[int, tuple[int, int]],
    constant_offsets: Sequence[int],
    segment_data_size: int,
) -> bytes | None:
    """`head` (the file up to its segment base offset) with new segment ranges, constant
    offsets and segment data size written over the old values, every other byte kept.

    A rewrite that changes only these numbers needs no packing: the program's
    size, so the segment base offset, stays. None when a changed number is not
    stored in `head` (a default the packer left out): the program must be packed.

    Args:
        head: Header, program flatbuffer and padding. Not modified.
        program: `head`'s program as `read_pte_program` decoded it (where each table lies).
        segments: (offset from the base, size) of each `Program.segments` entry.
        constant_offsets: The new `constant_segment.offsets` (as many as before).
        segment_data_size: Bytes from the segment base offset to the file's end.
    """
    patched = bytearray(head)
    for index, values in segments.items():
        segment = program.segments[index]
        for field, value in zip(("offset", "size"), values, strict=True):
            at = PROGRAM.field_at(head, segment, field)
            if at is None:
                if value:
                    return None
            else:
                struct.pack_into("<Q", patched, at, value)
    constant = program.constantSegment
    if constant_offsets:
        if constant is None or len(constant.offsets or ()) != len(constant_offsets):
            return None
        start = _vector_start(head, constant, "offsets")
        struct.pack_into(f"<{len(constant_offsets)}Q", patched, start, *constant_offsets)
    magic, header_length = EH.unpack_from(head, EH_OFFSET)[:2]
    if magic == EH_MAGIC and header_length >= EH_LENGTH:
        EH_SEGMENT_DATA_SIZE.pack_into(patched, EH_OFFSET + EH.size, segment_data_size)
    return bytes(patched)


def program_prefix(
    flatbuffer: bytes, layout: PteLayout, segment_data_size: int
) -> tuple[bytes, int]:
    """(header and program flatbuffer, segment base offset), as `serialize_pte_binary` writes them.

    No segment data, no extended header (and a base offset of 0).
    """
    if segment_data_size == 0:
        return flatbuffer, 0
    return extended_header_prefix(
        flatbuffer,
        layout.header_padded_length,
        layout.segment_alignment,
        segment_data_size,
        layout.header_length,
    )
