"""The one analysis of a file that `audit`, `prune` and `dedupe` all call.

`analyse_file` first checks what makes a file valid beyond its offsets being in
bounds (`read_pte` checked those): two stored ranges may only overlap by being the
same range (`find_shared_ranges`). Then it runs the in-process filter's
reachability (`reachability.find_live`) and named-data rules
(`classify_file_named_data`), and lists what is dead (`find_dead_entries`), named
as the `audit` module docstring says. So the three tools agree on what a valid
file is and on what is dead.

`stored_regions` is the one enumeration of what a file stores: every range a
reference reads, in file order of the program; `audit` finds duplicates among
them and `find_shared_ranges` the ranges several references share.

One count (`ByteCount`): a byte is dead when pruning frees it, that is when no
live reference reads it, whatever other references (dead values, dead keys of
another layout on the same `.ptd` segment, a dead entry sharing a range) point
at it. Each stored byte counts once, for the first reference of it in `SPACES`
order then index; `audit`, `explain`, `prune` and `share` all report it.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from emitter_filter._program_fbs.executorch_flatbuffer.KernelTypes import KernelTypes
from emitter_filter._program_fbs.executorch_flatbuffer.TensorDataLocation import (
    TensorDataLocation,
)
from emitter_filter.errors import PteFormatError
from emitter_filter.ondisk.read.byte_source import ByteSource
from emitter_filter.ondisk.read.file_model import PteFile, TensorEntry
from emitter_filter.program.duplicates import StoredCopy
from emitter_filter.program.generated_fields import table_text
from emitter_filter.program.named_keys import NamedDataUse, classify_named_keys
from emitter_filter.program.names import ConstantName, DroppedConstant
from emitter_filter.program.reachability import DataRef, DataSpace, KeepList, Liveness, find_live
from emitter_filter.program.state_names import StateFile

__all__ = [
    "SPACES",
    "StoredRegion",
    "SharedRange",
    "FileAnalysis",
    "stored_regions",
    "find_shared_ranges",
    "Alias",
    "find_aliases",
    "ByteCount",
    "classify_file_named_data",
    "find_dead_entries",
    "keep_ptd_key",
    "analyse_file",
]

logger = logging.getLogger(__name__)

# The spaces of `stored_regions` that are whole segments of the `.pte`.
_SEGMENT_SPACES = ("named_data", "delegate", "segments")

#: The spaces of a file's data, in report order (`AuditReport.spaces`, `find_dead_entries`).
SPACES = ("constant", "mutable", "external", "named_data", "delegate", "segments")


# --- what a file stores ---------------------------------------------------------------


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


# --- what is dead ---------------------------------------------------------------------


def classify_file_named_data(pte: PteFile) -> NamedDataUse:
    """Which named-data keys of a file its delegates can reach: the hook's rules, on disk.

    The roots are every plan's `delegates` entries (`named_data` module
    docstring); the keys are `pte.named_data` less the external constants'
    fully qualified names, which are tensor data, not named data. `audit` counts
    and `prune` drops exactly `dead`.

    Args:
        pte: What `read_pte` returned. Not modified.
    """
    plan_position = {plan.name: position for position, plan in enumerate(pte.plans)}
    uses = sorted(
        ((ref, blob.named_keys) for blob in pte.delegates for ref in blob.users),
        key=lambda use: (plan_position[use[0].plan], use[0].index),
    )
    external_fqns = {t.name for t in pte.tensors if t.ref.space is DataSpace.EXTERNAL}
    return classify_named_keys(
        [(ref, None if keys is None else tuple(sorted(keys))) for ref, keys in uses],
        [entry.key for entry in pte.named_data if entry.key not in external_fqns],
    )


# A dead entry and the range of one file it reads, if it reads one: (file, offset).
_DeadEntry = tuple[DroppedConstant, "tuple[str, int] | None"]


def _dead_tensor_data(pte: PteFile, liveness: Liveness) -> list[_DeadEntry]:
    """Dead entries of the three tensor data spaces, named after the first value using each."""
    first_user: dict[DataRef, TensorEntry] = {}
    for tensor in pte.tensors:
        first_user.setdefault(tensor.ref, tensor)
    dead = []
    for space in DataSpace:
        for index, entry in sorted(pte.entries[space].items()):
            if index in liveness.live_data[space] or (space.has_placeholder and index == 0):
                continue
            user = first_user.get(DataRef(space, index))
            dropped = DroppedConstant(
                space=space.value,
                index=index,
                nbytes=entry.nbytes,
                plan=user.plan if user else None,
                value_index=user.value_index if user else None,
                dtype=user.dtype if user else None,
                shape=user.shape if user else None,
                name=user.name if user else None,
                names=((ConstantName(user.name, None, user.plan),) if user and user.name else ()),
            )
            dead.append((dropped, (entry.file, entry.offset) if entry.offset >= 0 else None))
    return dead


def _bare(space: str, index: int, nbytes: int, name: str | None = None) -> DroppedConstant:
    names = () if name is None else (ConstantName(name, "named_data", None),)
    return DroppedConstant(space, index, nbytes, None, None, None, None, name, names)


def _named_data_positions(pte: PteFile) -> dict[tuple[str, str], int]:
    """{(file, key): position of the key in its own file's named data}."""
    in_pte = (entry.key for entry in pte.named_data if entry.file == pte.path)
    position = {(pte.path, key): i for i, key in enumerate(in_pte)}
    for ptd in pte.ptd_files:
        # Among all the .ptd's keys, external constants included.
        position.update(((ptd.path, key), i) for i, key in enumerate(ptd.named_data))
    return position


def _dead_named_data(pte: PteFile, use: NamedDataUse) -> list[_DeadEntry]:
    """One entry per dead key, `index` its position in its own file's named data."""
    dead = frozenset(use.dead)
    position = _named_data_positions(pte)
    return [
        (_bare("named_data", position[(e.file, e.key)], e.nbytes, e.key), (e.file, e.offset))
        for e in pte.named_data
        if e.key in dead
    ]


def _live_references(
    pte: PteFile, liveness: Liveness, use: NamedDataUse
) -> Iterator[tuple[str, tuple[str, int] | None, int]]:
    """(space, (file, offset) or None where the bytes are in no data range, nbytes) of every
    live reference, in `SPACES` order."""
    for space in DataSpace:
        for index, entry in sorted(pte.entries[space].items()):
            if index in liveness.live_data[space] and not (space.has_placeholder and index == 0):
                yield (
                    space.value,
                    (entry.file, entry.offset) if entry.offset >= 0 else None,
                    (entry.nbytes),
                )
    # External constants' keys are tensor data: their entries above say whether they are read.
    external_fqns = {t.name for t in pte.tensors if t.ref.space is DataSpace.EXTERNAL}
    dead = frozenset(use.dead)
    for named in pte.named_data:
        if named.key not in dead and named.key not in external_fqns:
            yield "named_data", (named.file, named.offset), named.nbytes
    for blob in pte.delegates:
        if blob.users:
            where = (pte.path, blob.offset) if blob.location == "segment" else None
            yield "delegate", where, blob.nbytes


class _Ranges:
    """Disjoint byte ranges of one file, by offset; touching ranges are one."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []

    def claim(self, offset: int, nbytes: int) -> int:
        """Adds `nbytes` at `offset`; returns how many of them no earlier claim held."""
        end = offset + nbytes
        first = bisect.bisect_left(self._ends, offset)
        last = bisect.bisect_right(self._starts, end, lo=first)
        held = sum(
            max(0, min(e, end) - max(s, offset))
            for s, e in zip(self._starts[first:last], self._ends[first:last], strict=True)
        )
        if first < last:
            offset, end = min(offset, self._starts[first]), max(end, self._ends[last - 1])
        self._starts[first:last] = [offset]
        self._ends[first:last] = [end]
        return nbytes - held

    def gaps(self, offset: int, nbytes: int) -> Iterator[tuple[int, int]]:
        """The (offset, end) ranges of these bytes no claim holds."""
        end = offset + nbytes
        first = bisect.bisect_left(self._ends, offset)
        for start, stop in zip(self._starts[first:], self._ends[first:], strict=True):
            if start >= end:
                break
            if start > offset:
                yield offset, start
            offset = max(offset, stop)
        if offset < end:
            yield offset, end

    def spans(self) -> tuple[tuple[int, int], ...]:
        return tuple(zip(self._starts, self._ends, strict=True))


@dataclass(frozen=True)
class ByteCount:
    """Every byte a file's references read, counted once: live, or freed by pruning.

    Attributes:
        live: Live bytes per space (`SPACES`), each byte on the first space that reads it.
        freed: Per file, the ranges no live reference reads, as (offset, end), by offset.
            Their bytes are the dead entries' `nbytes` (with the dead bytes stored in
            no range: inline delegate blobs, external constants sized from shapes).
    """

    live: Mapping[str, int]
    freed: Mapping[str, tuple[tuple[int, int], ...]]

    def frees(self, file: str, offset: int, nbytes: int) -> bool:
        """Whether pruning frees every byte of this range of `file`."""
        spans = self.freed.get(file, ())
        i = bisect.bisect_right(spans, (offset, float("inf"))) - 1
        return nbytes == 0 or (i >= 0 and spans[i][0] <= offset and offset + nbytes <= spans[i][1])


def _count_bytes(
    pte: PteFile, liveness: Liveness, use: NamedDataUse, dead: list[_DeadEntry]
) -> tuple[list[DroppedConstant], ByteCount]:
    """`dead` with each entry's bytes those only it frees first, and the count of every byte.

    A byte any live reference reads is live; a byte only dead references read is
    freed once, counted on the first of them by space then index.
    """
    read: dict[str, _Ranges] = {}
    live = dict.fromkeys(SPACES, 0)
    for space, where, nbytes in _live_references(pte, liveness, use):
        if where is None:
            live[space] += nbytes
        else:
            live[space] += read.setdefault(where[0], _Ranges()).claim(where[1], nbytes)
    freed: dict[str, _Ranges] = {}
    counted = []
    for entry, where in sorted(dead, key=lambda d: (SPACES.index(d[0].space), d[0].index)):
        if where is not None:
            file, offset = where
            ranges = freed.setdefault(file, _Ranges())
            gaps = list(read.get(file, _Ranges()).gaps(offset, entry.nbytes))
            nbytes = sum(ranges.claim(start, end - start) for start, end in gaps)
            if nbytes != entry.nbytes:
                entry = dataclasses.replace(entry, nbytes=nbytes)
        counted.append(entry)
    spans = {file: ranges.spans() for file, ranges in freed.items()}
    return counted, ByteCount(live, spans)


def find_dead_entries(
    pte: PteFile,
    liveness: Liveness,
    use: NamedDataUse,
) -> tuple[list[DroppedConstant], ByteCount]:
    """Every entry of a file no program can reach, by space then index, and the one count
    of every byte (`ByteCount`); shared with `prune`.

    An entry's `nbytes` are the bytes pruning frees with it: none that a live
    reference reads, and a range several dead entries read on the first of them.

    Args:
        pte: What `read_pte` returned. Not modified.
        liveness: `find_live(pte.plans)`.
        use: `classify_file_named_data(pte)`.
    """
    dead = _dead_tensor_data(pte, liveness)
    dead += _dead_named_data(pte, use)
    dead += [
        (
            _bare("delegate", d.index, d.nbytes),
            (pte.path, d.offset) if d.location == "segment" else None,
        )
        for d in pte.delegates
        if not d.users
    ]
    dead += [
        (_bare("segments", s.index, s.size), (pte.path, s.offset))
        for s in pte.unreferenced_segments
    ]
    return _count_bytes(pte, liveness, use, dead)


def _live_external_names(program, liveness: Liveness) -> set[str]:
    """`fully_qualified_name` of every live EXTERNAL tensor: the `.ptd` keys still read."""
    names: set[str] = set()
    for plan, live in zip(program.executionPlan or (), liveness.live_values, strict=True):
        values = plan.values or []
        for index in live:
            evalue = values[index]
            if evalue.valType != KernelTypes.Tensor or evalue.val.extraTensorInfo is None:
                continue
            info = evalue.val.extraTensorInfo
            name = table_text(info.fullyQualifiedName)
            if info.location == TensorDataLocation.EXTERNAL and name:
                names.add(name)
    return names


def keep_ptd_key(pte: PteFile, program, liveness: Liveness, dead_keys: frozenset[str]):
    """Which keys of the `.ptd` files stay: live external constants, and live named data.

    Reads `program` before it is rewritten (the live values are its indices).
    """
    external_fqns = {t.name for t in pte.tensors if t.ref.space is DataSpace.EXTERNAL}
    live_fqns = _live_external_names(program, liveness)

    def keep(key: str) -> bool:
        if key in external_fqns:
            return key in live_fqns
        return key not in dead_keys

    return keep


@dataclass(frozen=True)
class FileAnalysis:
    """What `analyse_file` found; shared by `audit`, `prune` and `dedupe`.

    Attributes:
        pte: The file as read, with the values of kept constants added to its plans' roots.
        shared: `find_shared_ranges(pte)`: the ranges several references share.
        liveness: `find_live(pte.plans)`.
        use: `classify_file_named_data(pte)`.
        dead: `find_dead_entries`, each named as the `audit` module docstring says.
        count: Every stored byte once, live or freed (`ByteCount`).
    """

    pte: PteFile
    shared: tuple[SharedRange, ...]
    liveness: Liveness
    use: NamedDataUse
    dead: tuple[DroppedConstant, ...]
    count: ByteCount


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
            return (
                dataclasses.replace(known, plan=tensor.plan)
                if known
                else ConstantName(tensor.name, None, tensor.plan),
            )
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
            "names only with --names)",
            pte.path,
            pattern,
        )
    plans = tuple(
        dataclasses.replace(plan, roots=[*plan.roots, *extra[plan.name]])
        if plan.name in extra
        else plan
        for plan in pte.plans
    )
    return dataclasses.replace(pte, plans=plans)


def analyse_file(
    pte: PteFile,
    sources: Mapping[str, ByteSource],
    keep_constants: Sequence[str] = (),
    state: StateFile | None = None,
) -> FileAnalysis:
    """Checks a file, then finds what no program of it can reach, keeping and naming as asked.

    Args:
        pte: What `read_pte` returned. Not modified.
        sources: The files `pte` was read from, open, by the names it gives them;
            read only for dead entries, and only with `state`.
        keep_constants: `fnmatch` patterns of FQNs whose constants are roots.
        state: The model's state tensors, to name constant-segment entries by content.

    Raises:
        PteFormatError: Two stored ranges overlap without being the same range.
        ProgramFormatError: The program refers to something that does not exist.
    """
    shared = find_shared_ranges(pte)
    liveness = find_live(pte.plans)
    namer = _DeadNamer(pte, sources, state)
    if keep_constants:
        pte = _keep_roots(pte, _dead_users(pte, liveness), namer, KeepList(keep_constants))
        liveness = find_live(pte.plans)
    use = classify_file_named_data(pte)
    dead, count = find_dead_entries(pte, liveness, use)
    if state is not None:
        users = _dead_users(pte, liveness)
        named = []
        for entry in dead:
            tensors = (
                users.get(DataRef(DataSpace(entry.space), entry.index), [])
                if entry.space in ("constant", "mutable", "external")
                else []
            )
            found = {n.name: n for t in tensors for n in namer.value_names(t)}
            named.append(
                dataclasses.replace(entry, names=tuple(found.values())) if found else entry
            )
        dead = named
    return FileAnalysis(pte, shared, liveness, use, tuple(dead), count)
