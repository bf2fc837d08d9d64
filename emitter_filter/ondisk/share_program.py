"""One program of a shared set, pointed at the shared `.ptd`: what `share` changes in it.

Each tensor reading a moved constant becomes `EXTERNAL` with its key
(`extra_tensor_info`, as `external_constants=True` writes it: `externalize`); a key
whose bytes differ for another program comes back from its `.ptd` into its `.pte`
(`keep_own`). Nothing is dropped (`every_value`): `prune`'s rewrite then lays the
program out again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from emitter_filter._program_fbs.executorch_flatbuffer.TensorDataLocation import (
    TensorDataLocation,
)
from emitter_filter.errors import PteFormatError
from emitter_filter.ondisk.analyse.stored_blobs import TensorLayoutKey
from emitter_filter.ondisk.read.byte_source import Piece
from emitter_filter.ondisk.read.file_model import DataEntry
from emitter_filter.ondisk.read.read_pte import PteProgram
from emitter_filter.program.fbs_schemas import PROGRAM
from emitter_filter.program.flatbuffer_tables import Table
from emitter_filter.program.generated_fields import table_text, vector_ints
from emitter_filter.program.reachability import DataRef, DataSpace, Liveness

__all__ = ["externalize", "keep_own", "every_value"]


def _external_info(tensor, key: str) -> Table:
    """The tensor's `extra_tensor_info`, now EXTERNAL under `key` (other fields kept)."""
    info = PROGRAM.ExtraTensorInfo(fullyQualifiedName=key, location=TensorDataLocation.EXTERNAL)
    old = tensor.extraTensorInfo
    if old is not None:
        info.mutableDataSegmentsIdx = old.mutableDataSegmentsIdx
        info.deviceType, info.deviceIndex = old.deviceType, old.deviceIndex
    return info


def externalize(read: PteProgram, keys) -> tuple:
    """Points every tensor reading a moved constant at its key; returns the new `PlanRefs`.

    External data indices follow the existing ones (one per key); prune's
    rewrite renumbers them in first-reference order.
    """
    pte, program = read.pte, read.program
    index_of = {t.name: t.ref.index for t in pte.tensors if t.ref.space is DataSpace.EXTERNAL}
    plans = []
    for plan, refs in zip(program.executionPlan or (), pte.plans, strict=True):
        data_refs = dict(refs.data_refs)
        for value_index, ref in refs.data_refs.items():
            layouts = keys.get(ref.index) if ref.space is DataSpace.CONSTANT else None
            if layouts is None:
                continue
            tensor = plan.values[value_index].val
            key = layouts[
                TensorLayoutKey(
                    int(tensor.scalarType),
                    tuple(vector_ints(tensor.sizes)),
                    tuple(vector_ints(tensor.dimOrder)),
                )
            ]
            tensor.extraTensorInfo = _external_info(tensor, key)
            index = index_of.setdefault(key, max(index_of.values(), default=-1) + 1)
            data_refs[value_index] = DataRef(DataSpace.EXTERNAL, index)
        plans.append(dataclasses.replace(refs, data_refs=data_refs))
    return tuple(plans)


def _entry_count(subsegment) -> int:
    """Entries of a constant or mutable subsegment, its placeholder counted even where absent."""
    return max(len(vector_ints(subsegment.offsets)) if subsegment is not None else 0, 1)


def keep_own(
    read: PteProgram,
    plans,
    own: frozenset[str],
    fds: dict[str, int],
    alignments: dict[str, Sequence[int]],
) -> tuple[tuple, list[DataEntry], list[DataEntry], list[tuple[str, Piece, int]]]:
    """Brings the program's own keys (`SharedSet.own_keys`) from its `.ptd` into its `.pte`.

    A tensor reading one becomes a constant of the `.pte` (location SEGMENT, its
    `fully_qualified_name` kept, so the attribute API still finds it), as `merge
    --inline` writes it, or, a mutable one (`allocation_info` set: a training weight),
    mutable data, which the runtime copies into its arena; named data becomes the
    program's own, under its key. Returns the new `PlanRefs`, the input entries to
    copy as constants and as mutable data, and the named data to add.
    """
    pte, program = read.pte, read.program
    spaces: dict[DataSpace, tuple[int, list[DataEntry]]] = {
        DataSpace.CONSTANT: (_entry_count(program.constantSegment), []),
        DataSpace.MUTABLE: (_entry_count((program.mutableDataSegments or [None])[0]), []),
    }
    index_of: dict[str, DataRef] = {}
    new_plans = []
    for plan, refs in zip(program.executionPlan or (), plans, strict=True):
        data_refs = dict(refs.data_refs)
        for value_index, ref in refs.data_refs.items():
            tensor = plan.values[value_index].val
            name = (
                table_text(tensor.extraTensorInfo.fullyQualifiedName)
                if tensor.extraTensorInfo is not None
                else None
            )
            if ref.space is not DataSpace.EXTERNAL or name not in own:
                continue
            space = DataSpace.CONSTANT if tensor.allocationInfo is None else DataSpace.MUTABLE
            if name not in index_of:
                entry = pte.entries[DataSpace.EXTERNAL][ref.index]
                first, entries = spaces[space]
                index_of[name] = DataRef(space, first + len(entries))
                entries.append(entry)
            if index_of[name].space is not space:
                raise PteFormatError(
                    pte.path,
                    f"external tensor {name!r} is read both as a "
                    "mutable and as a constant tensor: share cannot keep it",
                )
            tensor.extraTensorInfo.location = TensorDataLocation.SEGMENT
            data_refs[value_index] = index_of[name]
        new_plans.append(dataclasses.replace(refs, data_refs=data_refs))
    named = [
        (
            entry.key,
            Piece(fds[entry.file], entry.offset, entry.nbytes),
            alignments[entry.file][entry.segment_index],
        )
        for entry in pte.named_data
        if entry.file != pte.path and entry.key in own and entry.key not in index_of
    ]
    return tuple(new_plans), spaces[DataSpace.CONSTANT][1], spaces[DataSpace.MUTABLE][1], named


def every_value(plans) -> Liveness:
    """Every value of every plan kept: `share` moves data, it drops nothing."""
    live_data: dict[DataSpace, set[int]] = {space: set() for space in DataSpace}
    for plan in plans:
        for ref in plan.data_refs.values():
            live_data[ref.space].add(ref.index)
    return Liveness(
        live_values=tuple(tuple(range(p.num_values)) for p in plans),
        live_data={
            space: frozenset(i for i in entries if i or not space.has_placeholder)
            for space, entries in live_data.items()
        },
    )
