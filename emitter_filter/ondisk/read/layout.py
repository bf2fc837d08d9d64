"""How ExecuTorch lays out `.pte` and `.ptd` files: headers, alignments, padding, in one place.

    .pte  [root | "ET12" | eh00 header, padded | program flatbuffer | pad | segments]
    .ptd  [root | "FT01" | FH01 header, padded | FlatTensor flatbuffer | pad | segments]

`read_pte` and `read_ptd` read the headers with the structs defined here; `prune` asks
`infer_pte_layout` / `infer_ptd_layout` which serializer options wrote a file,
and lays the pruned file out with the same ones (`pack_program`,
`program_prefix`, `place_segments`, `ptd_prefix`).

The options of `ExecutorchBackendConfig` (`segment_alignment`,
`constant_tensor_alignment`, `delegate_alignment`) and the named data's own
alignments are not stored in the file; they are read back from what they did
to it:
- `segment_alignment`: the segment base offset and every segment offset are
  the previous end rounded up to it (`lcm` with a named-data alignment);
- `constant_tensor_alignment`: each constant but the last is padded to it;
- `delegate_alignment`: the force_align of inline delegate data
  (`BackendDelegateInlineData.data`), so the position of each inline blob;
- both: the extended header is padded to the larger of them (at least 32).
Where several values fit: for the segment alignment, the one that leaves the
fewest named-data segments needing an alignment of their own, then the default
(128), then the largest (the most padding explained); for the tensor alignment
the default (16), then the largest; for the delegate alignment the default
(16), then the smallest with which the input's own program packs to the
input's bytes. Packing the input's program again with the layout found and
getting its bytes back (`PteLayout.reproduced`) shows the file was written by
this serializer with these options (or with others that write the same file),
so the pruned file is the one it writes for the pruned program.
Mirrors exir/_serialize/_program.py
(`serialize_pte_binary`), exir/_serialize/_flatbuffer_program.py and
extension/flat_tensor/serialize/serialize.py of ExecuTorch 1.5.1; keep in sync.
"""

from __future__ import annotations

import itertools
import logging
import math
import struct
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from emitter_filter.errors import PteFormatError
from emitter_filter.program.fbs_schemas import PROGRAM
from emitter_filter.program.flatbuffer_tables import Table, to_object_api
from emitter_filter.program.generated_fields import vector_ints
from emitter_filter.program.reachability import DataSpace

if TYPE_CHECKING:
    import flatbuffers

    from emitter_filter.ondisk.read.file_model import PtdFile, PteFile

__all__ = [
    "PROGRAM_IDENTIFIER",
    "EH_OFFSET",
    "EH_MAGIC",
    "EH",
    "EH_SEGMENT_DATA_SIZE",
    "EH_MINIMUM_LENGTH",
    "NUM_HEAD_BYTES",
    "FH_MAGIC",
    "FH",
    "FLAT_TENSOR_IDENTIFIER",
    "DEFAULT_SEGMENT_ALIGNMENT",
    "PteLayout",
    "PtdLayout",
    "aligned",
    "position_alignment",
    "infer_pte_layout",
    "infer_ptd_layout",
    "pte_segment_alignments",
    "ptd_segment_alignments",
    "shared_segment_alignment",
    "read_pte_layout",
    "read_segment_layout",
    "patch_program",
    "pack_program",
    "segment_alignments",
    "padded_header_length",
    "extended_header_prefix",
    "place_segments",
    "program_prefix",
    "ptd_prefix",
]

logger = logging.getLogger(__name__)

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
_EH_LENGTH = EH.size + EH_SEGMENT_DATA_SIZE.size  # _ExtendedHeader.EXPECTED_LENGTH
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
_FH_LENGTH = FH.size  # FlatTensorHeader.EXPECTED_LENGTH
_FLAT_TENSOR_FLATBUFFER_ALIGNMENT = 16  # _FLATBUFFER_ALIGNMENT in serialize.py

DEFAULT_SEGMENT_ALIGNMENT = 128  # serialize_pte_binary, FlatTensorConfig
_DEFAULT_TENSOR_ALIGNMENT = 16  # exir.tensor.ALIGNMENT
# program.fbs: force_align of Buffer.storage (@executorch-tensor-alignment) and of
# BackendDelegateInlineData.data (@executorch-delegate-alignment), unless patched.
_SCHEMA_FORCE_ALIGN = 16
_MAX_ALIGNMENT = 1 << 16
_POWERS_OF_TWO = tuple(1 << k for k in range(_MAX_ALIGNMENT.bit_length()))


def aligned(size: int, alignment: int) -> int:
    """`padding.aligned_size`: `size` rounded up to a multiple of `alignment`."""
    return (size + alignment - 1) // alignment * alignment


def position_alignment(offset: int) -> int:
    """The alignment a position shows: the largest power of two dividing `offset`, at most 64 KiB.

    0 shows every alignment, so the largest.
    """
    return min(offset & -offset, _MAX_ALIGNMENT) if offset else _MAX_ALIGNMENT


def _preferring(default: int, candidates: Sequence[int], largest: bool = False) -> list[int]:
    """`candidates`, the default first, then the smallest (or the largest) first."""
    return sorted(candidates, key=lambda a: (a != default, -a if largest else a))


def _insert_header(flatbuffer: bytes, header: bytes) -> bytes:
    """`_insert_flatbuffer_header`: the header goes after the identifier, the root offset moves."""
    root = int.from_bytes(flatbuffer[0:4], "little") + len(header)
    return root.to_bytes(4, "little") + flatbuffer[4:8] + header + flatbuffer[8:]


# --- the program flatbuffer -----------------------------------------------------------


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

    return _preferring(
        _DEFAULT_TENSOR_ALIGNMENT, [a for a in _POWERS_OF_TWO if consistent(a)], largest=True
    )


def _segment_own_alignments(
    base: int,
    header_end: int,
    segments: Sequence[tuple[int, int]],
    plain: Sequence[bool],
    segment_alignment: int,
) -> tuple[int | None, ...] | None:
    """Each segment's own alignment if the offsets fit `segment_alignment`, else None.

    Arguments as `segment_alignments` takes them. A plain segment's own
    alignment is 1; a named-data segment's the smallest that puts it where it
    is (it starts at the previous end rounded up to lcm(segment_alignment,
    own)), or None where none does: the offsets fit, but no alignment explains
    the gap before it (`segment_alignments` then keeps the alignment its
    position shows).
    """
    if not base:
        return (1,) * len(segments)
    if aligned(header_end, segment_alignment) != base:
        return None
    result: list[int | None] = []
    end = 0
    for (offset, size), is_plain in zip(segments, plain, strict=True):
        if offset % segment_alignment or offset < aligned(end, segment_alignment):
            return None
        if is_plain:
            if offset != aligned(end, segment_alignment):
                return None
            result.append(1)
        else:
            fits = (
                p for p in _POWERS_OF_TWO if aligned(end, math.lcm(segment_alignment, p)) == offset
            )
            result.append(next(fits, None))
        end = offset + size
    return tuple(result)


def segment_alignments(
    base: int, header_end: int, segments: Sequence[tuple[int, int]], plain: Sequence[bool]
) -> dict[int, tuple[int, ...]]:
    """Every `segment_alignment` the offsets allow, preferred first, with each segment's own.

    A `.pte` and its `.ptd` files are written with one `segment_alignment`:
    `prune` takes the first that every file allows. Where no own alignment
    explains a gap (`_segment_own_alignments`), the segment keeps the alignment
    its position shows, so a rewrite never places it less aligned.

    Args:
        base: The segment base offset; 0 when there is no segment data (any fits).
        header_end: Where the data before the segments ends (program or flatbuffer).
        segments: (offset relative to `base`, size), in index order.
        plain: Whether each segment has no alignment of its own (constant,
            mutable, delegate) as opposed to named data (`DataEntry.alignment`).
    """
    found = {}
    candidates = [
        *_preferring(DEFAULT_SEGMENT_ALIGNMENT, _POWERS_OF_TWO, largest=True),
        *_other_alignments(base, header_end, [offset for offset, _ in segments]),
    ]
    for alignment in candidates:
        own = _segment_own_alignments(base, header_end, segments, plain, alignment)
        if own is not None:
            found[alignment] = tuple(
                position_alignment(offset) if o is None else o
                for (offset, _), o in zip(segments, own, strict=True)
            )
    # Named data rarely asks for more than the segment alignment: prefer the
    # values that need the fewest own alignments to explain the offsets (then
    # a power of two, as before: `_other_alignments` come last).
    order = sorted(found, key=lambda a: sum(o > 1 for o in found[a]))
    return {a: found[a] for a in order}


def _other_alignments(base: int, header_end: int, offsets: Sequence[int]) -> list[int]:
    """The segment alignments not a power of two that the offsets allow, largest first.

    `serialize_pte_binary` takes any positive `segment_alignment` (48 writes a
    file the runtime loads): the base offset and every segment offset are
    multiples of it, and the base is less than one alignment past `header_end`.
    So the candidates are the divisors of their gcd above that gap, at most 64 KiB.
    Tried after the powers of two, so a file a power of two explains is read as before.
    """
    if not base:
        return []
    common = math.gcd(base, *offsets)
    divisors: set[int] = set()
    for small in range(1, min(math.isqrt(common), _MAX_ALIGNMENT) + 1):
        if common % small == 0:
            divisors.update((small, common // small))
    gap = base - header_end
    return sorted((d for d in divisors if gap < d <= _MAX_ALIGNMENT and d & (d - 1)), reverse=True)


def _chosen(candidates: dict[int, tuple[int, ...]], preferred: int | None, count: int):
    if preferred in candidates:
        return preferred, candidates[preferred]
    if candidates:
        return next(iter(candidates.items()))
    logger.info("segment offsets fit no alignment; using %d", DEFAULT_SEGMENT_ALIGNMENT)
    return DEFAULT_SEGMENT_ALIGNMENT, (1,) * count


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
        _preferring(
            _SCHEMA_FORCE_ALIGN, [a for a in _POWERS_OF_TWO if not any(p % a for p in positions)]
        )
        if positions
        else [_SCHEMA_FORCE_ALIGN]
    )


def _header_padded_length(tensor_alignment: int, delegate_alignment: int) -> int:
    """`aligned_size(EXPECTED_LENGTH, max_alignment)`: the schema's largest force_align."""
    return aligned(_EH_LENGTH, max(tensor_alignment, delegate_alignment))


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
    segment_alignment, own = _chosen(
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
    written_length = EH_MINIMUM_LENGTH if 0 < header_length < _EH_LENGTH else _EH_LENGTH
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
        if _insert_header(flatbuffer, header) != program_data:
            continue
        # The padding is the larger of the two alignments; without inline blobs,
        # the delegate alignment shows nowhere else, so any value may explain it.
        tensors = [tensor] if inline_storage else tensor_candidates
        delegates = (
            [delegate] if inline_delegates else _preferring(_SCHEMA_FORCE_ALIGN, _POWERS_OF_TWO)
        )
        for t, d in itertools.product(tensors, delegates):
            if _header_padded_length(t, d) == padded:
                return t, d, padded, True
        packs_alike = packs_alike or (tensor, delegate, padded, False)
    return packs_alike


def pte_segment_alignments(
    pte: PteFile, aliased: Collection[int] = ()
) -> dict[int, tuple[int, ...]]:
    """`segment_alignments` of a `.pte`'s segments: the one segment-alignment policy.

    Segments in `aliased` store no bytes of their own (they share another's range,
    as `dedupe` writes them): their offsets say nothing about the placement, so
    they are left out, and their own alignment is 1.

    Args:
        pte: The file as read. Not modified.
        aliased: Indices of the segments that share another reference's range.
    """
    base = pte.segment_base_offset
    named = {e.segment_index for e in pte.named_data if e.file == pte.path}
    owned = [s for s in pte.segments if s.index not in aliased]
    found = segment_alignments(
        base,
        pte.program_size,
        [(s.offset - base, s.size) for s in owned],
        [s.index not in named for s in owned],
    )
    result = {}
    for alignment, own in found.items():
        by_index = {s.index: o for s, o in zip(owned, own, strict=True)}
        result[alignment] = tuple(by_index.get(s.index, 1) for s in pte.segments)
    return result


def ptd_segment_alignments(ptd: PtdFile) -> dict[int, tuple[int, ...]]:
    """`segment_alignments` of a `.ptd`'s segments (all named data)."""
    base = ptd.segment_base_offset
    return segment_alignments(
        base,
        ptd.flatbuffer_end,
        [(s.offset - base, s.size) for s in ptd.segments],
        [False] * len(ptd.segments),
    )


def shared_segment_alignment(pte: PteFile, aliased: Collection[int] = ()) -> int | None:
    """The first `segment_alignment` the `.pte` and all its `.ptd` files allow, if any.

    One serializer call writes them all with one value: a `.ptd` may show what
    the `.pte`'s offsets leave open.
    """
    candidates = [ptd_segment_alignments(ptd) for ptd in pte.ptd_files]
    own_of_pte = pte_segment_alignments(pte, aliased)
    if not pte.segment_base_offset and candidates:
        # No segment data: the `.pte` allows any alignment, its `.ptd` files tell.
        own_of_pte = {a: (1,) * len(pte.segments) for a in candidates[0]}
    allowed = [
        (alignment, own)
        for alignment, own in own_of_pte.items()
        if all(alignment in c for c in candidates)
    ]
    if not allowed:
        return None
    # As within one file: the fewest own alignments needed, over all the files
    # (then the `.pte`'s order).
    return min(
        allowed,
        key=lambda item: (
            sum(o > 1 for o in item[1]) + sum(o > 1 for c in candidates for o in c[item[0]])
        ),
    )[0]


def _segment_candidates(
    pte: PteFile, aliased: Collection[int], segment_alignment: int | None, required: bool
) -> dict[int, tuple[int, ...]]:
    """The segment alignments a `.pte` allows (see `read_pte_layout`'s arguments)."""
    candidates = pte_segment_alignments(pte, aliased)
    if (
        not pte.segment_base_offset
        and segment_alignment is not None
        and segment_alignment not in candidates
    ):
        # No segment data: any alignment fits, the one the `.ptd` files show too.
        candidates = {segment_alignment: (1,) * len(pte.segments), **candidates}
    if required and not candidates:
        raise PteFormatError(
            pte.path, "segment offsets fit no segment alignment", pte.segment_base_offset
        )
    return candidates


def read_segment_layout(
    pte: PteFile,
    aliased: Collection[int] = (),
    segment_alignment: int | None = None,
    *,
    required: bool = False,
) -> tuple[int, tuple[int, ...]]:
    """(`segment_alignment`, each segment's own alignment) of a `.pte`: the part of
    `read_pte_layout` that places segments, read without packing the program."""
    candidates = _segment_candidates(pte, aliased, segment_alignment, required)
    return _chosen(candidates, segment_alignment, len(pte.segments))


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
    candidates = _segment_candidates(pte, aliased, segment_alignment, required)
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
    if magic == EH_MAGIC and header_length >= _EH_LENGTH:
        EH_SEGMENT_DATA_SIZE.pack_into(patched, EH_OFFSET + EH.size, segment_data_size)
    return bytes(patched)


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
    head = program_data[:_MAX_ALIGNMENT]
    start = EH_OFFSET + _EH_LENGTH
    first = next((i for i in range(start, len(head)) if head[i]), len(head))
    length = _EH_LENGTH
    while length * 2 <= first - EH_OFFSET:
        length *= 2
    return length


def extended_header_prefix(
    flatbuffer: bytes,
    padded_length: int,
    segment_alignment: int,
    segment_data_size: int,
    header_length: int = _EH_LENGTH,
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
    if header_length >= _EH_LENGTH:
        fields += EH_SEGMENT_DATA_SIZE.pack(segment_data_size)
    return _insert_header(flatbuffer, fields.ljust(padded_length, b"\0")), base


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


def place_segments(
    segments: Sequence[tuple[int, int]], segment_alignment: int
) -> tuple[list[int], int]:
    """(offset of each segment relative to the base, segment data size).

    Args:
        segments: (size, own alignment) of each segment, in order; each starts
            at the previous end rounded up to `lcm(segment_alignment, own)`.
    """
    offsets, end = [], 0
    for size, own in segments:
        offsets.append(aligned(end, math.lcm(segment_alignment, own)))
        end = offsets[-1] + size
    return offsets, end


# --- the .ptd -------------------------------------------------------------------------


@dataclass(frozen=True)
class PtdLayout:
    """The `FlatTensorConfig` a `.ptd` was written with: its segment alignments."""

    segment_alignment: int
    segment_alignments: tuple[int, ...]


def infer_ptd_layout(
    segment_candidates: dict[int, tuple[int, ...]], segment_alignment: int | None, count: int
) -> PtdLayout:
    """The `segment_alignment` and named data alignments of a `.ptd` with `count` segments.

    Args:
        segment_candidates: `segment_alignments` of the file.
        segment_alignment: The one to take if the file allows it.
    """
    return PtdLayout(*_chosen(segment_candidates, segment_alignment, count))


def ptd_prefix(flatbuffer: bytes, layout: PtdLayout, segment_data_size: int) -> tuple[bytes, int]:
    """(header, flatbuffer and padding, segment base offset), as `FlatTensorSerializer` writes."""
    padded = aligned(_FH_LENGTH, _FLAT_TENSOR_FLATBUFFER_ALIGNMENT)
    base = aligned(len(flatbuffer) + padded, layout.segment_alignment)
    header = FH.pack(FH_MAGIC, _FH_LENGTH, padded, len(flatbuffer), base, segment_data_size)
    data = _insert_header(flatbuffer, header.ljust(padded, b"\0"))
    return data.ljust(base, b"\0"), base
