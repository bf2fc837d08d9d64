"""Store identical bytes of a `.pte` once: named data that repeats a constant points into it.

A tied embedding lowered to XNNPACK is written twice: once in the constant segment
for the portable `embedding` op, once as XNNPACK named data for the linear. In the
`.pte` format both are `(offset, size)` ranges relative to `segment_base_offset`,
so the named data's `DataSegment` can point at the constant's range instead:

    in.pte   [header | program  | constant: P W E | delegate | named: W  b ]
    out.pte  [header | program' | constant: P W E | delegate | named: b     ]
             segments[j] = (offset of W in the constant segment, len(W))

`dedupe_pte` is that one transform of serialized bytes; the hook applies it to
the bytes ExecuTorch serialized (after pruning, when both are on) and
`emitter-filter prune --dedupe` to a file, so both write the same bytes for the
same input by construction.

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
- Nothing to alias: the input is returned as it is, byte for byte.

What is about the file format is `layout`'s, as for `prune_file`: the
serializer options read back from the file (`read_pte_layout`: segment, tensor
and delegate alignments, header padding), segment placement, the extended
header, and the program packer that keeps inline blobs' force_align
(`pack_program`). The streamed, atomic write is `output`'s. This module decides
what to alias and where the constant segment needs zeros.

What is valid and which ranges are already shared is `analysis.analyse_file`'s,
the analysis `audit` and `prune` call: a file whose ranges overlap without being
the same range is a `PteFormatError` here as there.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from emitter_filter.duplicates import StoredCopy
from emitter_filter.errors import InvariantError, PteFormatError
from emitter_filter.generated_fields import vector_ints
from emitter_filter.ondisk.analysis import Alias, SharedRange, analyse_file, find_aliases
from emitter_filter.ondisk.byte_source import ByteSource
from emitter_filter.ondisk.file_model import PteFile
from emitter_filter.ondisk.layout import (
    PteLayout,
    pack_program,
    place_segments,
    position_alignment,
    program_prefix,
    read_pte_layout,
)
from emitter_filter.ondisk.output import OutputFile, Piece, check_outputs, open_input, write_outputs
from emitter_filter.ondisk.read_pte import read_pte_program
from emitter_filter.reachability import DataSpace

__all__ = ["DedupeReport", "dedupe_pte", "dedupe_pieces", "dedupe_file"]

logger = logging.getLogger(__name__)

# Bytes per read when two ranges are compared.
_COMPARE_CHUNK = 1 << 20
# Bytes of each candidate read before any is compared in full, as duplicates.py groups them.
_PREFIX = 32

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
    """

    alias: dict[int, Alias]
    existing: frozenset[int]
    new: tuple[int, ...]


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


def _same_bytes(source: ByteSource, a: int, b: int, nbytes: int) -> bool:
    """Whether `nbytes` at `a` and at `b` are equal, reading a chunk of each at a time."""
    for start in range(0, nbytes, _COMPARE_CHUNK):
        count = min(_COMPARE_CHUNK, nbytes - start)
        if source.read(a + start, count, "constant") != source.read(b + start, count, "named data"):
            return False
    return True


def _find_repeated_constants(
    pte: PteFile, source: ByteSource, segments: Sequence[int], live: Collection[int]
) -> dict[int, int]:
    """Which of the named-data `segments` hold exactly a constant entry's bytes: {segment: entry}.

    Candidates are the constants of the segment's length and first 32 bytes (read
    only for lengths a segment has). One candidate is compared byte for byte,
    which reads what hashing would but costs a memcmp instead of a sha256; where
    several share length and prefix, digests (each computed once) decide, so
    the cost never grows with the number of look-alikes. The first equal entry
    in index order wins. Only `live` entries are candidates: a dead one is what
    pruning drops, so nothing live may come to read it.
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
            if _same_bytes(source, offset, segment.offset, segment.size):
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


def _collect_aliases(pte: PteFile, source: ByteSource) -> _Aliases | None:
    """Collects the input's aliases (`analysis`) and the named data that repeats a constant.

    None when there is nothing new to alias.

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
            pte.path, "a segment aliases mutable data; dedupe never writes that",
            pte.segments[mutable[0]].offset,
        )
    existing = frozenset(alias)
    named = {e.segment_index for e in pte.named_data if e.file == pte.path}
    candidates = [index for index in sorted(named) if index not in alias]
    live = analysis.liveness.live_data[DataSpace.CONSTANT]
    found = _find_repeated_constants(pte, source, candidates, live)
    if not found:
        return None
    alias.update((index, Alias("constant", entry)) for index, entry in found.items())
    # A segment that already shared the range of one now stored in the constant
    # segment follows it there (its target is never itself an alias: one step).
    for index, target in list(alias.items()):
        if target.space == "segment" and target.index in alias:
            alias[index] = alias[target.index]
    return _Aliases(alias, existing, tuple(found))


def _alignment_needs(
    pte: PteFile, aliases: _Aliases, layout: PteLayout
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
        else math.lcm(layout.segment_alignment, layout.segment_alignments[index])
        for index in aliases.alias
    }
    own = list(layout.segment_alignments)
    entry_alignment: dict[int, int] = {}
    for index, target in aliases.alias.items():
        if target.space == "constant":
            entry_alignment[target.index] = max(entry_alignment.get(target.index, 1), need[index])
        else:
            own[target.index] = max(own[target.index], need[index])
    return need, entry_alignment, own


def _place_segments(
    pte: PteFile, program, aliases: _Aliases, layout: PteLayout
) -> _Placement:
    """Places every segment: the constant segment with the zeros its aliases need, the others
    as `serialize_pte_binary` places them, and each alias on the range it reads."""
    need, entry_alignment, own = _alignment_needs(pte, aliases, layout)
    alignment, alias = layout.segment_alignment, aliases.alias
    # Where the constant segment starts decides the zeros it needs: place the
    # segments up to it first, then all of them with its new size.
    kept = [s.index for s in pte.segments if s.index not in alias]
    constant = pte.segments[pte.constant_segment]
    sizes = {index: pte.segments[index].size for index in kept}
    sizes[constant.index] = 0
    offsets, _ = place_segments([(sizes[i], own[i]) for i in kept], alignment)
    constant_at = offsets[kept.index(constant.index)]
    constant_offsets, runs, sizes[constant.index] = _constant_layout(
        vector_ints(program.constantSegment.offsets),
        constant.size, constant_at, entry_alignment, pte.path,
    )
    offsets, end = place_segments([(sizes[i], own[i]) for i in kept], alignment)
    placed = {index: (at, sizes[index]) for index, at in zip(kept, offsets)}
    pieces: list[tuple[int, int, int]] = []
    for index, at in zip(kept, offsets):
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
    output_name: str,
    segment_alignment: int | None = None,
) -> _Output | None:
    """Decides every output byte: collect, lay out, place, pack; None when nothing is aliased.

    Rewrites `program` (our own unpacked copy) in place. `segment_alignment` is
    taken where the file allows it (`read_pte_layout`).
    """
    aliases = _collect_aliases(pte, source)
    if aliases is None:
        return None
    layout = read_pte_layout(
        pte, program, program_data, aliases.existing, segment_alignment, required=True
    )
    placement = _place_segments(pte, program, aliases, layout)
    for index, segment in enumerate(program.segments or ()):
        segment.offset, segment.size = placement.placed[index]
    program.constantSegment.offsets = placement.constant_offsets
    flatbuffer = pack_program(program, layout.tensor_alignment, layout.delegate_alignment)
    prefix, base = program_prefix(flatbuffer, layout, placement.data_size)
    logger.debug(
        "%s: %s, base %d -> %d, %d new aliases",
        pte.path, layout, pte.segment_base_offset, base, len(aliases.new),
    )
    return _Output(
        prefix=prefix,
        pieces=tuple((base + dst, src, n) for dst, src, n in placement.pieces),
        shared=_new_shared_ranges(pte, aliases, placement, base, output_name),
    )


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
    if any(b < a for a, b in zip(offsets, offsets[1:])):
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


def _join(data: bytes, output: _Output) -> bytes:
    """The output's bytes: one copy, gathered from views of `data`."""
    view, parts, at = memoryview(data), [output.prefix], len(output.prefix)
    for dst, src, nbytes in output.pieces:
        parts += [bytes(dst - at), view[src : src + nbytes]]
        at = dst + nbytes
    return b"".join(parts)


def dedupe_pte(
    data: bytes, segment_alignment: int | None = None
) -> tuple[bytes, DedupeReport]:
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
    read = read_pte_program(data)
    pte, program, program_data = read.pte, read.program, read.program_data
    with ByteSource(data) as source:
        output = _alias_repeated_named_data(
            pte, program, program_data, source, pte.path, segment_alignment
        )
    result = data if output is None else _join(data, output)
    report = DedupeReport(
        bytes_before=len(data),
        bytes_after=len(result),
        shared=() if output is None else output.shared,
        seconds=time.perf_counter() - started,
    )
    logger.debug("%s", report)
    return result, report


def _output_pieces(source: ByteSource, pieces: Sequence[bytes], output: _Output) -> list[bytes]:
    """The output as pieces: each input piece it copies whole is that very object (no copy);
    only the prefix, zeros and parts of pieces are new bytes."""
    parts, at = [output.prefix], len(output.prefix)
    for dst, src, nbytes in output.pieces:
        if dst > at:
            parts.append(bytes(dst - at))
        for index, view in source.views(src, nbytes):
            whole = len(view) == len(pieces[index])
            parts.append(pieces[index] if whole else bytes(view))
        at = dst + nbytes
    return parts


def dedupe_pieces(
    pieces: Sequence[bytes], segment_alignment: int | None = None
) -> tuple[Sequence[bytes], DedupeReport]:
    """`dedupe_pte` of a `.pte` given as its pieces in order (a serializer's chunks).

    Never joins them: the pieces are read where the transform reads, and the
    output reuses every piece it copies whole (a weight is one), so no weight is
    copied. Returns `pieces` itself when nothing is stored twice.
    """
    started = time.perf_counter()
    read = read_pte_program(list(pieces))
    with ByteSource(list(pieces)) as source:
        output = _alias_repeated_named_data(
            read.pte, read.program, read.program_data, source, read.pte.path, segment_alignment
        )
        result = pieces if output is None else _output_pieces(source, pieces, output)
    report = DedupeReport(
        bytes_before=source.size,
        bytes_after=sum(len(p) for p in result),
        shared=() if output is None else output.shared,
        seconds=time.perf_counter() - started,
    )
    logger.debug("%s", report)
    return result, report


def dedupe_file(
    src: str | os.PathLike, dst: str | os.PathLike, segment_alignment: int | None = None
) -> DedupeReport:
    """Writes `src` with each named-data blob that repeats a constant stored once.

    The same transform as `dedupe_pte`, streamed by `output` as `prune_file`
    writes: only headers, the program and the entries whose size another entry
    shares are read into memory.

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
    read = read_pte_program(src)
    pte, program, program_data = read.pte, read.program, read.program_data
    with ByteSource(src) as source:
        output = _alias_repeated_named_data(
            pte, program, program_data, source, dst, segment_alignment
        )
    if output is None:
        output = _Output(b"", ((0, 0, pte.file_bytes),), ())
    opened: list[int] = []
    try:
        fd = open_input(src, opened)
        runs = [(to, [Piece(fd, offset, nbytes)]) for to, offset, nbytes in output.pieces]
        bytes_after = write_outputs([OutputFile(dst, fd, output.prefix, runs)])
    finally:
        for input_fd in opened:
            os.close(input_fd)
    report = DedupeReport(
        bytes_before=pte.file_bytes,
        bytes_after=bytes_after,
        shared=output.shared,
        seconds=time.perf_counter() - started,
    )
    logger.info("%s -> %s: %s", src, dst, report)
    return report
