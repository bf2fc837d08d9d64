"""Find identical bytes that a program writes more than once.

Duplicates are not dead, so nothing here drops them: it only reports them, so
users can see, for instance, a tied embedding whose weight is written once as a
portable constant and again as XNNPACK named data.

A copy is one region the serializer writes (`exir/_serialize/_serialize.py`,
`_program.py`):

- each `Program.constant_buffer` entry but the placeholder (the constant segment);
- each `EmitterOutput.mutable_data` entry but the placeholder;
- each buffer that `NamedDataStoreOutput.pte_data` refers to (one PTE segment per
  buffer, however many keys share it);
- per tag, each distinct content among `external_constant_map[tag]` and
  `external_data[tag]`: the serializer merges both into one `NamedDataStore`,
  which keeps identical bytes once per file.

Empty entries are never copies. Contents are grouped by length, then by first
32 bytes, and only then hashed (sha256), as `NamedDataStore` does: a content
whose length no other has is never read, and weights of one shape rarely share a
prefix, so most are never hashed; a few that share both are compared byte for
byte (a chunk at a time), and only equal ones hashed, once, for the report.
Nothing is copied. `group_duplicates` is that
grouping alone, over copies wherever they are stored: `audit` feeds it ranges of
files on disk.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sized
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from executorch.exir._serialize._named_data_store import NamedDataStoreOutput
    from executorch.exir.emit import EmitterOutput

__all__ = ["StoredCopy", "DuplicateGroup", "find_duplicate_data", "group_duplicates"]


@dataclass(frozen=True)
class StoredCopy:
    """One written copy of some bytes.

    Attributes:
        space: "constant" (`constant_buffer`), "mutable" (`mutable_data`),
            "named_data" (`pte_data`, in the .pte) or "external" (a `.ptd`).
        tag: The external tag (`<tag>.ptd`) for "external", else None.
        index: The entry's index in `constant_buffer` or `mutable_data`; for
            "named_data", the buffer index (in memory) or segment index (in a
            file); for "external", None in memory (copies of one tag are merged)
            and the segment index of the `.ptd` in a file.
        names: The named-data keys and external fqns that refer to this copy.
    """

    space: str
    tag: str | None
    index: int | None
    names: tuple[str, ...]

    def to_json(self) -> dict:
        """The form of a copy in `audit --json` (duplicates, shared ranges) and `prune --json`."""
        return {
            "space": self.space,
            "tag": self.tag,
            "index": self.index,
            "names": list(self.names),
        }


@dataclass(frozen=True)
class DuplicateGroup:
    """Identical bytes written `len(copies)` times."""

    nbytes: int
    sha256: str
    copies: tuple[StoredCopy, ...]

    @property
    def duplicated_bytes(self) -> int:
        """Bytes that would be saved if the content were written once."""
        return self.nbytes * (len(self.copies) - 1)

    def to_json(self) -> dict:
        """The form of a group in `audit --json`."""
        return {
            "bytes": self.nbytes,
            "sha256": self.sha256,
            "copies": [copy.to_json() for copy in self.copies],
        }


_PREFIX = 32


# `FileBackedData` (named data a backend left on disk) and `byte_source.StoredSpan`
# read and hash themselves.
def _prefix(data) -> bytes:
    return data.prefix(_PREFIX) if hasattr(data, "prefix") else data[:_PREFIX]


def _sha256(data) -> bytes:
    if hasattr(data, "sha256"):
        return data.sha256()
    import hashlib  # here, as in `ByteSource.sha256`: only hashing pays OpenSSL's start-up

    return hashlib.sha256(data).digest()


# Bytes per compared chunk: bounds memory whatever the size of what is compared.
_CHUNK = 1 << 20


def _chunks(data) -> Iterator[bytes | memoryview]:
    if hasattr(data, "chunks"):
        yield from data.chunks(_CHUNK)
        return
    view = memoryview(data).cast("B")
    for start in range(0, len(view), _CHUNK):
        yield view[start : start + _CHUNK]


def _comparable(data) -> bool:
    """Whether `_chunks` can read it (a `FileBackedData` is only hashed, by itself)."""
    return hasattr(data, "chunks") or isinstance(data, (bytes, bytearray, memoryview))


def _same_bytes(a, b) -> bool:
    """Whether two same-length contents are equal, compared byte for byte (no hashing).

    Two spans of one file are compared where they lie (`StoredSpan.same_bytes`),
    two bytes objects with one memcmp; anything else a chunk at a time.
    """
    same = a.same_bytes(b) if hasattr(a, "same_bytes") else None
    if same is not None:
        return same
    if isinstance(a, (bytes, bytearray)) and isinstance(b, (bytes, bytearray)):
        return a == b
    # bytes() of each chunk: comparing two memoryviews goes byte by byte in Python's C code.
    return all(bytes(x) == bytes(y) for x, y in zip(_chunks(a), _chunks(b), strict=True))


# Up to this many look-alikes are compared byte for byte, each with one of every group found
# so far; more are hashed, so the cost never grows with their number.
_COMPARED = 4


def _by_content(candidates: list, digests: bool = True) -> list[tuple[bytes, list]]:
    """Splits same-length, same-prefix candidates into groups of equal content, with a digest.

    A few are compared byte for byte (a memcmp, several times faster than
    sha256), and one of each group of equal ones hashed, for the report; more
    are grouped by digest, each hashed once.
    """
    if len(candidates) <= _COMPARED and all(_comparable(c[2]) for c in candidates):
        groups: list[list] = []
        for candidate in candidates:
            same = next((g for g in groups if _same_bytes(g[0][2], candidate[2])), None)
            if same is None:
                groups.append([candidate])
            else:
                same.append(candidate)
        return [
            (_sha256(group[0][2]) if digests else b"", group) for group in groups if len(group) > 1
        ]
    by_digest: dict[bytes, list] = {}
    for candidate in candidates:
        by_digest.setdefault(_sha256(candidate[2]), []).append(candidate)
    return list(by_digest.items())


def _written_copies(
    emitter_output: EmitterOutput, named_data: NamedDataStoreOutput | None
) -> Iterator[tuple[StoredCopy, Sized]]:
    """Every copy with its bytes, in the order the serializer writes them."""
    for index, buffer in enumerate(emitter_output.program.constant_buffer[1:], start=1):
        yield StoredCopy("constant", None, index, ()), buffer.storage
    for index, buffer in enumerate((emitter_output.mutable_data or [])[1:], start=1):
        yield StoredCopy("mutable", None, index, ()), buffer.storage
    if named_data is not None:
        keys_of_buffer: dict[int, list[str]] = {}
        for key, entry in named_data.pte_data.items():
            keys_of_buffer.setdefault(entry.buffer_index, []).append(key)
        for buffer_index, keys in keys_of_buffer.items():
            yield (
                StoredCopy("named_data", None, buffer_index, tuple(keys)),
                named_data.buffers[buffer_index],
            )
    # Per-tag copies are merged by content later, as the serializer's store does.
    for tag, fqn_to_index in (emitter_output.external_constant_map or {}).items():
        for fqn, index in fqn_to_index.items():
            yield (
                StoredCopy("external", tag, None, (fqn,)),
                emitter_output.external_constant_buffer[index],
            )
    if named_data is not None:
        for tag, entries in named_data.external_data.items():
            for key, entry in entries.items():
                yield (
                    StoredCopy("external", tag, None, (key,)),
                    named_data.buffers[entry.buffer_index],
                )


def _merge_same_file(copies: list[StoredCopy]) -> list[StoredCopy]:
    """Collapses identical-content copies of one `.ptd` segment into one copy with all their names.

    In memory a tag's copies have no index (the serializer merges them into one
    segment); in a file, distinct segments stay distinct copies.
    """
    merged: list[StoredCopy] = []
    position: dict[tuple[str | None, int | None], int] = {}
    for copy in copies:
        if copy.space != "external":
            merged.append(copy)
            continue
        at = position.get((copy.tag, copy.index))
        if at is None:
            position[(copy.tag, copy.index)] = len(merged)
            merged.append(copy)
        else:
            first = merged[at]
            merged[at] = StoredCopy("external", copy.tag, copy.index, first.names + copy.names)
    return merged


def group_duplicates(
    copies: Iterable[tuple[StoredCopy, Sized]], *, digests: bool = True
) -> tuple[DuplicateGroup, ...]:
    """Groups copies by content: the storage-neutral core of `find_duplicate_data`.

    The file side (`audit`, `share`, `merge`) calls it on the copies files store.
    Without `digests`, a group found by comparing bytes has no sha256 (""): what
    `merge` asks, which only stores each content once.

    Args:
        copies: Each copy, in the order it is written, with its data: a bytes-like
            object, or anything with `len()`, `prefix(n)` and `sha256()` (read
            only for copies whose length another copy shares; `same_bytes(other)`
            or `chunks(n)`, if it has them, to compare two). Not modified.

    Returns:
        One group per duplicated content, the most duplicated bytes first (ties in
        the order the copies were given).
    """
    by_length: dict[int, list[tuple[int, StoredCopy, Sized]]] = {}
    for written, (copy, data) in enumerate(copies):
        if len(data):
            by_length.setdefault(len(data), []).append((written, copy, data))

    found: list[tuple[int, DuplicateGroup]] = []
    for nbytes, same_length in by_length.items():
        if len(same_length) < 2:
            continue
        by_prefix: dict[bytes, list[tuple[int, StoredCopy, object]]] = {}
        for candidate in same_length:
            by_prefix.setdefault(_prefix(candidate[2]), []).append(candidate)
        for candidates in by_prefix.values():
            if len(candidates) < 2:
                continue
            for digest, members in _by_content(candidates, digests):
                merged = _merge_same_file([copy for _, copy, _ in members])
                if len(merged) > 1:
                    group = DuplicateGroup(nbytes, digest.hex(), tuple(merged))
                    found.append((members[0][0], group))
    found.sort(key=lambda item: (-item[1].duplicated_bytes, item[0]))
    return tuple(group for _, group in found)


def find_duplicate_data(
    emitter_output: EmitterOutput, named_data: NamedDataStoreOutput | None
) -> tuple[DuplicateGroup, ...]:
    """Finds contents written more than once, across the .pte and every .ptd.

    Args:
        emitter_output: The output of `emit_program`, as it will be serialized. Not modified.
        named_data: The named data that will be serialized with it. Not modified.

    Returns:
        One group per duplicated content, the most duplicated bytes first (ties in
        the order the serializer writes them).
    """
    return group_duplicates(_written_copies(emitter_output, named_data))
