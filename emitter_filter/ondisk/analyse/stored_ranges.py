"""What a file stores: every range a reference reads (`stored_regions`), and the ranges several
references share (`find_shared_ranges`, `find_aliases`).

`stored_regions` is the one enumeration of what a file stores: every range a
reference reads, in file order of the program; `audit` finds duplicates among
them and `find_shared_ranges` the ranges several references share. Two stored
ranges may only overlap by being the same range: `find_shared_ranges` refuses a
file where they do (`analyse_file` checks this first).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from emitter_filter.errors import PteFormatError
from emitter_filter.ondisk.read.file_model import PteFile
from emitter_filter.program.duplicates import StoredCopy
from emitter_filter.program.reachability import DataSpace

__all__ = [
    "StoredRegion",
    "SharedRange",
    "Alias",
    "stored_regions",
    "find_shared_ranges",
    "find_aliases",
]

# The spaces of `stored_regions` that are whole segments of the `.pte`.
_SEGMENT_SPACES = ("named_data", "delegate", "segments")


@dataclass(frozen=True)
class StoredRegion:
    """One range a reference reads: `nbytes` at absolute `offset` of `file`, and who reads it."""

    copy: StoredCopy
    file: str
    offset: int
    nbytes: int


def _keys_by_segment(entries) -> dict[int, tuple[int, int, list[str]]]:
    """{segment index: (offset, size, keys)} of named-data entries, in first-key order."""
    segments: dict[int, tuple[int, int, list[str]]] = {}
    for entry in entries:
        segments.setdefault(entry.segment_index, (entry.offset, entry.nbytes, []))[2].append(
            entry.key
        )
    return segments


def stored_regions(pte: PteFile) -> Iterator[StoredRegion]:
    """Every range of a file and its `.ptd` files a reference reads, in file order of the program.

    The constant and mutable entries but the placeholders, each named-data segment
    of the `.pte` once (with all its keys), the delegate blobs in segments, the
    segments nothing refers to, then each `.ptd`'s segments (space "external",
    tagged with the file's name). External entries sized from shapes (no `.ptd`
    given) are stored nowhere we read, so they are no regions. Empty ranges are
    included; callers skip them.
    """
    for space in (DataSpace.CONSTANT, DataSpace.MUTABLE):
        for index, entry in sorted(pte.entries[space].items()):
            if index:
                copy = StoredCopy(space.value, None, index, ())
                yield StoredRegion(copy, entry.file, entry.offset, entry.nbytes)
    in_pte = [entry for entry in pte.named_data if entry.file == pte.path]
    for index, (offset, size, keys) in _keys_by_segment(in_pte).items():
        copy = StoredCopy("named_data", None, index, tuple(keys))
        yield StoredRegion(copy, pte.path, offset, size)
    for blob in pte.delegates:
        if blob.location == "segment":
            copy = StoredCopy("delegate", None, blob.index, ())
            yield StoredRegion(copy, pte.path, blob.offset, blob.nbytes)
    for segment in pte.unreferenced_segments:
        copy = StoredCopy("segments", None, segment.index, ())
        yield StoredRegion(copy, pte.path, segment.offset, segment.size)
    for ptd in pte.ptd_files:
        tag = os.path.splitext(os.path.basename(ptd.path))[0]
        for index, (offset, size, keys) in _keys_by_segment(ptd.named_data.values()).items():
            copy = StoredCopy("external", tag, index, tuple(keys))
            yield StoredRegion(copy, ptd.path, offset, size)


@dataclass(frozen=True)
class SharedRange:
    """One stored range of a `.pte` that several references share.

    Attributes:
        file: The file's name (as `read_pte` gives it).
        offset: Absolute offset of the range in the file.
        nbytes: Its length.
        copies: Each reference to it: a `constant` or `mutable` entry, a
            `named_data` segment (with its keys), a `delegate` or an
            unreferenced (`segments`) segment; indices are the file's own.
    """

    file: str
    offset: int
    nbytes: int
    copies: tuple[StoredCopy, ...]

    @property
    def saved_bytes(self) -> int:
        """Bytes the file would hold more if each reference had its own copy."""
        return self.nbytes * (len(self.copies) - 1)

    def to_json(self) -> dict:
        """The form `audit --json` and `prune --dedupe --json` print."""
        return {
            "file": self.file,
            "offset": self.offset,
            "bytes": self.nbytes,
            "copies": [copy.to_json() for copy in self.copies],
        }


def find_shared_ranges(pte: PteFile) -> tuple[SharedRange, ...]:
    """The ranges of a `.pte` that several references share, checking that no others overlap.

    References are the constant and mutable entries and the named-data, delegate
    and unreferenced segments. Two of them may only overlap by being the same
    range (same offset, same length: the same bytes); a segment that lies in the
    constant or mutable segment must be one of its entries.

    Args:
        pte: What `read_pte` returned. Not modified.

    Returns:
        One `SharedRange` per range with more than one reference, by offset.

    Raises:
        PteFormatError: Two ranges overlap without being the same range.
    """
    ranges = sorted(
        (r for r in stored_regions(pte) if r.nbytes and r.copy.space != "external"),
        key=lambda r: (r.offset, -r.nbytes),
    )
    groups: list[list[StoredRegion]] = []
    end = 0
    for item in ranges:
        if groups and (item.offset, item.nbytes) == (groups[-1][0].offset, groups[-1][0].nbytes):
            groups[-1].append(item)
            continue
        if groups and item.offset < end:
            other = groups[-1][0]
            raise PteFormatError(
                pte.path,
                f"{_where(item.copy)} ({item.nbytes} bytes) overlaps {_where(other.copy)} "
                f"({other.nbytes} bytes at {other.offset}) without being the same range",
                item.offset,
            )
        groups.append([item])
        end = max(end, item.offset + item.nbytes)
    containers = [
        (space, pte.segments[index])
        for space, index in (("constant", pte.constant_segment), ("mutable", pte.mutable_segment))
        if index is not None
    ]
    for group in groups:
        first = group[0]
        for space, segment in containers:
            inside = first.offset < segment.offset + segment.size and segment.offset < (
                first.offset + first.nbytes
            )
            if inside and not any(r.copy.space == space for r in group):
                raise PteFormatError(
                    pte.path,
                    f"{_where(first.copy)} ({first.nbytes} bytes) lies in the {space} segment "
                    f"{segment.index} but is none of its entries",
                    first.offset,
                )
    return tuple(
        SharedRange(pte.path, g[0].offset, g[0].nbytes, tuple(r.copy for r in g))
        for g in groups
        if len(g) > 1
    )


@dataclass(frozen=True)
class Alias:
    """What a segment that stores no bytes of its own reads.

    `space` is "constant" or "mutable" (entry `index` of that segment) or
    "segment" (the range of segment `index`, the first of those sharing it).
    """

    space: str
    index: int


def find_aliases(shared: Sequence[SharedRange]) -> dict[int, Alias]:
    """The segments of a `.pte` that share another reference's range, and what they read.

    Args:
        shared: `find_shared_ranges` of the file. Not modified.
    """
    aliases: dict[int, Alias] = {}
    for stored in shared:
        segments = [_file_index(c) for c in stored.copies if c.space in _SEGMENT_SPACES]
        # Mutable first: bytes that mutable data shares are mutable, whatever else reads them.
        entries = [c for s in ("mutable", "constant") for c in stored.copies if c.space == s]
        if entries:
            target = Alias(entries[0].space, _file_index(entries[0]))
            aliases.update((index, target) for index in segments)
        else:
            aliases.update((index, Alias("segment", segments[0])) for index in segments[1:])
    return aliases


def _file_index(copy: StoredCopy) -> int:
    """A copy's index, which every copy in a file has (only in memory is it ever None)."""
    assert copy.index is not None, f"{copy.space} copy without an index in a file"
    return copy.index


def _where(copy: StoredCopy) -> str:
    return f"{copy.space}[{copy.index}]"
