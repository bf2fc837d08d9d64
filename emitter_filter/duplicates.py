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

Empty entries are never copies. Contents are grouped by length and first 32
bytes, and only then hashed (sha256), as `NamedDataStore` does: weights of one
shape rarely share a prefix, so most are never hashed. Nothing is copied.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from executorch.exir._serialize._named_data_store import NamedDataStoreOutput
    from executorch.exir.emit import EmitterOutput

__all__ = ["StoredCopy", "DuplicateGroup", "find_duplicate_data"]


@dataclass(frozen=True)
class StoredCopy:
    """One written copy of some bytes.

    Attributes:
        space: "constant" (`constant_buffer`), "mutable" (`mutable_data`),
            "named_data" (`pte_data`, in the .pte) or "external" (a `.ptd`).
        tag: The external tag (`<tag>.ptd`) for "external", else None.
        index: The entry's index in `constant_buffer` or `mutable_data`, or the
            buffer index of "named_data"; None for "external".
        names: The named-data keys and external fqns that refer to this copy.
    """

    space: str
    tag: str | None
    index: int | None
    names: tuple[str, ...]


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


_PREFIX = 32


# `FileBackedData` (named data a backend left on disk) reads and hashes itself.
def _prefix(data) -> bytes:
    return data.prefix(_PREFIX) if hasattr(data, "prefix") else data[:_PREFIX]


def _sha256(data) -> bytes:
    return data.sha256() if hasattr(data, "sha256") else hashlib.sha256(data).digest()


def _written_copies(
    emitter_output: EmitterOutput, named_data: NamedDataStoreOutput | None
) -> Iterator[tuple[StoredCopy, object]]:
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
    """Collapses identical-content copies in one `.ptd` into one copy with all their names."""
    merged: list[StoredCopy] = []
    position: dict[str, int] = {}
    for copy in copies:
        if copy.space != "external":
            merged.append(copy)
            continue
        at = position.get(copy.tag)
        if at is None:
            position[copy.tag] = len(merged)
            merged.append(copy)
        else:
            first = merged[at]
            merged[at] = StoredCopy("external", copy.tag, None, first.names + copy.names)
    return merged


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
    by_fingerprint: dict[tuple[int, bytes], list[tuple[int, StoredCopy, object]]] = {}
    for written, (copy, data) in enumerate(_written_copies(emitter_output, named_data)):
        if len(data):
            fingerprint = (len(data), _prefix(data))
            by_fingerprint.setdefault(fingerprint, []).append((written, copy, data))

    found: list[tuple[int, DuplicateGroup]] = []
    for (nbytes, _), candidates in by_fingerprint.items():
        if len(candidates) < 2:
            continue
        by_digest: dict[bytes, list[tuple[int, StoredCopy]]] = {}
        for written, copy, data in candidates:
            by_digest.setdefault(_sha256(data), []).append((written, copy))
        for digest, members in by_digest.items():
            copies = _merge_same_file([copy for _, copy in members])
            if len(copies) > 1:
                found.append((members[0][0], DuplicateGroup(nbytes, digest.hex(), tuple(copies))))
    found.sort(key=lambda item: (-item[1].duplicated_bytes, item[0]))
    return tuple(group for _, group in found)
