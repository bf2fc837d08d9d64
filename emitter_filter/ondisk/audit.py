"""What a `.pte` file (and its `.ptd` files) holds, and which of it no program can reach.

`audit_file` reads only headers and flatbuffers (`read_pte.read_pte`), runs the
same reachability as the in-process filter (`reachability.find_live`) and the
same named-data rules (`analysis.classify_file_named_data`), and reports bytes
per space:

- `constant`, `mutable`, `external`: tensor data; an entry is dead when no live
  value of any plan refers to it.
- `named_data`: blobs delegates look up by key. A key is dead when no delegate
  names it and every delegate's keys can be read (XNNPACK); when some delegate is
  opaque, such keys are kept and listed in `kept_unprovable_named_data` instead.
  A segment counts dead when every key that refers to it is dead.
- `delegate`: delegate blobs; dead only if no plan's delegate refers to one.
- `segments`: segments no field of the program refers to; all dead.

The first three and `named_data` are exactly what `prune_constants=True` and
`emitter-filter prune` drop. Identical contents stored more than once are listed
in `duplicates` (not dead): only entries whose size another entry shares are
read, and hashed only when their first bytes match too. A range several entries
share (what `dedupe_constants` writes) is stored once: it is listed in `shared`,
not in `duplicates`; ranges that overlap without being the same range make the
file malformed (`dedupe.find_shared_ranges`).

Names (`analyse_file`): a dead entry is named by what the file carries (an
external constant's FQN, a named-data key) and, given the model's state
(`state_names.read_state_file` of a `.pt2` or ETRecord), after every state
tensor with a dead value's shape and exactly the entry's bytes: only dead
entries are read for that. `keep_constants` patterns make the values of a
matching constant roots, as in process; a constant-segment value is known only
by content, so every dead value of that shape referring to a matching entry is kept.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from emitter_filter.ondisk.dedupe import SharedRange, find_shared_ranges
from emitter_filter.duplicates import DuplicateGroup, StoredCopy, group_duplicates
from emitter_filter.named_keys import NamedDataUse
from emitter_filter.ondisk.analysis import classify_file_named_data
from emitter_filter.ondisk.byte_source import ByteSource, StoredSpan
from emitter_filter.ondisk.file_model import PteFile, Segment, TensorEntry
from emitter_filter.ondisk.read_pte import read_pte
from emitter_filter.reachability import DataRef, DataSpace, KeepList, Liveness, find_live
from emitter_filter.names import ConstantName, DroppedConstant

from emitter_filter.state_names import StateFile, state_file

__all__ = [
    "SPACES",
    "JSON_SCHEMA",
    "SpaceBytes",
    "UnprovableNamedData",
    "AuditReport",
    "FileAnalysis",
    "audit_file",
    "audit_pte",
    "analyse_file",
    "find_dead_entries",
]

logger = logging.getLogger(__name__)

#: The spaces of `AuditReport.spaces`, in report order.
SPACES = ("constant", "mutable", "external", "named_data", "delegate", "segments")

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
        """The stable JSON form; README.md documents it, `JSON_SCHEMA` versions it."""
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
                    "names": names_json(d),
                    "readable_by_name": d.readable_by_name,
                }
                for d in self.dead
            ],
            "kept_unprovable_named_data": [
                {"key": u.key, "bytes": u.nbytes, "file": u.file}
                for u in self.kept_unprovable_named_data
            ],
            "duplicates": [
                {
                    "bytes": group.nbytes,
                    "sha256": group.sha256,
                    "copies": [
                        {"space": c.space, "tag": c.tag, "index": c.index, "names": list(c.names)}
                        for c in group.copies
                    ],
                }
                for group in self.duplicates
            ],
            "shared_bytes": self.shared_bytes,
            "shared": [shared.to_json() for shared in self.shared],
        }


def names_json(entry: DroppedConstant) -> list[dict]:
    """`entry.names` in the JSON form of `audit --json` and `prune --json`."""
    return [{"name": n.name, "kind": n.kind, "plan": n.plan} for n in entry.names]


def _dead_tensor_data(pte: PteFile, liveness: Liveness) -> list[DroppedConstant]:
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
                DroppedConstant(
                    space=space.value,
                    index=index,
                    nbytes=entry.nbytes,
                    plan=user.plan if user else None,
                    value_index=user.value_index if user else None,
                    dtype=user.dtype if user else None,
                    shape=user.shape if user else None,
                    name=user.name if user else None,
                    names=(
                        (ConstantName(user.name, None, user.plan),) if user and user.name else ()
                    ),
                )
            )
    return dead


def _bare(space: str, index: int, nbytes: int, name: str | None = None) -> DroppedConstant:
    names = () if name is None else (ConstantName(name, "named_data", None),)
    return DroppedConstant(space, index, nbytes, None, None, None, None, name, names)


def _dead_named_data(pte: PteFile, use: NamedDataUse) -> list[DroppedConstant]:
    """One entry per dead key, `index` its position in its own file's named data.

    A segment's bytes count once, on its first dead key, and only when no live
    key shares the segment: the bytes `prune` really drops.
    """
    dead = frozenset(use.dead)
    keys_of_segment: dict[tuple[str, int], list[str]] = {}
    position: dict[tuple[str, str], int] = {}
    for entry in pte.named_data:
        keys_of_segment.setdefault((entry.file, entry.segment_index), []).append(entry.key)
    in_pte = (entry.key for entry in pte.named_data if entry.file == pte.path)
    position.update(((pte.path, key), i) for i, key in enumerate(in_pte))
    for ptd in pte.ptd_files:
        # Among all the .ptd's keys, external constants included.
        position.update(((ptd.path, key), i) for i, key in enumerate(ptd.named_data))
    counted: set[tuple[str, int]] = set()
    entries = []
    for entry in pte.named_data:
        if entry.key not in dead:
            continue
        segment = (entry.file, entry.segment_index)
        freed = segment not in counted and all(k in dead for k in keys_of_segment[segment])
        counted.add(segment)
        nbytes = entry.nbytes if freed else 0
        entries.append(_bare("named_data", position[(entry.file, entry.key)], nbytes, entry.key))
    return entries


def find_dead_entries(pte: PteFile, liveness: Liveness, use: NamedDataUse) -> list[DroppedConstant]:
    """Every entry of a file no program can reach, by space then index; shared with `prune`.

    Args:
        pte: What `read_pte` returned. Not modified.
        liveness: `find_live(pte.plans)`.
        use: `classify_file_named_data(pte)`.
    """
    dead = _dead_tensor_data(pte, liveness)
    dead += _dead_named_data(pte, use)
    dead += [_bare("delegate", d.index, d.nbytes) for d in pte.delegates if not d.users]
    dead += [_bare("segments", s.index, s.size) for s in pte.unreferenced_segments]
    return sorted(dead, key=lambda d: (SPACES.index(d.space), d.index))


@dataclass(frozen=True)
class FileAnalysis:
    """What `analyse_file` found; shared by `audit` and `prune`.

    Attributes:
        pte: The file as read, with the values of kept constants added to its plans' roots.
        liveness: `find_live(pte.plans)`.
        use: `classify_file_named_data(pte)`.
        dead: `find_dead_entries`, each named as the module docstring says.
    """

    pte: PteFile
    liveness: Liveness
    use: NamedDataUse
    dead: tuple[DroppedConstant, ...]


class _DeadNamer:
    """Names dead tensor entries from the file, and by content from a state file."""

    def __init__(self, pte: PteFile, sources: Mapping[str, ByteSource], state: StateFile | None):
        self._pte, self._sources, self._state = pte, sources, state
        self._data: dict[DataRef, bytes] = {}

    def _read(self, ref: DataRef) -> bytes:
        if ref not in self._data:
            entry = self._pte.entries[ref.space][ref.index]
            source = self._sources[entry.file]
            self._data[ref] = source.read(entry.offset, entry.nbytes, "stored data")
        return self._data[ref]

    def value_names(self, tensor: TensorEntry) -> tuple[ConstantName, ...]:
        """A dead value's names: its FQN, else the state tensors with its shape and bytes."""
        if tensor.name is not None:
            known = self._state.name_of(tensor.name) if self._state else None
            return (dataclasses.replace(known, plan=tensor.plan) if known else
                    ConstantName(tensor.name, None, tensor.plan),)
        entry = self._pte.entries[tensor.ref.space].get(tensor.ref.index)
        if self._state is None or entry is None or entry.offset < 0:
            return ()
        found = self._state.match(entry.nbytes, [tensor.shape], lambda: self._read(tensor.ref))
        kind = "mutable_buffer" if tensor.ref.space is DataSpace.MUTABLE else None
        return tuple(dataclasses.replace(n, kind=kind or n.kind, plan=tensor.plan) for n in found)


def _dead_users(pte: PteFile, liveness: Liveness) -> dict[DataRef, list[TensorEntry]]:
    users: dict[DataRef, list[TensorEntry]] = {}
    for tensor in pte.tensors:
        if tensor.ref.index not in liveness.live_data[tensor.ref.space]:
            users.setdefault(tensor.ref, []).append(tensor)
    return users


def _keep_roots(
    pte: PteFile,
    users: Mapping[DataRef, Sequence[TensorEntry]],
    namer: _DeadNamer,
    keep: KeepList,
) -> PteFile:
    """`pte` with the dead values whose names match `keep` as more roots."""
    extra: dict[str, list[int]] = {}
    for tensors in users.values():
        for tensor in tensors:
            if keep.matches(n.name for n in namer.value_names(tensor)):
                extra.setdefault(tensor.plan, []).append(tensor.value_index)
    for pattern in keep.unmatched():
        logger.warning(
            "%s: --keep %r matched no dead constant (constant-segment entries have "
            "names only with --names)", pte.path, pattern,
        )
    plans = tuple(
        dataclasses.replace(plan, roots=[*plan.roots, *extra[plan.name]])
        if plan.name in extra else plan
        for plan in pte.plans
    )
    return dataclasses.replace(pte, plans=plans)


def analyse_file(
    pte: PteFile,
    sources: Mapping[str, ByteSource],
    keep_constants: Sequence[str] = (),
    state: StateFile | None = None,
) -> FileAnalysis:
    """Finds what no program of a file can reach, keeping and naming as asked.

    Args:
        pte: What `read_pte` returned. Not modified.
        sources: The files `pte` was read from, open, by the names it gives them;
            read only for dead entries, and only with `state`.
        keep_constants: `fnmatch` patterns of FQNs whose constants are roots.
        state: The model's state tensors, to name constant-segment entries by content.
    """
    liveness = find_live(pte.plans)
    namer = _DeadNamer(pte, sources, state)
    if keep_constants:
        pte = _keep_roots(pte, _dead_users(pte, liveness), namer, KeepList(keep_constants))
        liveness = find_live(pte.plans)
    use = classify_file_named_data(pte)
    dead = find_dead_entries(pte, liveness, use)
    if state is not None:
        users = _dead_users(pte, liveness)
        named = []
        for entry in dead:
            ref = DataRef(DataSpace(entry.space), entry.index) if entry.space in (
                "constant", "mutable", "external") else None
            found = {n.name: n for t in users.get(ref, ()) for n in namer.value_names(t)}
            named.append(
                dataclasses.replace(entry, names=tuple(found.values())) if found else entry
            )
        dead = named
    return FileAnalysis(pte, liveness, use, tuple(dead))


def _stored_copies(
    pte: PteFile, sources: Mapping[str, ByteSource]
) -> Iterator[tuple[StoredCopy, StoredSpan]]:
    """Every stored copy, in file order, as `duplicates._written_copies` lists them in memory.

    External entries sized from shapes (no `.ptd` given) are not stored here, so
    they are no copies.
    """
    for space in (DataSpace.CONSTANT, DataSpace.MUTABLE):
        for index, entry in sorted(pte.entries[space].items()):
            if index:
                span = StoredSpan(sources[entry.file], entry.offset, entry.nbytes)
                yield StoredCopy(space.value, None, index, ()), span
    in_pte = [entry for entry in pte.named_data if entry.file == pte.path]
    for segment, keys in _keys_by_segment(in_pte).items():
        span = StoredSpan(sources[pte.path], segment.offset, segment.size)
        yield StoredCopy("named_data", None, segment.index, keys), span
    for ptd in pte.ptd_files:
        tag = os.path.splitext(os.path.basename(ptd.path))[0]
        for segment, keys in _keys_by_segment(ptd.named_data.values()).items():
            span = StoredSpan(sources[ptd.path], segment.offset, segment.size)
            yield StoredCopy("external", tag, segment.index, keys), span


def _one_copy_per_range(
    copies: Iterator[tuple[StoredCopy, StoredSpan]],
) -> Iterator[tuple[StoredCopy, StoredSpan]]:
    """Drops the copies that read a range an earlier copy reads: shared bytes are stored once."""
    seen: set[tuple[str, int, int]] = set()
    for copy, span in copies:
        where = (span.source.name, span.offset, span.nbytes)
        if where not in seen:
            seen.add(where)
            yield copy, span


def _keys_by_segment(entries) -> dict[Segment, tuple[str, ...]]:
    keys: dict[Segment, list[str]] = {}
    for entry in entries:
        segment = Segment(entry.segment_index, entry.offset, entry.nbytes)
        keys.setdefault(segment, []).append(entry.key)
    return {segment: tuple(names) for segment, names in keys.items()}


def audit_pte(
    pte: PteFile,
    sources: Mapping[str, ByteSource],
    keep_constants: Sequence[str] = (),
    state: StateFile | None = None,
) -> AuditReport:
    """Audits what `read_pte` returned; `audit_file` is the usual entry point.

    Args:
        pte: Not modified.
        sources: The files `pte` was read from, open, by the names it gives them;
            read only for entries whose size another entry shares, and (with
            `state`) dead entries.
        keep_constants: See `audit_file`.
        state: See `audit_file`'s `names`.
    """
    shared = find_shared_ranges(pte)
    analysis = analyse_file(pte, sources, keep_constants, state)
    pte, liveness, use, dead = analysis.pte, analysis.liveness, analysis.use, analysis.dead

    totals = {
        space.value: sum(e.nbytes for e in pte.entries[space].values()) for space in DataSpace
    }
    # Keys that share a segment share its bytes: count each segment once.
    totals["named_data"] = sum(
        nbytes for (_, _, nbytes) in {(e.file, e.segment_index, e.nbytes) for e in pte.named_data}
    )
    totals["delegate"] = sum(d.nbytes for d in pte.delegates)
    totals["segments"] = sum(s.size for s in pte.unreferenced_segments)
    dead_per_space = dict.fromkeys(SPACES, 0)
    for entry in dead:
        dead_per_space[entry.space] += entry.nbytes
    spaces = {
        name: SpaceBytes(totals[name], totals[name] - dead_per_space[name], dead_per_space[name])
        for name in SPACES
    }
    unprovable = frozenset(use.kept_unprovable)
    files = ((pte.path, pte.file_bytes), *((p.path, p.file_bytes) for p in pte.ptd_files))
    report = AuditReport(
        path=pte.path,
        files=files,
        file_bytes=sum(size for _, size in files),
        constant_bytes=sum(totals.values()),
        dead_bytes=sum(dead_per_space.values()),
        dead_values=liveness.dead_value_count(pte.plans),
        spaces=spaces,
        dead=tuple(dead),
        kept_unprovable_named_data=tuple(
            UnprovableNamedData(e.key, e.nbytes, e.file)
            for e in pte.named_data
            if e.key in unprovable
        ),
        duplicates=group_duplicates(_one_copy_per_range(_stored_copies(pte, sources))),
        shared=shared,
    )
    logger.debug(
        "%s: %d of %d constant bytes dead, %d duplicated",
        pte.path, report.dead_bytes, report.constant_bytes, report.duplicated_bytes,
    )
    return report


def audit_file(
    path: str | os.PathLike | bytes,
    ptd_paths: Sequence[str | os.PathLike] = (),
    *,
    keep_constants: Sequence[str] = (),
    names: str | os.PathLike | StateFile | None = None,
) -> AuditReport:
    """Reports the bytes of a `.pte` file (and its `.ptd` files) that no program can reach.

    Reads headers and flatbuffers, and of the data only the entries whose size
    another entry shares (to find duplicates).

    Args:
        path: The `.pte` file, or its bytes. Not modified.
        ptd_paths: The `.ptd` files with its external constants. Not modified.
            Without them, external entries are sized from the tensors' shapes.
        keep_constants: `fnmatch` patterns of FQNs: a matching constant is a
            root (not dead), as `ExecutorchBackendConfig(keep_constants=...)` makes it.
        names: A `torch.export` `.pt2` or an ETRecord of the same model (read
            with torch), or what `state_names.read_state_file` returned for one:
            names constant-segment entries, and lets `keep_constants` match them.

    Raises:
        PteFormatError: A file is malformed (ranges that overlap without being the
            same range included) or the `.ptd` does not match the `.pte`.
        ProgramFormatError: The program refers to something that does not exist.
    """
    state = state_file(names)
    pte = read_pte(path, ptd_paths)
    with contextlib.ExitStack() as stack:
        opened = [stack.enter_context(ByteSource(p)) for p in (path, *ptd_paths)]
        return audit_pte(pte, {source.name: source for source in opened}, keep_constants, state)
