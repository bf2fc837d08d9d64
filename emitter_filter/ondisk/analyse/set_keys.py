"""The keys of a set of programs: how each program resolves a named-data key, which keys hold
other bytes for other programs, and the key a moved constant gets (`constant_key`).

A program resolves a key in its `.ptd` files, then its `.pte` (as the runtime does):
one key with two contents for one program is refused. One key with other bytes for
other programs is *own* to each program that reads it (`share_find` module docstring).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from emitter_filter.errors import PteFormatError
from emitter_filter.ondisk.analyse.dead_bytes import keep_ptd_key
from emitter_filter.ondisk.analyse.stored_blobs import StoredBlob, TensorLayoutKey
from emitter_filter.program.scalar_types import SCALAR_TYPE_NAMES

if TYPE_CHECKING:
    from emitter_filter.ondisk.analyse.analysis import FileAnalysis
    from emitter_filter.ondisk.read.read_pte import PteProgram

__all__ = ["constant_key", "find_ptd_keys_read", "read_by_some", "resolve_keys", "check_new_keys"]


def constant_key(sha256: str, layout: TensorLayoutKey) -> str:
    """The key of a moved constant: its content and tensor layout, readable.

    The prefix keeps it apart from XNNPACK's keys (a bare sha256 of the bytes).
    """
    dtype = SCALAR_TYPE_NAMES.get(layout.scalar_type, str(layout.scalar_type))
    key = f"shared.{sha256[:40]}.{dtype}[{','.join(map(str, layout.sizes))}]"
    if layout.dim_order != tuple(range(len(layout.sizes))):
        key += f".dim_order[{','.join(map(str, layout.dim_order))}]"
    return key


def find_ptd_keys_read(
    reads: Sequence[PteProgram], analyses: Sequence[FileAnalysis]
) -> list[frozenset[str]]:
    """Per program, the keys of its `.ptd` files it reads (`dead_bytes.keep_ptd_key`)."""
    read_keys = []
    for read, analysis in zip(reads, analyses, strict=True):
        keep = keep_ptd_key(read.pte, read.program, analysis.liveness, frozenset(analysis.use.dead))
        read_keys.append(
            frozenset(key for ptd in read.pte.ptd_files for key in ptd.named_data if keep(key))
        )
    return read_keys


def read_by_some(
    blob: StoredBlob, reads: Sequence[PteProgram], ptd_keys_read: Sequence[frozenset[str]]
) -> bool:
    """Whether a program that loads with the blob's `.ptd` reads one of its keys."""
    return any(
        ptd_keys_read[number].intersection(blob.keys)
        for number, read in enumerate(reads)
        if blob.file in {ptd.path for ptd in read.pte.ptd_files}
    )


def resolve_keys(
    reads: Sequence[PteProgram],
    blobs: Sequence[StoredBlob],
    content_of: Mapping[StoredBlob, int],
    ptd_keys_read: Sequence[frozenset[str]],
) -> tuple[frozenset[str], dict[int, frozenset[str]]]:
    """The keys with other bytes for other programs, and per program those of them its
    `.ptd` files hold and it reads (what it keeps in its `.pte`).

    A program resolves a key in its `.ptd` files, then its `.pte` (as the runtime
    does): one key with two contents there is refused, as is a key with other bytes
    elsewhere that a program holding it does not read (share would have to drop it).
    """
    holders: dict[str, list[StoredBlob]] = {}
    for blob in blobs:
        for key in blob.keys:
            holders.setdefault(key, []).append(blob)
    content = {blob: content_of.get(blob, blob) for blob in blobs}
    resolved: list[dict[str, StoredBlob]] = []
    for number, read in enumerate(reads):
        files = {ptd.path for ptd in read.pte.ptd_files}
        own: dict[str, StoredBlob] = {}
        for key, found in holders.items():
            for blob in found:
                if blob.file not in files and blob.program != number:
                    continue
                other = own.setdefault(key, blob)
                if content[other] != content[blob]:
                    raise PteFormatError(
                        blob.file,
                        f"named data {key!r} ({blob.nbytes:,} B) holds other bytes than "
                        f"{key!r} in {other.file} ({other.nbytes:,} B), and "
                        f"{read.pte.path} loads with both: share refuses the set",
                    )
        resolved.append(own)
    clashing = frozenset(
        key for key in holders if len({content[own[key]] for own in resolved if key in own}) > 1
    )
    own_keys: dict[int, frozenset[str]] = {}
    for number, (read, own) in enumerate(zip(reads, resolved, strict=True)):
        mine = set()
        for key in sorted(clashing.intersection(own)):
            blob = own[key]
            if blob.kind != "external":
                continue  # In its `.pte` already, where it stays.
            if key not in ptd_keys_read[number]:
                raise PteFormatError(
                    blob.file,
                    f"{key!r} holds other bytes for another program of the set, and "
                    f"{read.pte.path} does not read it: prune it first (one shared .ptd "
                    "cannot hold both)",
                )
            mine.add(key)
        if mine:
            own_keys[number] = frozenset(mine)
    return clashing, own_keys


def check_new_keys(blobs, content_of, shared, constant_keys) -> None:
    """Refuses a moved constant's key that an input already uses for other bytes."""
    existing = {key: blob for blob in blobs for key in blob.keys}
    for content in shared:
        for blob in content.copies:
            for key in constant_keys.get((blob.program, blob.index), {}).values():
                other = existing.get(key)
                if other is not None and content_of.get(other) != content_of[blob]:
                    raise PteFormatError(
                        other.file,
                        f"key {key!r} holds other bytes than the constant {blob.file} "
                        f"entry {blob.index} it names: share refuses the set",
                    )
