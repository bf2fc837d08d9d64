"""Every field of an execution plan that holds an index, walked and renumbered once.

Both rewrites (the emitter's output in process, a `.pte` on disk) read the same
references and patch the same fields; only the object model differs
(`object_models`). So the fields are named here once:

- `INSTRUCTION_VALUE_FIELDS`: the value indices of each instruction kind;
- the plan's and each chain's `inputs` and `outputs`;
- the items of `IntList`, `TensorList` and `OptionalTensorList` values (`-1` is None);
- `Tensor.data_buffer_idx`, into the data space `reachability.classify_tensor_data` says.

`collect_plan_refs` is the one walk that describes a plan for `find_live`;
`remap_plan_values` the one renumbering of value indices, `remap_data_indices`
of data indices, and `check_data_refs` the one bounds check of the latter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from emitter_filter.errors import InvariantError, ProgramFormatError
from emitter_filter.program.object_models import ObjectModel
from emitter_filter.program.reachability import (
    DataRef,
    DataSpace,
    PlanRefs,
    classify_tensor_data,
    is_attribute_root,
    value_remapper,
)

__all__ = [
    "INSTRUCTION_VALUE_FIELDS",
    "VALUE_LIST_KINDS",
    "TensorFound",
    "instruction_value_indices",
    "tensor_data_ref",
    "collect_plan_refs",
    "check_data_refs",
    "remap_plan_values",
    "remap_data_indices",
]

#: The fields of each instruction kind (program.fbs `InstructionArguments`) that hold
#: value indices; `args` is a vector, the others one index each.
INSTRUCTION_VALUE_FIELDS: Mapping[str, tuple[str, ...]] = {
    "KernelCall": ("args",),
    "DelegateCall": ("args",),
    "MoveCall": ("move_from", "move_to"),
    "JumpFalseCall": ("cond_value_index",),
    "FreeCall": ("value_index",),
}
_VECTOR_FIELDS = frozenset({"args"})

#: The value kinds whose `items` are value indices.
VALUE_LIST_KINDS = ("IntList", "TensorList", "OptionalTensorList")

_EXTERNAL = 1  # TensorDataLocation.EXTERNAL in program.fbs (and exir.schema)

#: Called by `collect_plan_refs` for each Tensor value with data:
#: (value index, the tensor, where its data is, its fully qualified name).
TensorFound = Callable[[int, object, DataRef, "str | None"], None]


def _arguments(model: ObjectModel, instruction, where: str) -> tuple[str, object]:
    kind, args = model.instruction(instruction)
    if kind not in INSTRUCTION_VALUE_FIELDS:
        raise ProgramFormatError(f"{where}: unknown instruction kind {kind}")
    if args is None:
        # The object API leaves a missing table None: a corrupt or truncated program.
        raise ProgramFormatError(f"{where}: instruction of kind {kind} has no arguments")
    return kind, args


def instruction_value_indices(model: ObjectModel, instruction, where: str) -> list[int]:
    """The value indices an instruction reads or writes, in field order."""
    kind, args = _arguments(model, instruction, where)
    indices: list[int] = []
    for name in INSTRUCTION_VALUE_FIELDS[kind]:
        value = getattr(args, model.field(name))
        if name in _VECTOR_FIELDS:
            indices.extend(model.ints(value))
        else:
            indices.append(value)
    return indices


def _tensor_info(model: ObjectModel, tensor) -> tuple[str | None, bool, bool]:
    """(fully qualified name, external, mutable) of a Tensor table."""
    info = getattr(tensor, model.field("extra_tensor_info"))
    fqn = None if info is None else model.text(getattr(info, model.field("fully_qualified_name")))
    external = info is not None and getattr(info, model.field("location")) == _EXTERNAL
    return fqn, external, getattr(tensor, model.field("allocation_info")) is not None


def tensor_data_ref(model: ObjectModel, tensor, index: int | None = None) -> DataRef | None:
    """Where a Tensor value's bytes live (`reachability.classify_tensor_data`); with `index`,
    where they lived when that was its `data_buffer_idx` (before a renumbering)."""
    _, external, mutable = _tensor_info(model, tensor)
    if index is None:
        index = getattr(tensor, model.field("data_buffer_idx"))
    return classify_tensor_data(index, external=external, mutable=mutable)


def collect_plan_refs(
    model: ObjectModel,
    plan,
    kept: Sequence[int] = (),
    on_tensor: TensorFound | None = None,
) -> PlanRefs:
    """Describes one execution plan for `find_live`. Not modified.

    Args:
        model: The plan's object model.
        plan: The plan.
        kept: More roots: the values of constants the user keeps by name.
        on_tensor: Called for each Tensor value with data, in value order.

    Raises:
        ProgramFormatError: An instruction or value of unknown kind, or without its table.
    """
    name = model.text(plan.name) or ""
    where = f"plan {name!r}"
    roots: list[int] = [*model.ints(plan.inputs), *model.ints(plan.outputs), *kept]
    for chain in plan.chains or ():
        roots.extend(model.ints(chain.inputs))
        roots.extend(model.ints(chain.outputs))
        for instruction in chain.instructions or ():
            roots.extend(instruction_value_indices(model, instruction, where))
    list_items: dict[int, Sequence[int]] = {}
    data_refs: dict[int, DataRef] = {}
    values = plan.values or ()
    for index, evalue in enumerate(values):
        kind, val = model.value(evalue)
        if val is None and kind != "NONE":
            raise ProgramFormatError(f"{where}: value {index} of kind {kind} has no table")
        if kind in VALUE_LIST_KINDS:
            list_items[index] = model.ints(val.items)
        elif kind == "Tensor":
            fqn, external, mutable = _tensor_info(model, val)
            index_field = getattr(val, model.field("data_buffer_idx"))
            ref = classify_tensor_data(index_field, external=external, mutable=mutable)
            if ref is not None:
                data_refs[index] = ref
                if on_tensor is not None:
                    on_tensor(index, val, ref, fqn)
            if is_attribute_root(mutable=mutable, fully_qualified_name=fqn):
                roots.append(index)
    return PlanRefs(
        name=name, num_values=len(values), roots=roots, list_items=list_items, data_refs=data_refs
    )


def check_data_refs(
    plans: Sequence[PlanRefs], sizes: Mapping[DataSpace, int], where: str = ""
) -> None:
    """Checks every data reference of `plans` against the number of entries of its space.

    Args:
        plans: The plans' references.
        sizes: Entries per data space; spaces not in it are not checked.
        where: What to name first in the message (a file), if anything.

    Raises:
        ProgramFormatError: A `data_buffer_idx` points past its space.
    """
    prefix = f"{where}: " if where else ""
    for plan in plans:
        for index, ref in plan.data_refs.items():
            size = sizes.get(ref.space)
            if size is not None and not 0 <= ref.index < size:
                raise ProgramFormatError(
                    f"{prefix}plan {plan.name!r} value {index}: data_buffer_idx {ref.index} "
                    f">= len({ref.space.value} data) {size}"
                )


def remap_plan_values(model: ObjectModel, plan, refs: PlanRefs, live: Sequence[int]) -> None:
    """Compacts `plan.values` to `live` and renumbers every value index in the plan.

    The one renumbering of value indices, in both object models: builds the
    old-to-new map (`reachability.value_remapper`, which checks that each
    patched index was kept), then patches every field named in the module docstring.

    Args:
        model: The plan's object model.
        plan: The plan. Modified in place.
        refs: `collect_plan_refs` of the plan, before any change.
        live: The kept values' old indices, in order.
    """
    remap = value_remapper(refs.name, refs.num_values, live)

    def remap_all(indices) -> list[int]:
        return [remap(i) for i in model.ints(indices)]

    values = plan.values or []
    plan.values = [values[old] for old in live]
    plan.inputs = remap_all(plan.inputs)
    plan.outputs = remap_all(plan.outputs)
    for chain in plan.chains or ():
        chain.inputs = remap_all(chain.inputs)
        chain.outputs = remap_all(chain.outputs)
        for instruction in chain.instructions or ():
            kind, args = _arguments(model, instruction, f"plan {refs.name!r}")
            for name in INSTRUCTION_VALUE_FIELDS[kind]:
                field = model.field(name)
                value = getattr(args, field)
                setattr(args, field, remap_all(value) if name in _VECTOR_FIELDS else remap(value))
    for evalue in plan.values:
        kind, val = model.value(evalue)
        if kind == "OptionalTensorList":
            val.items = [-1 if i == -1 else remap(i) for i in model.ints(val.items)]
        elif kind in VALUE_LIST_KINDS:
            val.items = remap_all(val.items)


def remap_data_indices(
    model: ObjectModel,
    plan,
    refs: PlanRefs,
    live: Sequence[int],
    new_index: Mapping[DataSpace, Mapping[int, int]],
) -> list[tuple[DataRef, Any]]:
    """Renumbers the `data_buffer_idx` of each kept Tensor; the one renumbering of data indices.

    Old indices come from `refs`, a snapshot taken before any change, so a Tensor
    shared by two values is not renumbered twice.

    Args:
        model: The plan's object model.
        plan: The plan, its values already compacted to `live`. Modified in place.
        refs: `collect_plan_refs` of the plan, before any change.
        live: The kept values' old indices: kept value k was old value live[k].
        new_index: Per space, the new index of each kept entry (`new_data_indices`).

    Returns:
        (old data reference, tensor) of each renumbered Tensor, in value order.

    Raises:
        InvariantError: A kept Tensor refers to an entry that was dropped.
    """
    field = model.field("data_buffer_idx")
    renumbered = []
    for new_value, old_value in enumerate(live):
        ref = refs.data_refs.get(old_value)
        if ref is None:
            continue
        tensor = model.value(plan.values[new_value])[1]
        try:
            setattr(tensor, field, new_index[ref.space][ref.index])
        except KeyError:
            raise InvariantError(
                f"plan {refs.name!r} value {old_value}: {ref.space.value} entry "
                f"{ref.index} is used but was dropped"
            ) from None
        renumbered.append((ref, tensor))
    return renumbered
