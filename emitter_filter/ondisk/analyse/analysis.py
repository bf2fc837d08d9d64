"""The one analysis of a file that `audit`, `prune` and `dedupe` all call.

`analyse_file` first checks what makes a file valid beyond its offsets being in
bounds (`read_pte` checked those): two stored ranges may only overlap by being the
same range (`stored_ranges.find_shared_ranges`). Then it runs the in-process filter's
reachability (`reachability.find_live`) and named-data rules
(`dead_bytes.classify_file_named_data`), and lists what is dead
(`dead_bytes.find_dead_entries`), named as the `audit` module docstring says, with
the one count of every byte (`dead_bytes.ByteCount`). So the three tools agree on
what a valid file is and on what is dead.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from emitter_filter.ondisk.analyse.dead_bytes import (
    ByteCount,
    classify_file_named_data,
    find_dead_entries,
)
from emitter_filter.ondisk.analyse.stored_ranges import SharedRange, find_shared_ranges
from emitter_filter.ondisk.read.byte_source import ByteSource
from emitter_filter.ondisk.read.file_model import PteFile, TensorEntry
from emitter_filter.program.named_keys import NamedDataUse
from emitter_filter.program.names import ConstantName, DroppedConstant
from emitter_filter.program.reachability import DataRef, DataSpace, KeepList, Liveness, find_live
from emitter_filter.program.state_names import StateFile

__all__ = ["FileAnalysis", "analyse_file"]

logger = logging.getLogger(__name__)


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
