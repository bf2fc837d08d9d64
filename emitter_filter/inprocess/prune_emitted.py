"""Prune the in-memory output of `emit_program`, in place, before it is serialized.

`prune_emitter_output` reads each plan's references (`collect_plan_refs`, with
the values of `keep_constants` as more roots), asks `reachability.find_live`
what is live, validates, and only then rewrites:

- each plan's `values`, compacted in their original order (list items still come
  before their lists) and every value index renumbered
  (`plan_indices.remap_plan_values`, shared with the file side);
- `Program.constant_buffer`, `EmitterOutput.mutable_data` and
  `EmitterOutput.external_constant_buffer` / `external_constant_map`, each
  compacted and every `Tensor.data_buffer_idx` renumbered (`_remap_data`, through
  `plan_indices.remap_data_indices`).

Data entries are renumbered in the order kept values first refer to them, plan by
plan, value by value: the order in which the emitter would have allocated them had
the dead constants never existed. That is what makes a pruned file byte-identical
to the file of the same model with the dead constants deleted at the source.

The report names each dropped entry after the placeholders of the values that
used it (`state_names.name_entries`), when it is first read: the prune only
notes, per dropped entry, which values referred to it.

Never touched: instructions, operators, delegates, `backend_delegate_data`,
`non_const_buffer_sizes`, the named data, and constant bytes (the `bytes` objects
are moved between lists, never copied).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from executorch.exir.emit import EmitterOutput
from executorch.exir.schema import ExecutionPlan, Tensor

from emitter_filter.inprocess.reports import PruneReport
from emitter_filter.program import plan_indices
from emitter_filter.program.names import ConstantName, DroppedConstant
from emitter_filter.program.object_models import EXIR_SCHEMA
from emitter_filter.program.reachability import (
    DataRef,
    DataSpace,
    KeepList,
    Liveness,
    PlanRefs,
    find_live,
    new_data_indices,
    order_live_data,
)
from emitter_filter.program.state_names import PlaceholderNames, name_entries

__all__ = ["collect_plan_refs", "prune_emitter_output", "space_nbytes"]

logger = logging.getLogger(__name__)


def _tensor_data_ref(tensor: Tensor) -> DataRef | None:
    """Where a Tensor value's bytes live (see `reachability.classify_tensor_data`)."""
    return plan_indices.tensor_data_ref(EXIR_SCHEMA, tensor)


def collect_plan_refs(plan: ExecutionPlan, kept: Sequence[int] = ()) -> PlanRefs:
    """Describes one `exir.schema.ExecutionPlan` for `find_live` (`plan_indices`). Not modified.

    Args:
        plan: The plan.
        kept: More roots: the values of constants the user keeps by name.
    """
    return plan_indices.collect_plan_refs(EXIR_SCHEMA, plan, kept)


def _space_entries(emitter_output: EmitterOutput, space: DataSpace) -> list:
    """The list holding a space's entries (`Buffer` or `bytes`); empty when absent."""
    if space is DataSpace.CONSTANT:
        return emitter_output.program.constant_buffer
    if space is DataSpace.MUTABLE:
        return emitter_output.mutable_data or []
    return emitter_output.external_constant_buffer


def _entry_nbytes(entry) -> int:
    return len(entry) if isinstance(entry, bytes) else len(entry.storage)


def space_nbytes(emitter_output: EmitterOutput) -> dict[str, int]:
    """Bytes per data space (the hook reports a skipped prune with it)."""
    return {
        space.value: sum(_entry_nbytes(e) for e in _space_entries(emitter_output, space))
        for space in DataSpace
    }


def _kept_values(plan: ExecutionPlan, keep: KeepList, names: PlaceholderNames | None) -> list[int]:
    """The Tensor values with data whose name matches a `keep_constants` pattern.

    A value's names are the one the program carries and, with `names`, the FQN
    of the placeholder it was emitted from.
    """
    kept = []
    for index, evalue in enumerate(plan.values):
        tensor = evalue.val
        if not isinstance(tensor, Tensor) or _tensor_data_ref(tensor) is None:
            continue
        info = tensor.extra_tensor_info
        candidates = [info.fully_qualified_name] if info and info.fully_qualified_name else []
        name = None if names is None else names.name_value(plan.name, index, tensor.sizes)
        if name is not None:
            candidates.append(name.name)
        if candidates and keep.matches(candidates):
            kept.append(index)
    return kept


def _dropped_constants(
    emitter_output: EmitterOutput,
    plans: Sequence[PlanRefs],
    liveness: Liveness,
) -> tuple[tuple[DroppedConstant, ...], dict[tuple[str, int], list[tuple[str, int, list[int]]]]]:
    """One entry per dropped data entry, named after the first value that referred to it.

    Also returns, per dropped (space, index), every (plan, value index, sizes)
    that referred to it: what `state_names.name_entries` names it from later.
    """
    dropped: dict[DataRef, DroppedConstant] = {}
    users: dict[tuple[str, int], list[tuple[str, int, list[int]]]] = {}
    for plan_index, plan in enumerate(plans):
        values = emitter_output.program.execution_plan[plan_index].values
        for index, ref in plan.data_refs.items():
            if ref.index in liveness.live_data[ref.space]:
                continue
            tensor = values[index].val
            users.setdefault((ref.space.value, ref.index), []).append(
                (plan.name, index, tensor.sizes)
            )
            if ref in dropped:
                continue
            info = tensor.extra_tensor_info
            name = info.fully_qualified_name if info is not None else None
            dropped[ref] = DroppedConstant(
                space=ref.space.value,
                index=ref.index,
                nbytes=_entry_nbytes(_space_entries(emitter_output, ref.space)[ref.index]),
                plan=plan.name,
                value_index=index,
                dtype=tensor.scalar_type.name,
                shape=tuple(tensor.sizes),
                name=name,
                names=(ConstantName(name, None, plan.name),) if name else (),
            )
    for space in DataSpace:
        entries = _space_entries(emitter_output, space)
        first = 1 if space.has_placeholder else 0
        for index in range(first, len(entries)):
            ref = DataRef(space, index)
            if index not in liveness.live_data[space] and ref not in dropped:
                # An entry no value refers to at all: dropped, with nothing to name it by.
                dropped[ref] = DroppedConstant(
                    space=space.value,
                    index=index,
                    nbytes=_entry_nbytes(entries[index]),
                    plan=None,
                    value_index=None,
                    dtype=None,
                    shape=None,
                    name=None,
                )
    return tuple(sorted(dropped.values(), key=lambda d: (d.space, d.index))), users


def _remap_data(
    emitter_output: EmitterOutput,
    plans: Sequence[PlanRefs],
    liveness: Liveness,
    order: dict[DataSpace, list[int]],
) -> None:
    """Compacts the three data spaces to `order` and renumbers every `data_buffer_idx`.

    The only place the in-memory rewrite renumbers data indices. Old indices come from `plans`, a
    snapshot taken before any change, so a Tensor object shared by two values is
    not renumbered twice.
    """
    new_index = new_data_indices(order)

    program = emitter_output.program
    live_fqns: set[str] = set()
    for plan_refs, plan, live in zip(
        plans, program.execution_plan, liveness.live_values, strict=True
    ):
        # plan.values is already compacted: kept value k was old value live[k].
        renumbered = plan_indices.remap_data_indices(EXIR_SCHEMA, plan, plan_refs, live, new_index)
        live_fqns.update(
            tensor.extra_tensor_info.fully_qualified_name
            for ref, tensor in renumbered
            if ref.space is DataSpace.EXTERNAL
        )

    constant = program.constant_buffer
    program.constant_buffer = [constant[0]] + [constant[i] for i in order[DataSpace.CONSTANT]]
    if emitter_output.mutable_data is not None:
        mutable = emitter_output.mutable_data
        emitter_output.mutable_data = [mutable[0]] + [mutable[i] for i in order[DataSpace.MUTABLE]]
    external = emitter_output.external_constant_buffer
    emitter_output.external_constant_buffer = [external[i] for i in order[DataSpace.EXTERNAL]]

    external_index = new_index[DataSpace.EXTERNAL]
    pruned_map: dict[str, dict[str, int]] = {}
    for tag, fqn_to_index in (emitter_output.external_constant_map or {}).items():
        kept = {
            fqn: external_index[index] for fqn, index in fqn_to_index.items() if fqn in live_fqns
        }
        if kept:
            pruned_map[tag] = kept
    if emitter_output.external_constant_map is not None:
        emitter_output.external_constant_map = pruned_map


def prune_emitter_output(
    emitter_output: EmitterOutput,
    *,
    keep_constants: Sequence[str] = (),
    names: PlaceholderNames | None = None,
    before_change: Callable[[], None] | None = None,
) -> PruneReport:
    """Drops every value and constant that no plan, chain, instruction or list reaches.

    Args:
        emitter_output: The output of `emit_program`. Modified in place: its program's
            values and `constant_buffer`, its `mutable_data`, `external_constant_buffer`
            and `external_constant_map`. Left as it was if an error is raised.
        keep_constants: `fnmatch` patterns of FQNs: a Tensor value with data whose
            name matches one is a root, so its constant is kept.
        names: The placeholder names of the methods emitted, to match
            `keep_constants` against constants the program does not name and to
            name the dropped entries in the report (on first use of `dropped`).
        before_change: Called once before anything is modified, only if something is
            (the hook's proof reads the program then: `prune_proof.PruneProof.take`).

    Returns:
        What was dropped, and the bytes of each data space before and after.

    Raises:
        ProgramFormatError: The program refers to a value or data entry that does not exist.
        InvariantError: `names` does not describe these plans' values.
    """
    started = time.perf_counter()
    program = emitter_output.program
    keep = KeepList(keep_constants)
    plans = [
        collect_plan_refs(plan, _kept_values(plan, keep, names))
        if keep
        else collect_plan_refs(plan)
        for plan in program.execution_plan
    ]
    for pattern in keep.unmatched():
        delegated = () if names is None else names.delegated_state(pattern)
        if delegated:
            logger.warning(
                "emitter_filter: keep_constants pattern %r matched no constant of the "
                "program's values: %s, which holds its own copy (kept as the delegate's "
                "data, not readable by name)",
                pattern,
                "; ".join(delegated),
            )
        else:
            logger.warning("emitter_filter: keep_constants pattern %r matched no constant", pattern)
    liveness = find_live(plans)
    plan_indices.check_data_refs(
        plans, {space: len(_space_entries(emitter_output, space)) for space in DataSpace}
    )
    bytes_before = space_nbytes(emitter_output)
    dropped, users = _dropped_constants(emitter_output, plans, liveness)
    dropped_values = liveness.dead_value_count(plans)

    if dropped or dropped_values:
        if before_change is not None:
            before_change()
        order = order_live_data(plans, liveness)
        for plan, refs, live in zip(
            program.execution_plan, plans, liveness.live_values, strict=True
        ):
            if len(live) != len(plan.values):
                plan_indices.remap_plan_values(EXIR_SCHEMA, plan, refs, live)
        _remap_data(emitter_output, plans, liveness, order)

    # Given only when there are names to find (the report's default finds none).
    optional: dict[str, Any] = (
        {"find_names": functools.partial(name_entries, names, users)}
        if names is not None and users
        else {}
    )
    report = PruneReport(
        bytes_before=bytes_before,
        bytes_after=space_nbytes(emitter_output),
        found=dropped,
        dropped_values=dropped_values,
        seconds=time.perf_counter() - started,
        **optional,
    )
    logger.debug("pruned %s", report)
    return report
