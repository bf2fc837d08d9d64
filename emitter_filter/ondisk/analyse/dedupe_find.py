"""Which named data of a `.pte` repeat a constant's bytes: the aliases `dedupe` makes.

A named-data segment is aliased to a constant entry when their bytes are equal (the
tensor's size, compared in full), the constant is live (so that pruning never drops
what an alias reads), and the segment is not aliased already. The input's own aliases
(`stored_ranges.find_aliases`) come along, a segment that shared a range now stored in the
constant segment following it there. The rewrite is `dedupe_rewrite`'s.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from emitter_filter.errors import PteFormatError
from emitter_filter.ondisk.analyse.analysis import analyse_file
from emitter_filter.ondisk.analyse.stored_ranges import Alias, find_aliases
from emitter_filter.ondisk.read.byte_source import ByteSource
from emitter_filter.ondisk.read.file_model import PteFile
from emitter_filter.program.reachability import DataSpace

__all__ = ["Aliases", "collect_aliases"]

# Bytes of each candidate read before any is compared in full, as duplicates.py groups them.
_PREFIX = 32

# A candidate this large is compared while the output is written, not before (on disk).
_COMPARE_LATER = 1 << 20


@dataclass(frozen=True)
class Aliases:
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


def collect_aliases(pte: PteFile, source: ByteSource, compare_later: bool) -> Aliases | None:
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
    return Aliases(alias, existing, tuple(found), tuple(unconfirmed or ()))


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
