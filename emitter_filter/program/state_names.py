"""Name emitted values and data entries after the model state they were built from.

The emitted program names almost nothing: only external constants and named
mutable buffers carry a `fully_qualified_name`. The names are in the
`ExportedProgram`s instead, and are found two ways:

- In process (`PlaceholderNames`), by position: `emit_program` emits each top-level
  placeholder of a method's graph, in graph order, as that plan's values 0, 1, ...
  (`exir/emit/_emitter.py`, `placeholder`), so value `i` is the `i`-th placeholder,
  whose graph signature gives its FQN and kind (`inputs_to_parameters`,
  `inputs_to_buffers`, `inputs_to_lifted_tensor_constants`, `buffers_to_mutate`).
  Each named value's shape is checked against the placeholder's.
- On disk (`StateFile`), by content: a `torch.export` `.pt2` or an ETRecord of the
  same model holds the state tensors, not the emitted program; a dead entry is
  named after every state tensor with its shape and exactly its bytes (the
  emitter stores identical tensors once, so one entry can have several names).
  Only the tensors whose size a dead entry has are converted to bytes.

Importing this module is cheap; `torch` loads only when a file is read
(`ondisk/read/state_file.py`) and its tensors compared.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from emitter_filter.errors import InvariantError
from emitter_filter.program.names import ConstantName

if TYPE_CHECKING:
    from torch.export import ExportedProgram
    from torch.fx import Node

__all__ = [
    "PlaceholderNames",
    "StateFile",
    "StateTensor",
    "name_entries",
    "program_state",
]

logger = logging.getLogger(__name__)


def _signature_names(exported_program) -> dict[str, tuple[str, str]]:
    """Placeholder target -> (FQN, kind), in one pass over the graph signature's input specs.

    The same as its `inputs_to_parameters`, `inputs_to_buffers` and
    `inputs_to_lifted_tensor_constants`, which each build a dict per access.
    """
    from torch.export.graph_signature import InputKind

    signature = exported_program.graph_signature
    mutated = set(signature.buffers_to_mutate.values())
    kinds = {
        InputKind.PARAMETER: "parameter",
        InputKind.BUFFER: "buffer",
        InputKind.CONSTANT_TENSOR: "constant",
    }
    names: dict[str, tuple[str, str]] = {}
    for spec in signature.input_specs:
        kind = kinds.get(spec.kind)
        if kind is None or spec.target is None:
            continue
        if kind == "buffer" and spec.target in mutated:
            kind = "mutable_buffer"
        names[spec.arg.name] = (spec.target, kind)
    return names


class PlaceholderNames:
    """The names of each plan's placeholder values, from the methods that were emitted.

    Built from the `ExportedProgram`s `emit_program` was given (by method name);
    a plan's names are computed on its first use, so a prune that never asks
    pays nothing. Plans without a program (constant methods) have none.
    """

    def __init__(self, programs: Mapping[str, ExportedProgram]) -> None:
        self._programs = programs
        self._plans: dict[str, list[tuple[ConstantName | None, Node]]] = {}

    def _placeholders(self, plan: str) -> list[tuple[ConstantName | None, Node]]:
        """(name, node) of each placeholder of `plan`'s graph, in graph order."""
        found = self._plans.get(plan)
        if found is None:
            program = self._programs.get(plan)
            found = []
            if program is not None:
                names = _signature_names(program)
                for node in program.graph.nodes:
                    if node.op != "placeholder":
                        break
                    fqn_kind = names.get(node.target)
                    name = None if fqn_kind is None else ConstantName(*fqn_kind, plan)
                    found.append((name, node))
            self._plans[plan] = found
        return found

    def name_value(self, plan: str, value_index: int, sizes: Sequence[int]) -> ConstantName | None:
        """The state that value `value_index` of `plan` was emitted from; None for an input.

        Raises:
            InvariantError: The value's shape is not its placeholder's: the
                emitter no longer emits placeholders first, in order.
        """
        placeholders = self._placeholders(plan)
        if value_index >= len(placeholders):
            return None
        name, node = placeholders[value_index]
        if name is None:
            return None
        shape = getattr(node.meta.get("spec"), "shape", None)
        if shape is not None and tuple(sizes) != tuple(shape):
            raise InvariantError(
                f"plan {plan!r} value {value_index}: sizes {list(sizes)} are not those of "
                f"placeholder {name.name!r} {list(shape)}: values no longer follow placeholders"
            )
        return name

    def delegated_state(self, pattern: str) -> tuple[str, ...]:
        """Where the state whose FQN matches `pattern` went, if a delegate took it.

        A parameter lowered into a delegate (XNNPACK) is in the delegate's own
        program, not in the method's values, so `keep_constants` cannot match it;
        each match is described for the warning, e.g. `parameter 'linear.weight'
        was lowered into the XnnpackBackend delegate lowered_module_0 of plan 'forward'`.
        """
        import fnmatch

        found = []
        for plan, program in self._programs.items():
            for path, module in program.graph_module.named_modules():
                original = getattr(module, "original_module", None)
                backend = getattr(module, "backend_id", None)
                if original is None or backend is None:
                    continue
                for fqn, kind in _signature_names(original).values():
                    if fnmatch.fnmatchcase(fqn, pattern):
                        found.append(
                            f"{kind.replace('_', ' ')} {fqn!r} was lowered into "
                            f"the {backend} delegate {path} of plan {plan!r}"
                        )
        return tuple(found)


def name_entries(
    names: PlaceholderNames,
    users: Mapping[tuple[str, int], Sequence[tuple[str, int, Sequence[int]]]],
) -> dict[tuple[str, int], tuple[ConstantName, ...]]:
    """Names each data entry after the placeholders of the values that used it.

    Args:
        names: The emitted methods' placeholder names.
        users: Per (space, index), every (plan, value index, sizes) that referred to it.
    """
    named: dict[tuple[str, int], tuple[ConstantName, ...]] = {}
    for entry, values in users.items():
        found: dict[str, ConstantName] = {}
        for plan, value_index, sizes in values:
            name = names.name_value(plan, value_index, sizes)
            if name is not None:
                kind = "mutable_buffer" if entry[0] == "mutable" else name.kind
                found.setdefault(name.name, ConstantName(name.name, kind, plan))
        if found:
            named[entry] = tuple(found.values())
    return named


@dataclass(frozen=True)
class StateTensor:
    """One state tensor of a `.pt2` or ETRecord: its name, shape, size and the tensor."""

    name: ConstantName
    shape: tuple[int, ...]
    nbytes: int
    tensor: object


def _stored_bytes(tensor) -> bytes:
    """The bytes the emitter writes for a state tensor.

    Mirrors `placeholder` in `exir/emit/_emitter.py` (keep in sync): contiguous
    or channels-last as is, else made contiguous; a view is cloned to its own storage.
    """
    import torch

    tensor = tensor.detach()
    if not (tensor.is_contiguous() or tensor.is_contiguous(memory_format=torch.channels_last)):
        tensor = tensor.contiguous()
    if tensor.nbytes != tensor.untyped_storage().nbytes():
        tensor = tensor.clone()
    return bytes(tensor.untyped_storage())


class StateFile:
    """The state tensors of a `.pt2` or an ETRecord, to name a file's entries by content."""

    def __init__(self, path: str, tensors: Iterable[StateTensor]) -> None:
        self.path = path
        self._by_name: dict[str, ConstantName] = {}
        self._by_size: dict[tuple[int, tuple[int, ...]], list[StateTensor]] = {}
        for state in tensors:
            self._by_name.setdefault(state.name.name, state.name)
            self._by_size.setdefault((state.nbytes, state.shape), []).append(state)
        self._bytes: dict[int, bytes] = {}

    def name_of(self, fqn: str) -> ConstantName | None:
        """What the file says of a name the program carries (an external constant's)."""
        return self._by_name.get(fqn)

    def match(
        self, nbytes: int, shapes: Iterable[tuple[int, ...]], read: Callable[[], bytes]
    ) -> tuple[ConstantName, ...]:
        """Every state tensor of one of `shapes` whose bytes are the entry's.

        Args:
            nbytes: The entry's size.
            shapes: The shapes of the values that refer to it.
            read: Returns the entry's bytes; called only if some tensor has its size.
        """
        candidates = [
            state
            for shape in dict.fromkeys(shapes)
            for state in self._by_size.get((nbytes, shape), ())
        ]
        if not candidates:
            return ()
        data = read()
        found: dict[str, ConstantName] = {}
        for state in candidates:
            key = id(state)
            if key not in self._bytes:
                self._bytes[key] = _stored_bytes(state.tensor)
            if self._bytes[key] == data:
                found.setdefault(state.name.name, state.name)
        return tuple(found.values())

    def match_delegated(
        self, nbytes: int, shape: tuple[int, ...] | None, read: Callable[[], bytes]
    ) -> tuple[ConstantName, ...]:
        """Every state tensor a delegate stored as this named-data entry, in any order of
        its dims: XNNPACK keeps a weight under the SHA-256 of its bytes as it packs them, a
        convolution's permuted to [out, h, w, in] (`shape`, as its graph reads it; None:
        unknown, the state tensor's own order only).

        Args:
            nbytes: The entry's size.
            shape: The dims the delegate reads the entry as, if known.
            read: Returns the entry's bytes; called only if some tensor has its size.
        """
        candidates = [
            state
            for (size, state_shape), states in self._by_size.items()
            if size == nbytes and (shape is None or sorted(state_shape) == sorted(shape))
            for state in states
        ]
        if not candidates:
            return ()
        data = read()
        found: dict[str, ConstantName] = {}
        for state in candidates:
            orders = [tuple(range(len(state.shape)))] if shape is None else _orders(state, shape)
            if any(_permuted_bytes(state.tensor, order) == data for order in orders):
                found.setdefault(state.name.name, state.name)
        return tuple(found.values())


def _orders(state: StateTensor, shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The orders of `state`'s dims that give `shape`, its own order first."""
    import itertools

    return [
        order
        for order in itertools.permutations(range(len(state.shape)))
        if tuple(state.shape[i] for i in order) == tuple(shape)
    ]


def _permuted_bytes(tensor, order: tuple[int, ...]) -> bytes:
    """The bytes of `tensor` with its dims in `order`, contiguous."""
    if order == tuple(range(len(order))):
        return _stored_bytes(tensor)
    return bytes(tensor.detach().permute(order).contiguous().untyped_storage())


def program_state(plan: str | None, exported_program) -> list[StateTensor]:
    """The state tensors of one exported program, each named as `plan` reads it."""
    names = _signature_names(exported_program)
    state = {**exported_program.state_dict, **exported_program.constants}
    tensors = []
    for spec in exported_program.graph_signature.input_specs:
        fqn_kind = names.get(spec.arg.name)
        tensor = state.get(spec.target) if spec.target is not None else None
        if fqn_kind is None or tensor is None or not hasattr(tensor, "untyped_storage"):
            continue
        tensors.append(
            StateTensor(ConstantName(*fqn_kind, plan), tuple(tensor.shape), tensor.nbytes, tensor)
        )
    return tensors
