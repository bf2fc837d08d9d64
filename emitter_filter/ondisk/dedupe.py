"""Store identical bytes of a `.pte` once: named data that repeats a constant points into it.

A tied embedding lowered to XNNPACK is written twice: once in the constant segment
for the portable `embedding` op, once as XNNPACK named data for the linear. In the
`.pte` format both are `(offset, size)` ranges relative to `segment_base_offset`,
so the named data's `DataSegment` can point at the constant's range instead:

    in.pte   [header | program  | constant: P W E | delegate | named: W  b ]
    out.pte  [header | program' | constant: P W E | delegate | named: b     ]
             segments[j] = (offset of W in the constant segment, len(W))

One transform of serialized bytes, wherever they are: `dedupe_pieces` on the
buffers of ExecuTorch's `Cord` (the hook, after pruning when both are on),
`dedupe_output` on a pruned file not yet written (`emitter-filter prune
--dedupe`), `dedupe_file` and `dedupe_pte`; so all write the same bytes for the
same input by construction. It costs one compare of the repeated bytes and a
few kilobytes of program: the input is read as parts (`ByteSource`), compared
where it lies, and the output is those parts again (the same buffer objects,
ranges of the same files) around a new header and program; no weight is copied.
On disk (`write_deduplicated`) a large repeat is compared while the output is
written, a core each.

Rules:

- Aliased: a named-data segment of the `.pte` whose bytes equal a constant
  entry's bytes (the tensor's size, compared in full: `_find_repeated_constants`).
  Its `Program.segments` slot is rewritten in place to the constant's range, so no
  index changes; the keys sharing that segment follow it.
- Only onto live bytes: the constant must be one a live value reads, so that
  pruning (on or off) never drops what an alias reads; a live weight is never
  pointed at a dead buffer that happens to hold the same bytes.
- Never aliased: mutable data (the runtime copies it into its arena at load, and
  nothing may depend on it being read-only), delegate blobs, `.ptd` files, and
  constants with constants or named data with named data (the emitter and
  `NamedDataStore` already store those once).
- Alignment: an aliased range keeps the alignment ExecuTorch gave the named
  data's segment (the segment alignment, or the entry's own where its padding
  shows a larger one). The constant segment is laid out again with zeros inserted
  before an aliased entry where it needs more alignment than it has; every other
  entry keeps its offset modulo its alignment. Segments keep their order and are
  placed as `serialize_pte_binary` places them.
- The program: only numbers change (segment ranges, constant offsets, the
  header's segment data size), so they are written over the input's own
  program bytes and every other byte stays (`layout.patch_program`); where a
  number is not stored (a zero the packer left out), the program is packed
  again as the serializer options read back from the file pack it.
- Nothing to alias: the input is returned as it is, byte for byte.

What is about the file format is `layout`'s, as for `prune_file`: the segment
alignments read back from the file (`read_segment_layout`), segment placement,
the in-place patch, and for the fallback the serializer options
(`read_pte_layout`) and the packer (`pack_program`). The streamed, atomic write
is `output`'s. This module decides what to alias and where the constant segment
needs zeros.

What is valid and which ranges are already shared is `analysis.analyse_file`'s,
the analysis `audit` and `prune` call: a file whose ranges overlap without being
the same range is a `PteFormatError` here as there.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from emitter_filter.errors import InvariantError, PteFormatError
from emitter_filter.ondisk.analyse.analysis import Alias, SharedRange, analyse_file, find_aliases
from emitter_filter.ondisk.read.byte_source import ByteSource, Compared, Piece
from emitter_filter.ondisk.read.file_model import PteFile
from emitter_filter.ondisk.read.layout import (
    pack_program,
    patch_program,
    place_segments,
    position_alignment,
    program_prefix,
    read_pte_layout,
    read_segment_layout,
)
from emitter_filter.ondisk.read.read_pte import PteProgram, read_pte_program
from emitter_filter.ondisk.write.output import (
    EarlyCopy,
    OutputCheck,
    OutputFile,
    ProgressFn,
    UnconfirmedOutput,
    check_outputs,
    write_outputs,
)
from emitter_filter.program.duplicates import StoredCopy
from emitter_filter.program.generated_fields import vector_ints
from emitter_filter.program.reachability import DataSpace

__all__ = [
    "DedupeReport",
    "dedupe_pte",
    "dedupe_pieces",
    "dedupe_output",
    "write_deduplicated",
    "dedupe_file",
]

logger = logging.getLogger(__name__)

# Bytes of each candidate read before any is compared in full, as duplicates.py groups them.
_PREFIX = 32

# A candidate this large is compared while the output is written, not before (on disk).
_COMPARE_LATER = 1 << 20

_SEGMENT_SPACES = ("named_data", "delegate", "segments")


@dataclass(frozen=True)
class DedupeReport:
    """What `dedupe_pte` or `dedupe_file` did.

    Attributes:
        bytes_before: Size of the input.
        bytes_after: Size of the output.
        shared: The ranges of the output that are now stored once for several
            references (only those this run created), in output offsets.
        seconds: Wall time of the transform.
    """

    bytes_before: int
    bytes_after: int
    shared: tuple[SharedRange, ...]
    seconds: float

    @property
    def saved_bytes(self) -> int:
        """Bytes the output is smaller than the input."""
        return self.bytes_before - self.bytes_after

    def __str__(self) -> str:
        return self.summary()

    def to_json(self) -> dict:
        """The "dedupe" object of `prune --dedupe --json`."""
        return {
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "saved_bytes": self.saved_bytes,
            "shared": [shared.to_json() for shared in self.shared],
        }

    def summary(self) -> str:
        """One line, for the log and the CLI."""
        return (
            f"deduplicated {len(self.shared)} named data into the constant segment: "
            f"{self.bytes_before:,} -> {self.bytes_after:,} B ({self.saved_bytes:,} saved) "
            f"in {self.seconds * 1e3:.1f} ms"
        )


# --- the transform ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Output:
    """Every byte of the output: `prefix` at 0, then each (dst, src, nbytes) piece; zeros between.

    Pieces are in output order, empty segments included, so the last ends
    where the file does.
    """

    prefix: bytes
    pieces: tuple[tuple[int, int, int], ...]
    shared: tuple[SharedRange, ...]


@dataclass(frozen=True)
class _Aliases:
    """Collected: every segment that reads another's range in the output.

    Attributes:
        alias: What each aliased segment reads, the input's aliases included.
        existing: The segments aliased in the input already.
        new: The named-data segments this run aliases to a constant, by index.
        unconfirmed: (constant offset, segment offset, size) of the aliases whose
            bytes are compared while the output is written (`compare_later`).
    """

    alias: dict[int, Alias]
    existing: frozenset[int]
    new: tuple[int, ...]
    unconfirmed: tuple[tuple[int, int, int], ...] = ()


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


def _find_repeated_constants(
    pte: PteFile,
    source: ByteSource,
    segments: Sequence[int],
    live: Collection[int],
    compare_later: list[tuple[int, int, int]] | None = None,
) -> dict[int, int]:
    """Which of the named-data `segments` hold exactly a constant entry's bytes: {segment: entry}.

    Candidates are the constants of the segment's length and first 32 bytes (read
    only for lengths a segment has). One candidate is compared byte for byte
    where the bytes lie (`ByteSource.same_bytes`: a memcmp of the serializer's
    own buffers, no copy, nothing at all when both are one buffer); where
    several share length and prefix, digests (each computed once) decide, so
    the cost never grows with the number of look-alikes. The first equal entry
    in index order wins. Only `live` entries are candidates: a dead one is what
    pruning drops, so nothing live may come to read it.

    With `compare_later`, a single candidate of `_COMPARE_LATER` bytes or more
    whose last bytes match too counts as equal, and its (constant offset,
    segment offset, size) is appended there, to compare while the output is
    written (`OutputFile.confirm`).
    """
    constants: dict[int, list[tuple[int, int]]] = {}
    for index, entry in sorted(pte.entries[DataSpace.CONSTANT].items()):
        if index and entry.nbytes and index in live:
            constants.setdefault(entry.nbytes, []).append((index, entry.offset))
    prefixes: dict[int, bytes] = {}
    digests: dict[int, bytes] = {}
    found = {}
    for number in segments:
        segment = pte.segments[number]
        same_length = constants.get(segment.size, ())
        if number in (pte.constant_segment, pte.mutable_segment) or not same_length:
            continue
        prefix = source.read(segment.offset, min(_PREFIX, segment.size), "named data")
        for index, offset in same_length:
            if index not in prefixes:
                prefixes[index] = source.read(offset, min(_PREFIX, segment.size), "constant")
        matching = [(i, o) for i, o in same_length if prefixes[i] == prefix]
        if len(matching) == 1:
            index, offset = matching[0]
            size = segment.size
            if compare_later is not None and size >= _COMPARE_LATER:
                tail = size - _PREFIX
                if source.same_bytes(offset + tail, segment.offset + tail, _PREFIX, "named data"):
                    compare_later.append((offset, segment.offset, size))
                    found[number] = index
            elif source.same_bytes(offset, segment.offset, size, "named data"):
                found[number] = index
        elif matching:
            digest = source.sha256(segment.offset, segment.size, "named data")
            for index, offset in matching:
                if index not in digests:
                    digests[index] = source.sha256(offset, segment.size, "constant")
                if digests[index] == digest:
                    found[number] = index
                    break
    return found


def _collect_aliases(pte: PteFile, source: ByteSource, compare_later: bool) -> _Aliases | None:
    """Collects the input's aliases (`analysis`) and the named data that repeats a constant.

    None when there is nothing new to alias. With `compare_later`, large repeats
    are compared while the output is written (`_find_repeated_constants`).

    Raises:
        PteFormatError: The file is malformed (`analyse_file`), or a segment aliases mutable data.
    """
    analysis = analyse_file(pte, {})
    alias = find_aliases(analysis.shared)
    if pte.constant_segment is None or not pte.segment_base_offset:
        return None
    mutable = [index for index, target in alias.items() if target.space == "mutable"]
    if mutable:
        raise PteFormatError(
            pte.path,
            "a segment aliases mutable data; dedupe never writes that",
            pte.segments[mutable[0]].offset,
        )
    existing = frozenset(alias)
    named = {e.segment_index for e in pte.named_data if e.file == pte.path}
    candidates = [index for index in sorted(named) if index not in alias]
    live = analysis.liveness.live_data[DataSpace.CONSTANT]
    unconfirmed: list[tuple[int, int, int]] | None = [] if compare_later else None
    found = _find_repeated_constants(pte, source, candidates, live, unconfirmed)
    if not found:
        return None
    alias.update((index, Alias("constant", entry)) for index, entry in found.items())
    # A segment that already shared the range of one now stored in the constant
    # segment follows it there (its target is never itself an alias: one step).
    for index, target in list(alias.items()):
        if target.space == "segment" and target.index in alias:
            alias[index] = alias[target.index]
    return _Aliases(alias, existing, tuple(found), tuple(unconfirmed or ()))


def _alignment_needs(
    pte: PteFile, aliases: _Aliases, segment_alignment: int, own_alignments: Sequence[int]
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
    pte: PteFile, program, aliases: _Aliases, segment_layout: tuple[int, tuple[int, ...]]
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
    if pte.constant_segment is None:  # `_collect_aliases` finds no aliases without one
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
    pte: PteFile, aliases: _Aliases, placement: _Placement, base: int, output_name: str
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


def _alias_repeated_named_data(
    pte: PteFile,
    program,
    program_data: bytes,
    source: ByteSource,
    aliases: _Aliases,
    output_name: str,
    segment_alignment: int | None = None,
) -> _Output:
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
    return _Output(
        prefix=prefix,
        pieces=tuple((base + dst, src, n) for dst, src, n in placement.pieces),
        shared=_new_shared_ranges(pte, aliases, placement, base, output_name),
    )


def _packed_prefix(
    pte: PteFile,
    program,
    program_data: bytes,
    aliases: _Aliases,
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


def _output_parts(source: ByteSource, output: _Output) -> list:
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


@dataclass(frozen=True)
class _Deduplicated:
    """The output as parts of its source's parts, what it shares, and what is yet to compare."""

    parts: list
    shared: tuple[SharedRange, ...]
    unconfirmed: tuple[tuple[int, int, int], ...]


def _dedupe_source(
    source: ByteSource,
    output_name: str,
    segment_alignment: int | None,
    read: PteProgram | None = None,
    compare_later: bool = False,
) -> _Deduplicated | None:
    """Reads the `.pte` in `source` (unless `read` is its reading already) and deduplicates
    it; None when nothing is stored twice."""
    read = read_pte_program(source) if read is None else read
    aliases = _collect_aliases(read.pte, source, compare_later)
    if aliases is None:
        return None
    output = _alias_repeated_named_data(
        read.pte,
        read.program,
        read.program_data,
        source,
        aliases,
        output_name,
        segment_alignment,
    )
    return _Deduplicated(_output_parts(source, output), output.shared, aliases.unconfirmed)


def _report(before: int, after: int, shared, started: float) -> DedupeReport:
    report = DedupeReport(before, after, shared, time.perf_counter() - started)
    logger.debug("%s", report)
    return report


def dedupe_pte(data: bytes, segment_alignment: int | None = None) -> tuple[bytes, DedupeReport]:
    """Stores each named-data blob that repeats a constant once, in a serialized `.pte`.

    Args:
        data: The `.pte` file's bytes. Not modified.
        segment_alignment: The `segment_alignment` it was written with, where the
            caller knows it (the hook does): the file alone may allow several.

    Returns:
        The new file's bytes (`data` itself when nothing is stored twice) and
        what was shared.

    Raises:
        PteFormatError: The file is malformed, or ranges overlap without being the same.
        ProgramFormatError: The program refers to something that does not exist.
    """
    started = time.perf_counter()
    with ByteSource(data) as source:
        deduplicated = _dedupe_source(source, source.name, segment_alignment)
    if deduplicated is None:
        return data, _report(len(data), len(data), (), started)
    result = b"".join(deduplicated.parts)
    return result, _report(len(data), len(result), deduplicated.shared, started)


def dedupe_pieces(
    pieces: Sequence[bytes | Piece],
    segment_alignment: int | None = None,
    compared: Compared | None = None,
    *,
    read: PteProgram | None = None,
) -> tuple[Sequence[bytes | Piece], DedupeReport]:
    """`dedupe_pte` of a `.pte` given as its pieces in order (a serializer's chunks).

    Never joins them, and never reads a `Piece` (a range of a file) except
    where the transform reads: the output reuses every piece it copies whole
    (a weight is one), so no weight is copied or read. Returns `pieces`
    itself when nothing is stored twice. `compared` records each memcmp of
    two `bytes` pieces (for the proof of the result to find); `read` is
    `read_pte_program` of a `ByteSource` of `pieces` (named "<bytes>"), where
    the caller has it.
    """
    started = time.perf_counter()
    with ByteSource(list(pieces), compared=compared) as source:
        deduplicated = _dedupe_source(source, source.name, segment_alignment, read)
    if deduplicated is None:
        return pieces, _report(source.size, source.size, (), started)
    parts = [bytes(p) if isinstance(p, memoryview) else p for p in deduplicated.parts]
    return parts, _report(source.size, sum(len(p) for p in parts), deduplicated.shared, started)


def dedupe_output(
    output: OutputFile,
    segment_alignment: int | None = None,
    *,
    read: PteProgram | None = None,
    compare_later: bool = False,
) -> tuple[OutputFile, DedupeReport]:
    """`dedupe_pte` of an output not yet written (a pruned file, as `prune_file` decided it).

    Reads from its inputs only where the transform reads, so that a prune and a
    dedupe write the file once. `read` is the output's reading where the caller
    has one (an output that is its input as it is: `read_pte_program` of it;
    rewritten by the dedupe where the program must be packed again). Returns
    `output` itself when nothing is stored twice. With `compare_later`, a large
    repeat is compared while the result is written (its `confirm`): see
    `write_deduplicated`.
    """
    started = time.perf_counter()
    # The source reads the output's pieces, whose descriptors are the caller's:
    # the comparisons left to `confirm` read them after this block too.
    with ByteSource(output.parts(), name=output.path) as source:
        deduplicated = _dedupe_source(source, output.path, segment_alignment, read, compare_later)
    if deduplicated is None:
        return output, _report(source.size, source.size, (), started)
    confirm = tuple(
        functools.partial(source.same_bytes, a, b, size, "named data")
        for a, b, size in deduplicated.unconfirmed
    )
    result = OutputFile(output.path, output.source_fd, b"", [(0, deduplicated.parts)], confirm)
    return result, _report(source.size, result.size, deduplicated.shared, started)


def write_deduplicated(
    outputs: list[OutputFile],
    segment_alignment: int | None = None,
    *,
    read: PteProgram | None = None,
    progress: ProgressFn | None = None,
    early: EarlyCopy | None = None,
    validate: OutputCheck | None = None,
    prove: Callable[[Sequence[OutputFile]], None] | None = None,
) -> tuple[int, DedupeReport]:
    """Deduplicates `outputs[0]` (`dedupe_output`) and writes every output (`write_outputs`).

    A large repeat is compared while the kernel copies the output: the two take
    a core each, and on a 652 MB file the compare of the two 113 MB copies no
    longer comes before the copy. Where a compare finds the bytes differ (they
    matched in size, first and last bytes), nothing was written: the output is
    decided again, every compare made first, and written. Returns the bytes
    written and what was shared; `outputs[0]` becomes the deduplicated output.
    `early` is a copy of the input begun already (`output.EarlyCopy`); `validate`
    checks the outputs before they replace anything (`output.write_outputs`); `prove`
    (`proof.prove_outputs`) is called with the outputs as decided, before anything is
    written.
    """
    planned = outputs[0]
    outputs[0], report = dedupe_output(planned, segment_alignment, read=read, compare_later=True)
    if prove is not None and not outputs[0].confirm:
        # A repeat compared while it is written is proven on the bytes written (`validate`).
        prove(outputs)
    try:
        return write_outputs(outputs, progress, early, validate=validate), report
    except UnconfirmedOutput:
        logger.debug("%s: a repeat's bytes differ after all; deciding again", planned.path)
    # The first try may have rewritten `read.program`: read the planned output again.
    outputs[0], report = dedupe_output(planned, segment_alignment)
    if prove is not None:
        prove(outputs)
    return write_outputs(outputs, progress, validate=validate), report


def dedupe_file(
    src: str | os.PathLike, dst: str | os.PathLike, segment_alignment: int | None = None
) -> DedupeReport:
    """Writes `src` with each named-data blob that repeats a constant stored once.

    The same transform as `dedupe_pte`, streamed by `output` as `prune_file`
    writes: only headers, the program and the entries whose size another entry
    shares are read into memory, and those a chunk at a time.

    Args:
        src: The `.pte` to read. Not modified.
        dst: Where to write; must not be `src`. Written atomically (a temporary
            file in its directory, renamed over it once complete). A file with
            nothing stored twice is copied as it is.
        segment_alignment: Taken where the file allows it, as `dedupe_pte` takes it.

    Raises:
        PteFormatError: The file is malformed, or ranges overlap without being the same.
        ProgramFormatError: The program refers to something that does not exist.
        OutputFileError: `dst` is `src`, or cannot be written.
    """
    started = time.perf_counter()
    src, dst = os.fspath(src), os.fspath(dst)
    check_outputs([src], [dst], "dedupe")
    with EarlyCopy(src, dst) as early, ByteSource(src) as source:
        (whole,) = source.parts
        # Not validated (`validate.validate_outputs`): the hook imports this module, and the
        # validator above it would make the import graph deeper than tests/test_layout.py
        # allows; `prune --dedupe` (`prune_file(dedupe=True)`) validates what it writes.
        bytes_after, report = write_deduplicated(
            [OutputFile(dst, whole.fd, b"", [(0, [whole])])], segment_alignment, early=early
        )
    report = dataclasses.replace(
        report, bytes_after=bytes_after, seconds=time.perf_counter() - started
    )
    logger.info("%s -> %s: %s", src, dst, report)
    return report
