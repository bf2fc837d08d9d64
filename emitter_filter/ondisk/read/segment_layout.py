"""Where a file's segments go: the `segment_alignment` and the named data's own alignments a
file's offsets allow, and placing segments with them.

The option `segment_alignment` of `ExecutorchBackendConfig` (and of `FlatTensorConfig`) and
the named data's own alignments are not stored in the file; they are read back from what
they did to it: the segment base offset and every segment offset are the previous end
rounded up to the segment alignment (`lcm` with a named-data alignment). Where several
values fit, the one that leaves the fewest named-data segments needing an alignment of
their own, then the default (128), then the largest (the most padding explained). A
`.pte` and its `.ptd` files are written by one serializer call, with one value
(`shared_segment_alignment`). Mirrors exir/_serialize/_program.py (`serialize_pte_binary`)
and extension/flat_tensor/serialize/serialize.py of ExecuTorch 1.5.1; keep in sync.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from emitter_filter.errors import PteFormatError
from emitter_filter.ondisk.read.file_headers import (
    DEFAULT_SEGMENT_ALIGNMENT,
    FH,
    FH_LENGTH,
    FH_MAGIC,
    FLAT_TENSOR_FLATBUFFER_ALIGNMENT,
    MAX_ALIGNMENT,
    POWERS_OF_TWO,
    aligned,
    insert_header,
    position_alignment,
    preferring,
)

if TYPE_CHECKING:
    from emitter_filter.ondisk.read.file_model import PtdFile, PteFile

__all__ = [
    "ptd_prefix",
    "PtdLayout",
    "segment_alignments",
    "pte_segment_alignments",
    "ptd_segment_alignments",
    "shared_segment_alignment",
    "pte_segment_candidates",
    "choose_segment_alignment",
    "read_segment_layout",
    "infer_ptd_layout",
    "place_segments",
]

logger = logging.getLogger(__name__)


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
                p for p in POWERS_OF_TWO if aligned(end, math.lcm(segment_alignment, p)) == offset
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
        *preferring(DEFAULT_SEGMENT_ALIGNMENT, POWERS_OF_TWO, largest=True),
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
    for small in range(1, min(math.isqrt(common), MAX_ALIGNMENT) + 1):
        if common % small == 0:
            divisors.update((small, common // small))
    gap = base - header_end
    return sorted((d for d in divisors if gap < d <= MAX_ALIGNMENT and d & (d - 1)), reverse=True)


def choose_segment_alignment(
    candidates: dict[int, tuple[int, ...]], preferred: int | None, count: int
) -> tuple[int, tuple[int, ...]]:
    """(`segment_alignment`, each of `count` segments' own alignment): `preferred` if the
    file allows it, else the first candidate, else the default (logged)."""
    if preferred in candidates:
        return preferred, candidates[preferred]
    if candidates:
        return next(iter(candidates.items()))
    logger.info("segment offsets fit no alignment; using %d", DEFAULT_SEGMENT_ALIGNMENT)
    return DEFAULT_SEGMENT_ALIGNMENT, (1,) * count


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


def pte_segment_candidates(
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
    candidates = pte_segment_candidates(pte, aliased, segment_alignment, required)
    return choose_segment_alignment(candidates, segment_alignment, len(pte.segments))


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
    return PtdLayout(*choose_segment_alignment(segment_candidates, segment_alignment, count))


def ptd_prefix(flatbuffer: bytes, layout: PtdLayout, segment_data_size: int) -> tuple[bytes, int]:
    """(header, flatbuffer and padding, segment base offset), as `FlatTensorSerializer` writes."""
    padded = aligned(FH_LENGTH, FLAT_TENSOR_FLATBUFFER_ALIGNMENT)
    base = aligned(len(flatbuffer) + padded, layout.segment_alignment)
    header = FH.pack(FH_MAGIC, FH_LENGTH, padded, len(flatbuffer), base, segment_data_size)
    data = insert_header(flatbuffer, header.ljust(padded, b"\0"))
    return data.ljust(base, b"\0"), base
