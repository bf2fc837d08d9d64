"""Find the values and constant-data entries an emitted program can reach.

This module knows nothing about how a program is stored: callers describe each
execution plan as a `PlanRefs` (the in-memory `exir.schema.Program` in
`prune_emitted.py`; a `.pte` file elsewhere), and `find_live` returns a frozen `Liveness`.

Before and after, for a plan whose value 2 is an unused buffer::

    values          [x, w, ub, out]          ->  [x, w, out]
    constant_buffer [<placeholder>, W, UB]   ->  [<placeholder>, W]

Roots, per execution plan (this list is the only place they are named):

- the plan's `inputs` and `outputs`;
- every chain's `inputs` and `outputs`;
- every value index of every instruction: `KernelCall.args`, `DelegateCall.args`,
  `MoveCall.move_from`/`move_to`, `JumpFalseCall.cond_value_index`,
  `FreeCall.value_index`;
- tensors that are both mutable and named (`fully_qualified_name`), which the
  runtime's attribute and training APIs can read by name;
- tensors the user keeps by name (`keep_constants`, `--keep`): callers add each
  Tensor value whose FQN matches a pattern to `PlanRefs.roots` (in memory
  `prune_emitted._kept_values`, on disk `analysis.analyse_file`).

A value is kept if a root reaches it, directly or through the items of an
`IntList`, `TensorList` or `OptionalTensorList` (`-1` is None). A data entry is
kept if a kept value of *any* plan refers to it, since plans share constants.
Everything else is dropped. Entry 0 of `constant_buffer` and of the mutable data
is the runtime's "no data" placeholder: it is never counted, never dropped.
`order_live_data` gives the order both rewrites (in memory and on disk) renumber
the kept entries in.
"""

from __future__ import annotations

import enum
import fnmatch
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from emitter_filter.errors import InvariantError, ProgramFormatError

__all__ = [
    "keep_patterns",
    "DataSpace",
    "DataRef",
    "PlanRefs",
    "Liveness",
    "classify_tensor_data",
    "is_attribute_root",
    "KeepList",
    "find_live",
    "value_remapper",
    "order_live_data",
    "new_data_indices",
]


class DataSpace(enum.Enum):
    """The three places a tensor's bytes can live, with the runtime's own rules."""

    #: `Program.constant_buffer` (the constant segment in a file); entry 0 is a placeholder.
    CONSTANT = "constant"
    #: `EmitterOutput.mutable_data` (the mutable data segment); entry 0 is a placeholder.
    MUTABLE = "mutable"
    #: `EmitterOutput.external_constant_buffer` (`.ptd` files); no placeholder.
    EXTERNAL = "external"

    @property
    def has_placeholder(self) -> bool:
        return self is not DataSpace.EXTERNAL


@dataclass(frozen=True)
class DataRef:
    """Where one Tensor value's bytes live: `space[index]`."""

    space: DataSpace
    index: int


def classify_tensor_data(data_buffer_idx: int, *, external: bool, mutable: bool) -> DataRef | None:
    """Where a Tensor value's bytes live, by the runtime's rules, or None if it has none.

    The rule is the runtime's (`tensor_parser_exec_aten.cpp`), not the emitter's,
    whose caches can hand a mutable tensor a constant index: EXTERNAL first (its
    index may be 0, the external space has no placeholder), then mutable (the
    tensor has `allocation_info`), else constant; index 0 of those two is "no data".

    Args:
        data_buffer_idx: `Tensor.data_buffer_idx`.
        external: `extra_tensor_info.location` is EXTERNAL.
        mutable: `allocation_info` is set.
    """
    if external:
        return DataRef(DataSpace.EXTERNAL, data_buffer_idx)
    if data_buffer_idx == 0:
        return None
    return DataRef(DataSpace.MUTABLE if mutable else DataSpace.CONSTANT, data_buffer_idx)


def is_attribute_root(*, mutable: bool, fully_qualified_name: str | bytes | None) -> bool:
    """Whether a Tensor value is a root because the attribute and training APIs read it by name."""
    return mutable and fully_qualified_name is not None


def keep_patterns(keep_constants) -> tuple[str, ...]:
    """`keep_constants` as a tuple of patterns, checked where the user passes it (the config,
    `pruning()`, and every `KeepList`, so `audit_file`/`prune_file` check it too).

    Raises:
        TypeError: it is a str (one pattern would be taken for its characters), not
            iterable, or holds something that is not a str; the message names it.
    """
    if isinstance(keep_constants, str):
        raise TypeError(
            f"keep_constants={keep_constants!r}: expected a sequence of patterns, not a str"
        )
    try:
        patterns = tuple(keep_constants)
    except TypeError:
        raise TypeError(
            f"keep_constants={keep_constants!r}: expected a sequence of str patterns, "
            f"not {type(keep_constants).__name__}"
        ) from None
    for index, pattern in enumerate(patterns):
        if not isinstance(pattern, str):
            raise TypeError(
                f"keep_constants={keep_constants!r}: expected a sequence of str patterns; "
                f"item {index} is {type(pattern).__name__} {pattern!r}"
            )
    return patterns


class KeepList:
    """The `keep_constants` patterns (`fnmatch`, case-sensitive), matched against FQNs.

    Both sides (in memory and on disk) make a Tensor value a root when one of its
    names matches; `unmatched` lists the patterns that never did, to warn about.
    """

    def __init__(self, patterns: Sequence[str]) -> None:
        self.patterns = keep_patterns(patterns)
        self._any = re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in self.patterns))
        self._matched: set[str] = set()

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def matches(self, names: Iterable[str]) -> bool:
        """Whether any of `names` matches a pattern; notes which patterns did."""
        if not self.patterns:
            return False
        hits = [name for name in names if self._any.match(name)]
        for name in hits:
            self._matched.update(p for p in self.patterns if fnmatch.fnmatchcase(name, p))
        return bool(hits)

    def unmatched(self) -> tuple[str, ...]:
        return tuple(p for p in self.patterns if p not in self._matched)


@dataclass(frozen=True)
class PlanRefs:
    """Everything reachability needs to know about one execution plan.

    Attributes:
        name: The plan's name, for error messages.
        num_values: `len(plan.values)`.
        roots: Value indices the plan uses directly (see the module docstring).
        list_items: For each list value, its item value indices (`-1` is None).
        data_refs: For each Tensor value that has data, where the data lives.
    """

    name: str
    num_values: int
    roots: Sequence[int]
    list_items: Mapping[int, Sequence[int]]
    data_refs: Mapping[int, DataRef]


@dataclass(frozen=True)
class Liveness:
    """The result of `find_live`; plain data, safe to keep after the program changes.

    Attributes:
        live_values: Per plan, in plan order, the kept value indices in ascending order.
        live_data: Per data space, the kept entry indices (placeholders excluded).
    """

    live_values: tuple[tuple[int, ...], ...]
    live_data: Mapping[DataSpace, frozenset[int]]

    def dead_value_count(self, plans: Sequence[PlanRefs]) -> int:
        return sum(
            p.num_values - len(live) for p, live in zip(plans, self.live_values, strict=True)
        )


def _mark_plan(plan: PlanRefs) -> tuple[int, ...]:
    """Walks a plan's values from its roots with an explicit worklist."""
    seen = bytearray(plan.num_values)
    stack = [i for i in reversed(plan.roots)]
    while stack:
        index = stack.pop()
        if index == -1:
            continue
        if not 0 <= index < plan.num_values:
            raise ProgramFormatError(
                f"plan {plan.name!r}: value index {index} outside values (len {plan.num_values})"
            )
        if seen[index]:
            continue
        seen[index] = 1
        items = plan.list_items.get(index)
        if items:
            stack.extend(reversed(items))
    return tuple(i for i in range(plan.num_values) if seen[i])


def find_live(plans: Sequence[PlanRefs]) -> Liveness:
    """Finds the values and data entries reachable from the roots of every plan.

    Args:
        plans: One entry per execution plan, constant methods included. Not modified.

    Returns:
        The kept values per plan and the kept data entries per space.

    Raises:
        ProgramFormatError: A reference points outside the plan's values.
    """
    live_values = tuple(_mark_plan(plan) for plan in plans)
    live_data: dict[DataSpace, set[int]] = {space: set() for space in DataSpace}
    for plan, live in zip(plans, live_values, strict=True):
        for index in live:
            ref = plan.data_refs.get(index)
            if ref is not None:
                live_data[ref.space].add(ref.index)
    for space in DataSpace:
        if space.has_placeholder:
            live_data[space].discard(0)
    return Liveness(
        live_values=live_values,
        live_data={space: frozenset(entries) for space, entries in live_data.items()},
    )


def order_live_data(plans: Sequence[PlanRefs], liveness: Liveness) -> dict[DataSpace, list[int]]:
    """Kept entries of each space, in the order kept values first refer to them.

    Plan by plan, value by value: the order in which the emitter would have
    allocated them had the dead constants never existed. Both rewrites (in memory,
    `prune_emitted.py`; on disk, `ondisk/prune.py`) renumber by it, so each writes what
    ExecuTorch writes for the model without the dead constants. Placeholders are
    left out.

    Args:
        plans: As given to `find_live`. Not modified.
        liveness: `find_live(plans)`.
    """
    order: dict[DataSpace, list[int]] = {space: [] for space in DataSpace}
    seen: dict[DataSpace, set[int]] = {space: set() for space in DataSpace}
    for plan, live in zip(plans, liveness.live_values, strict=True):
        for index in live:
            ref = plan.data_refs.get(index)
            if ref is None or ref.index in seen[ref.space]:
                continue
            if ref.space.has_placeholder and ref.index == 0:
                continue
            seen[ref.space].add(ref.index)
            order[ref.space].append(ref.index)
    return order


def new_data_indices(order: Mapping[DataSpace, Sequence[int]]) -> dict[DataSpace, dict[int, int]]:
    """Old to new index of each kept entry, from `order_live_data`; placeholders stay at 0.

    Both rewrites renumber `data_buffer_idx` by this one map.
    """
    new_index: dict[DataSpace, dict[int, int]] = {}
    for space, kept in order.items():
        first = 1 if space.has_placeholder else 0
        new_index[space] = {old: first + new for new, old in enumerate(kept)}
        if space.has_placeholder:
            new_index[space][0] = 0
    return new_index


def value_remapper(plan_name: str, num_values: int, live: Sequence[int]) -> Callable[[int], int]:
    """The old-to-new map of value indices for a plan whose values are compacted to `live`.

    Both rewrites (in memory and on disk) patch every value index through it; it
    raises `InvariantError` for an index that was dropped, which would be a bug in
    the analysis.
    """
    new_index = [-1] * num_values
    for new, old in enumerate(live):
        new_index[old] = new

    def remap(old: int) -> int:
        new = new_index[old]
        if new < 0:
            raise InvariantError(f"plan {plan_name!r}: value {old} is used but was dropped")
        return new

    return remap
