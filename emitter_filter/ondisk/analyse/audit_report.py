"""What a `.pte` file (and its `.ptd` files) holds, and which of it no program can reach.

`audit_pte` takes a file `read_pte.read_pte` has read (`audit.audit_file` reads it
first; `explain` audits what it has read itself), runs the
same reachability as the in-process filter (`reachability.find_live`) and the
same named-data rules (`dead_bytes.classify_file_named_data`), and reports bytes
per space:

- `constant`, `mutable`, `external`: tensor data; an entry is dead when no live
  value of any plan refers to it.
- `named_data`: blobs delegates look up by key. A key is dead when no delegate
  names it and every delegate's keys can be read (`delegates`); when some delegate is
  opaque, or some delegate names a key held nowhere, such keys are kept and listed
  in `kept_unprovable_named_data` instead (`named_keys`).
  A segment counts dead when every key that refers to it is dead.

Each stored byte counts once (`dead_bytes.ByteCount`): a byte any live value, key
or delegate reads is live, whatever dead references share it (a dead value of
another shape, a dead key of another layout on the same `.ptd` segment); dead
bytes are exactly the bytes pruning frees.
- `delegate`: delegate blobs; dead only if no plan's delegate refers to one.
- `segments`: segments no field of the program refers to; all dead.

The first three and `named_data` are exactly what `prune_constants=True` and
`emitter-filter prune` drop. Identical contents stored more than once are listed
in `duplicates` (not dead): only entries whose size another entry shares are
read, and hashed only when their first bytes match too. A range several entries
share (what `dedupe_constants` writes) is stored once: it is listed in `shared`,
not in `duplicates`; ranges that overlap without being the same range make the
file malformed (`stored_ranges.find_shared_ranges`).

Names (`analysis.analyse_file`): a dead entry is named by what the file carries (an
external constant's FQN, a named-data key) and, given the model's state
(`read.state_file.read_state_file` of a `.pt2` or ETRecord), after every state
tensor with a dead value's shape and exactly the entry's bytes: only dead
entries are read for that. `keep_constants` patterns make the values of a
matching constant roots, as in process; a constant-segment value is known only
by content, so every dead value of that shape referring to a matching entry is kept.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from emitter_filter.ondisk.analyse.analysis import FileAnalysis, analyse_file
from emitter_filter.ondisk.analyse.dead_bytes import SPACES
from emitter_filter.ondisk.analyse.stored_ranges import SharedRange, stored_regions
from emitter_filter.ondisk.read.byte_source import ByteSource, StoredSpan
from emitter_filter.ondisk.read.file_model import PteFile
from emitter_filter.program.duplicates import DuplicateGroup, StoredCopy, group_duplicates
from emitter_filter.program.names import DroppedConstant
from emitter_filter.program.state_names import StateFile

__all__ = [
    "SPACES",
    "JSON_SCHEMA",
    "SpaceBytes",
    "UnprovableNamedData",
    "AuditReport",
    "audit_pte",
]

logger = logging.getLogger(__name__)

# The spaces whose regions hold data a program reads (duplicates are looked for among them).
_DATA_SPACES = ("constant", "mutable", "named_data", "external")

#: The value of the "schema" key of `AuditReport.to_json()`; bumped on any incompatible change.
JSON_SCHEMA = "emitter-filter-audit/2"


@dataclass(frozen=True)
class SpaceBytes:
    """Bytes of one space: `total == live + dead`."""

    total: int
    live: int
    dead: int


@dataclass(frozen=True)
class UnprovableNamedData:
    """A named blob no readable delegate uses, kept because an opaque delegate may read it."""

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
        dead: Every dead entry, by space then index. Named data is listed per key
            (`index` its position in its file's `named_data`, `name` the key); a
            segment that several dead keys share counts on the first only.
        kept_unprovable_named_data: Named blobs no readable delegate uses, kept
            (not dead) because an opaque delegate may read them.
        duplicates: Contents stored more than once, over every data space and
            file, the most duplicated bytes first. Not dead: never dropped.
        shared: Ranges of the `.pte` that several entries share (stored once),
            by offset.
        analysis: The analysis the figures come from (`explain` attributes its
            bytes from it rather than working them out again).
    """

    path: str
    files: tuple[tuple[str, int], ...]
    file_bytes: int
    constant_bytes: int
    dead_bytes: int
    dead_values: int
    spaces: Mapping[str, SpaceBytes]
    dead: tuple[DroppedConstant, ...]
    kept_unprovable_named_data: tuple[UnprovableNamedData, ...]
    duplicates: tuple[DuplicateGroup, ...]
    shared: tuple[SharedRange, ...] = ()
    analysis: FileAnalysis | None = field(default=None, repr=False, compare=False)

    @property
    def shared_bytes(self) -> int:
        """Bytes saved by sharing: each shared range's size times its extra references."""
        return sum(shared.saved_bytes for shared in self.shared)

    @property
    def duplicated_bytes(self) -> int:
        """Bytes stored more than once: each content's size times its extra copies."""
        return sum(group.duplicated_bytes for group in self.duplicates)

    def largest_dead(self, count: int) -> tuple[DroppedConstant, ...]:
        """The `count` largest dead entries, largest first."""
        return tuple(sorted(self.dead, key=lambda d: (-d.nbytes, d.space, d.index))[:count])

    def to_json(self) -> dict:
        """The stable JSON form; docs/files.md documents it, `JSON_SCHEMA` versions it."""
        return {
            "schema": JSON_SCHEMA,
            "path": self.path,
            "files": [{"path": path, "bytes": size} for path, size in self.files],
            "file_bytes": self.file_bytes,
            "constant_bytes": self.constant_bytes,
            "dead_bytes": self.dead_bytes,
            "dead_values": self.dead_values,
            "duplicated_bytes": self.duplicated_bytes,
            "spaces": {
                name: {"total": s.total, "live": s.live, "dead": s.dead}
                for name, s in self.spaces.items()
            },
            "dead": [d.to_json() for d in self.dead],
            "kept_unprovable_named_data": [
                {"key": u.key, "bytes": u.nbytes, "file": u.file}
                for u in self.kept_unprovable_named_data
            ],
            "duplicates": [group.to_json() for group in self.duplicates],
            "shared_bytes": self.shared_bytes,
            "shared": [shared.to_json() for shared in self.shared],
            "data": [{"program": self.path, "data": [path for path, _ in self.files[1:]]}],
        }


def _duplicate_candidates(
    pte: PteFile, sources: Mapping[str, ByteSource]
) -> Iterator[tuple[StoredCopy, StoredSpan]]:
    """The data regions (`stored_regions` less delegate blobs and unreferenced segments),
    each range once: shared bytes are stored once, so they are no duplicates."""
    seen: set[tuple[str, int, int]] = set()
    for region in stored_regions(pte):
        where = (region.file, region.offset, region.nbytes)
        if region.copy.space in _DATA_SPACES and where not in seen:
            seen.add(where)
            yield region.copy, StoredSpan(sources[region.file], region.offset, region.nbytes)


def audit_pte(
    pte: PteFile,
    sources: Mapping[str, ByteSource],
    keep_constants: Sequence[str] = (),
    state: StateFile | None = None,
) -> AuditReport:
    """Audits what `read_pte` returned; `audit.audit_file` is the usual entry point.

    Args:
        pte: Not modified.
        sources: The files `pte` was read from, open, by the names it gives them;
            read only for entries whose size another entry shares, and (with
            `state`) dead entries.
        keep_constants: See `audit.audit_file`.
        state: See `audit.audit_file`'s `names`.
    """
    analysis = analyse_file(pte, sources, keep_constants, state)
    pte, liveness, use, dead = analysis.pte, analysis.liveness, analysis.use, analysis.dead

    dead_per_space = dict.fromkeys(SPACES, 0)
    for entry in dead:
        dead_per_space[entry.space] += entry.nbytes
    # Each stored byte once (`dead_bytes.ByteCount`): live on the first space that reads it.
    spaces = {
        name: SpaceBytes(
            analysis.count.live[name] + dead_per_space[name],
            analysis.count.live[name],
            dead_per_space[name],
        )
        for name in SPACES
    }
    unprovable = frozenset(use.kept_unprovable)
    files = ((pte.path, pte.file_bytes), *((p.path, p.file_bytes) for p in pte.ptd_files))
    report = AuditReport(
        path=pte.path,
        files=files,
        file_bytes=sum(size for _, size in files),
        constant_bytes=sum(space.total for space in spaces.values()),
        dead_bytes=sum(dead_per_space.values()),
        dead_values=liveness.dead_value_count(pte.plans),
        spaces=spaces,
        dead=tuple(dead),
        kept_unprovable_named_data=tuple(
            UnprovableNamedData(e.key, e.nbytes, e.file)
            for e in pte.named_data
            if e.key in unprovable
        ),
        duplicates=group_duplicates(_duplicate_candidates(pte, sources)),
        shared=analysis.shared,
        analysis=analysis,
    )
    logger.debug(
        "%s: %d of %d constant bytes dead, %d duplicated",
        pte.path,
        report.dead_bytes,
        report.constant_bytes,
        report.duplicated_bytes,
    )
    return report
