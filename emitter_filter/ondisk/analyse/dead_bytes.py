"""What is dead in a file, and the one count of its bytes (`ByteCount`).

The in-process filter's reachability (`reachability.find_live`) and named-data
rules (`classify_file_named_data`) say what is live; `find_dead_entries` lists
the rest, named as the `audit` module docstring says.

One count (`ByteCount`): a byte is dead when pruning frees it, that is when no
live reference reads it, whatever other references (dead values, dead keys of
another layout on the same `.ptd` segment, a dead entry sharing a range) point
at it. Each stored byte counts once, for the first reference of it in `SPACES`
order then index; `audit`, `explain`, `prune` and `share` all report it.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from emitter_filter._program_fbs.executorch_flatbuffer.KernelTypes import KernelTypes
from emitter_filter._program_fbs.executorch_flatbuffer.TensorDataLocation import (
    TensorDataLocation,
)
from emitter_filter.ondisk.read.file_model import PteFile, TensorEntry
from emitter_filter.program.generated_fields import table_text
from emitter_filter.program.named_keys import NamedDataUse, classify_named_keys
from emitter_filter.program.names import ConstantName, DroppedConstant
from emitter_filter.program.reachability import DataRef, DataSpace, Liveness

__all__ = [
    "SPACES",
    "ByteCount",
    "classify_file_named_data",
    "find_dead_entries",
    "keep_ptd_key",
]

#: The spaces of a file's data, in report order (`AuditReport.spaces`, `find_dead_entries`).
SPACES = ("constant", "mutable", "external", "named_data", "delegate", "segments")


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
