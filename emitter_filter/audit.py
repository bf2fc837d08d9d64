"""What a `.pte` file (and its `.ptd` files) holds, and which of it no program can reach.

`audit_file` reads only headers and flatbuffers (`pte_file.read_pte`), runs the
same reachability as the in-process filter (`reachability.find_live`), and
reports bytes per space:

- `constant`, `mutable`, `external`: tensor data; an entry is dead when no live
  value of any plan refers to it. These are exactly the entries that
  `prune_constants=True` drops.
- `named_data`: blobs delegates look up by key. Never counted dead: a key no
  delegate is known to use (only XNNPACK blobs can be read) is listed in
  `unattributed_named_data` instead, since an opaque delegate may still use it.
- `delegate`: delegate blobs; dead only if no plan's delegate refers to one.
- `segments`: segments no field of the program refers to; all dead.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from emitter_filter.pte_file import PteFile, read_pte
from emitter_filter.reachability import DataRef, DataSpace, Liveness, find_live

__all__ = [
    "SPACES",
    "JSON_SCHEMA",
    "SpaceBytes",
    "DeadEntry",
    "UnattributedNamedData",
    "AuditReport",
    "audit_file",
    "audit_pte",
]

logger = logging.getLogger(__name__)

#: The spaces of `AuditReport.spaces`, in report order.
SPACES = ("constant", "mutable", "external", "named_data", "delegate", "segments")

#: The value of the "schema" key of `AuditReport.to_json()`; bumped on any incompatible change.
JSON_SCHEMA = "emitter-filter-audit/1"


@dataclass(frozen=True)
class SpaceBytes:
    """Bytes of one space: `total == live + dead`."""

    total: int
    live: int
    dead: int


@dataclass(frozen=True)
class DeadEntry:
    """One entry no program can reach.

    `plan`, `value_index`, `dtype` and `shape` describe the first value that
    refers to it (None when none does); `name` is its `fully_qualified_name`
    where the file has one. Indices are the file's own.
    """

    space: str
    index: int
    nbytes: int
    plan: str | None
    value_index: int | None
    dtype: str | None
    shape: tuple[int, ...] | None
    name: str | None


@dataclass(frozen=True)
class UnattributedNamedData:
    """A named blob no readable delegate uses: kept, reported, never counted dead."""

    key: str
    nbytes: int
    file: str


@dataclass(frozen=True)
class AuditReport:
    """The result of `audit_file`.

    Attributes:
        path: The `.pte` audited ("<bytes>" for in-memory data).
        files: Each file read (the `.pte`, then the `.ptd` files) and its size.
        file_bytes: The size of those files together.
        constant_bytes: Bytes of data over all spaces.
        dead_bytes: Of those, the bytes no program can reach.
        dead_values: Values no root of their plan reaches.
        spaces: Bytes per space, keyed by the names in `SPACES`.
        dead: Every dead entry, by space then index.
        unattributed_named_data: Named blobs no readable delegate uses.
    """

    path: str
    files: tuple[tuple[str, int], ...]
    file_bytes: int
    constant_bytes: int
    dead_bytes: int
    dead_values: int
    spaces: Mapping[str, SpaceBytes]
    dead: tuple[DeadEntry, ...]
    unattributed_named_data: tuple[UnattributedNamedData, ...]

    def largest_dead(self, count: int) -> tuple[DeadEntry, ...]:
        """The `count` largest dead entries, largest first."""
        return tuple(sorted(self.dead, key=lambda d: (-d.nbytes, d.space, d.index))[:count])

    def to_json(self) -> dict:
        """The stable JSON form; README.md documents it, `JSON_SCHEMA` versions it."""
        return {
            "schema": JSON_SCHEMA,
            "path": self.path,
            "files": [{"path": path, "bytes": size} for path, size in self.files],
            "file_bytes": self.file_bytes,
            "constant_bytes": self.constant_bytes,
            "dead_bytes": self.dead_bytes,
            "dead_values": self.dead_values,
            "spaces": {
                name: {"total": s.total, "live": s.live, "dead": s.dead}
                for name, s in self.spaces.items()
            },
            "dead": [
                {
                    "space": d.space,
                    "index": d.index,
                    "bytes": d.nbytes,
                    "plan": d.plan,
                    "value_index": d.value_index,
                    "dtype": d.dtype,
                    "shape": None if d.shape is None else list(d.shape),
                    "name": d.name,
                }
                for d in self.dead
            ],
            "unattributed_named_data": [
                {"key": u.key, "bytes": u.nbytes, "file": u.file}
                for u in self.unattributed_named_data
            ],
        }


def _dead_tensor_data(pte: PteFile, liveness: Liveness) -> list[DeadEntry]:
    """Dead entries of the three tensor data spaces, named after the first value using each."""
    first_user = {}
    for tensor in pte.tensors:
        first_user.setdefault(tensor.ref, tensor)
    dead = []
    for space in DataSpace:
        for index, entry in sorted(pte.entries[space].items()):
            if index in liveness.live_data[space] or (space.has_placeholder and index == 0):
                continue
            user = first_user.get(DataRef(space, index))
            dead.append(
                DeadEntry(
                    space=space.value,
                    index=index,
                    nbytes=entry.nbytes,
                    plan=user.plan if user else None,
                    value_index=user.value_index if user else None,
                    dtype=user.dtype if user else None,
                    shape=user.shape if user else None,
                    name=user.name if user else None,
                )
            )
    return dead


def _bare(space: str, index: int, nbytes: int) -> DeadEntry:
    return DeadEntry(space, index, nbytes, None, None, None, None, None)


def audit_pte(pte: PteFile) -> AuditReport:
    """Audits what `read_pte` returned; `audit_file` is the usual entry point."""
    liveness = find_live(pte.plans)
    dead = _dead_tensor_data(pte, liveness)
    dead += [
        _bare("delegate", d.index, d.nbytes) for d in pte.delegates if not d.backend_ids
    ]
    dead += [_bare("segments", s.index, s.size) for s in pte.unreferenced_segments]

    totals = {
        space.value: sum(e.nbytes for e in pte.entries[space].values()) for space in DataSpace
    }
    totals["named_data"] = sum(e.nbytes for e in pte.named_data)
    totals["delegate"] = sum(d.nbytes for d in pte.delegates)
    totals["segments"] = sum(s.size for s in pte.unreferenced_segments)
    dead_per_space = dict.fromkeys(SPACES, 0)
    for entry in dead:
        dead_per_space[entry.space] += entry.nbytes
    spaces = {
        name: SpaceBytes(totals[name], totals[name] - dead_per_space[name], dead_per_space[name])
        for name in SPACES
    }

    used_keys: set[str] = set()
    for delegate in pte.delegates:
        used_keys |= delegate.named_keys or frozenset()
    unattributed = tuple(
        UnattributedNamedData(e.key, e.nbytes, e.file)
        for e in pte.named_data
        if e.key not in used_keys
    )
    files = ((pte.path, pte.file_bytes), *((p.path, p.file_bytes) for p in pte.ptd_files))
    report = AuditReport(
        path=pte.path,
        files=files,
        file_bytes=sum(size for _, size in files),
        constant_bytes=sum(totals.values()),
        dead_bytes=sum(dead_per_space.values()),
        dead_values=liveness.dead_value_count(pte.plans),
        spaces=spaces,
        dead=tuple(sorted(dead, key=lambda d: (SPACES.index(d.space), d.index))),
        unattributed_named_data=unattributed,
    )
    logger.debug(
        "%s: %d of %d constant bytes dead", pte.path, report.dead_bytes, report.constant_bytes
    )
    return report


def audit_file(
    path: str | os.PathLike | bytes, ptd_paths: Sequence[str | os.PathLike] = ()
) -> AuditReport:
    """Reports the bytes of a `.pte` file (and its `.ptd` files) that no program can reach.

    Reads headers and flatbuffers only, never the constant data itself.

    Args:
        path: The `.pte` file, or its bytes. Not modified.
        ptd_paths: The `.ptd` files with its external constants. Not modified.
            Without them, external entries are sized from the tensors' shapes.

    Raises:
        PteFormatError: A file is malformed or the `.ptd` does not match the `.pte`.
        ProgramFormatError: The program refers to something that does not exist.
    """
    return audit_pte(read_pte(path, ptd_paths))
