"""Where every byte of a deduplicated `.pte` goes: its segments placed, its program patched.

Given the aliases (`dedupe_find.collect_aliases`), each aliased segment is placed on the
range it reads; the constant segment is laid out again with zeros before an entry whose
alias needs more alignment than it has; the other segments are placed as
`serialize_pte_binary` places them. Only numbers change in the program, written over the
input's own bytes (`layout.patch_program`), or packed again where one is not stored. The
output is the new prefix and ranges of the input (`output_parts`): no weight is copied.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from emitter_filter.errors import InvariantError, PteFormatError
from emitter_filter.ondisk.analyse.stored_ranges import Alias, SharedRange
from emitter_filter.ondisk.read.byte_source import ByteSource, Piece
from emitter_filter.ondisk.read.file_headers import position_alignment
from emitter_filter.ondisk.read.file_model import PteFile
from emitter_filter.ondisk.read.layout import (
    pack_program,
    patch_program,
    program_prefix,
    read_pte_layout,
)
from emitter_filter.ondisk.read.segment_layout import place_segments, read_segment_layout
from emitter_filter.program.duplicates import StoredCopy
from emitter_filter.program.generated_fields import vector_ints

if TYPE_CHECKING:
    # A type only: importing the search would put `dedupe` a layer higher (tests/test_layout.py).
    from emitter_filter.ondisk.analyse.dedupe_find import Aliases

__all__ = ["DedupeOutput", "alias_repeated_named_data", "output_parts"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DedupeOutput:
    """Every byte of the output: `prefix` at 0, then each (dst, src, nbytes) piece; zeros between.

    Pieces are in output order, empty segments included, so the last ends
    where the file does.
    """

    prefix: bytes
    pieces: tuple[tuple[int, int, int], ...]
    shared: tuple[SharedRange, ...]


@dataclass(frozen=True)
class _Placement:
    """Where every segment goes, relative to the new segment base offset.

    Attributes:
        placed: (offset, size) of every segment, aliased ones included.
        pieces: (dst, src absolute in the input, nbytes) of the bytes copied.
        constant_offsets: The new `constant_segment.offsets`.
        data_size: Bytes from the base to the end of the file.
    """

    placed: dict[int, tuple[int, int]]
    pieces: tuple[tuple[int, int, int], ...]
    constant_offsets: list[int]
    data_size: int


def alias_repeated_named_data(
    pte: PteFile,
    program,
    program_data: bytes,
    source: ByteSource,
    aliases: Aliases,
    output_name: str,
    segment_alignment: int | None = None,
) -> DedupeOutput:
    """Decides every output byte for the collected `aliases`: lay out, place, then write the
    new numbers into the program.

    Only numbers change (segment ranges, constant offsets, the data size), so
    they are written over the input's own program bytes (`patch_program`); where
    one is not stored there (a default left out), `program` (our own unpacked
    copy, rewritten in place) is packed instead. `segment_alignment` is taken
    where the file allows it (`read_segment_layout`).
    """
    segment_layout = read_segment_layout(pte, aliases.existing, segment_alignment, required=True)
    placement = _place_segments(pte, program, aliases, segment_layout)
    base = pte.segment_base_offset
    prefix = patch_program(
        source.read(0, base, "program"),
        program,
        placement.placed,
        placement.constant_offsets,
        placement.data_size,
    )
    if prefix is None:
        prefix, base = _packed_prefix(
            pte, program, program_data, aliases, placement, segment_alignment
        )
    logger.debug(
        "%s: base %d -> %d, %d new aliases",
        pte.path,
        pte.segment_base_offset,
        base,
        len(aliases.new),
    )
    return DedupeOutput(
        prefix=prefix,
        pieces=tuple((base + dst, src, n) for dst, src, n in placement.pieces),
        shared=_new_shared_ranges(pte, aliases, placement, base, output_name),
    )


def _alignment_needs(
    pte: PteFile, aliases: Aliases, segment_alignment: int, own_alignments: Sequence[int]
) -> tuple[dict[int, int], dict[int, int], list[int]]:
    """Lays out the alignments: what each aliased range must keep, relative to the base.

    Returns (need per aliased segment, need per constant entry an alias reads,
    own alignment per segment). An input alias keeps the alignment its position
    shows; a new one the alignment ExecuTorch gave the named data's segment.
    """
    base = pte.segment_base_offset
    need = {
        index: position_alignment(pte.segments[index].offset - base)
        if index in aliases.existing
        else math.lcm(segment_alignment, own_alignments[index])
        for index in aliases.alias
    }
    own = list(own_alignments)
    entry_alignment: dict[int, int] = {}
    for index, target in aliases.alias.items():
        if target.space == "constant":
            entry_alignment[target.index] = max(entry_alignment.get(target.index, 1), need[index])
        else:
            own[target.index] = max(own[target.index], need[index])
    return need, entry_alignment, own


def _place_segments(
    pte: PteFile, program, aliases: Aliases, segment_layout: tuple[int, tuple[int, ...]]
) -> _Placement:
    """Places every segment: the constant segment with the zeros its aliases need, the others
    as `serialize_pte_binary` places them, and each alias on the range it reads.

    `segment_layout` is `layout.read_segment_layout`'s (alignment, own alignments).
    """
    alignment, alias = segment_layout[0], aliases.alias
    need, entry_alignment, own = _alignment_needs(pte, aliases, *segment_layout)
    # Where the constant segment starts decides the zeros it needs: place the
    # segments up to it first, then all of them with its new size.
    kept = [s.index for s in pte.segments if s.index not in alias]
    if pte.constant_segment is None:  # `collect_aliases` finds no aliases without one
        raise InvariantError("dedupe: segments placed for a program without a constant segment")
    constant = pte.segments[pte.constant_segment]
    sizes = {index: pte.segments[index].size for index in kept}
    sizes[constant.index] = 0
    offsets, _ = place_segments([(sizes[i], own[i]) for i in kept], alignment)
    constant_at = offsets[kept.index(constant.index)]
    constant_offsets, runs, sizes[constant.index] = _constant_layout(
        vector_ints(program.constantSegment.offsets),
        constant.size,
        constant_at,
        entry_alignment,
        pte.path,
    )
    offsets, end = place_segments([(sizes[i], own[i]) for i in kept], alignment)
    placed = {index: (at, sizes[index]) for index, at in zip(kept, offsets, strict=True)}
    pieces: list[tuple[int, int, int]] = []
    for index, at in zip(kept, offsets, strict=True):
        if index == constant.index:
            pieces += [(at + dst, constant.offset + src, n) for dst, src, n in runs]
        else:
            pieces.append((at, pte.segments[index].offset, sizes[index]))
    for index, target in alias.items():
        size = pte.segments[index].size
        if target.space == "constant":
            placed[index] = (constant_at + constant_offsets[target.index], size)
        else:
            placed[index] = (placed[target.index][0], size)
        if placed[index][0] % need[index]:
            raise InvariantError(
                f"segment {index} placed at {placed[index][0]}, not aligned to {need[index]}"
            )
    return _Placement(placed, tuple(pieces), constant_offsets, end)


def _new_shared_ranges(
    pte: PteFile, aliases: Aliases, placement: _Placement, base: int, output_name: str
) -> tuple[SharedRange, ...]:
    """The ranges of the output this run shares, by offset."""
    by_target: dict[Alias, list[int]] = {}
    for index in aliases.new:
        by_target.setdefault(aliases.alias[index], []).append(index)
    keys: dict[int, list[str]] = {}
    for entry in pte.named_data:
        keys.setdefault(entry.segment_index, []).append(entry.key)
    shared = []
    for target, indices in by_target.items():
        at, size = placement.placed[indices[0]]
        copies = (
            StoredCopy("constant", None, target.index, ()),
            *(StoredCopy("named_data", None, i, tuple(keys.get(i, ()))) for i in indices),
        )
        shared.append(SharedRange(output_name, base + at, size, copies))
    return tuple(sorted(shared, key=lambda s: s.offset))


def _packed_prefix(
    pte: PteFile,
    program,
    program_data: bytes,
    aliases: Aliases,
    placement: _Placement,
    segment_alignment: int | None,
) -> tuple[bytes, int]:
    """(header and program, segment base offset) with `program` rewritten and packed as the
    serializer options read back from the file (`read_pte_layout`) pack it."""
    layout = read_pte_layout(
        pte, program, program_data, aliases.existing, segment_alignment, required=True
    )
    for index, segment in enumerate(program.segments or ()):
        segment.offset, segment.size = placement.placed[index]
    program.constantSegment.offsets = placement.constant_offsets
    flatbuffer = pack_program(program, layout.tensor_alignment, layout.delegate_alignment)
    return program_prefix(flatbuffer, layout, placement.data_size)


def _constant_layout(
    offsets: Sequence[int],
    size: int,
    segment_at: int,
    entry_alignment: dict[int, int],
    path: str,
) -> tuple[list[int], list[tuple[int, int, int]], int]:
    """The constant segment with zeros inserted before entries that need more alignment.

    Returns the new offsets, the (dst, src, nbytes) runs relative to the segment,
    and its new size. Every byte moves by a multiple of the alignment all entries
    share (`quantum`), so each keeps its alignment; an aliased entry moves to the
    next multiple of what its alias needs, relative to the segment base.
    """
    # Neighbouring pairs: one fewer than the items, so zip stops early on purpose.
    if any(b < a for a, b in zip(offsets, offsets[1:], strict=False)):
        raise PteFormatError(path, "constant_segment offsets are not in increasing order")
    quantum = position_alignment(segment_at)
    for offset in offsets:
        quantum = min(quantum, position_alignment(offset))
    pad_at: dict[int, int] = {}
    for index, needed in entry_alignment.items():
        pad_at[offsets[index]] = max(pad_at.get(offsets[index], 1), needed)
    runs, shift, start = [], 0, 0
    shift_at: dict[int, int] = {}
    for cut in sorted(pad_at):
        needed = pad_at[cut]
        # A multiple of `quantum` (so every later entry keeps its alignment) that
        # puts the cut on a multiple of `needed` (not a power of two, maybe).
        pad = -(segment_at + cut + shift) % math.lcm(needed, quantum)
        if cut > start:
            runs.append((start + shift, start, cut - start))
        shift += pad
        shift_at[cut] = shift
        start = cut
    if size > start:
        runs.append((start + shift, start, size - start))
    new_offsets = []
    for offset in offsets:
        moved = max((s for c, s in shift_at.items() if c <= offset), default=0)
        new_offsets.append(offset + moved)
    return new_offsets, runs, size + shift


def output_parts(source: ByteSource, output: DedupeOutput) -> list:
    """The output as parts of `source`'s parts, in order.

    Each part copied whole is that very object (a weight's buffer, a file's
    `Piece`): nothing is read or copied. A range of a file part is a `Piece` of
    it; a range of a part in memory a memoryview of it. Only the prefix and the
    zeros between are new bytes.
    """
    parts: list[bytes | memoryview | Piece] = [output.prefix]
    at = len(output.prefix)
    for dst, src, nbytes in output.pieces:
        if dst > at:
            parts.append(bytes(dst - at))
        for index, start, count in source.spans(src, nbytes):
            part = source.parts[index]
            if count == len(part):
                parts.append(part)
            elif isinstance(part, Piece):
                parts.append(Piece(part.fd, part.offset + start, count))
            else:
                parts.append(memoryview(part)[start : start + count])
        at = dst + nbytes
    return parts
