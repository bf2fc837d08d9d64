"""The structural proof of the hook's prune: each plan reads, after it, what it read before.

The prune rewrites ExecuTorch's `EmitterOutput` in place before anything is serialized, so
the file side's proof (`ondisk/analyse/proof.py`, on bytes) would need a serialization more.
This one reads the same things on the object model: `read_program` before the prune (plain
tuples, nothing the prune can change), again after, and `prove_pruned` compares them item by
item. Per plan: its inputs and outputs; each instruction in chain order (the operator by name
and overload, the delegate by backend id, compile specs and blob); every value these reach,
numbered in order of first use (a dropped or renumbered value is no difference), its fields
but `data_buffer_idx`; each tensor's data as the runtime resolves it (the constant or mutable
`Buffer`'s bytes, or the `.ptd` entry of its FQN, per tag); and each named-data key the plan's
delegates read (every key for a blob no reader in `delegates/` reads) where the runtime finds
it, in the `.pte` and in each `.ptd`: its bytes, alignment and layout.

Cheap: the prune moves objects and never copies bytes, so a weight before and after is the
same `bytes` object, and `==` of an object with itself is O(1) (CPython's bytes and tuple
compare look at identity first); only an object that changed is compared by value.

`Journal` keeps every field the prune assigns, so that a prune the proof refuses is undone
and the program written as ExecuTorch writes it (the hook's fail-safe).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from emitter_filter.errors import InvalidOutputError, InvariantError
from emitter_filter.inprocess.named_data import BlobKeys, blob_named_keys
from emitter_filter.program.object_models import EXIR_SCHEMA
from emitter_filter.program.plan_indices import (
    INSTRUCTION_VALUE_FIELDS,
    VALUE_LIST_KINDS,
    tensor_data_ref,
)
from emitter_filter.program.reachability import DataSpace

__all__ = ["PruneProof", "read_program", "prove_pruned", "Journal"]

# One item a plan reads: (what, value), the value plain data or a bytes object.
_Item = tuple[str, object]


_FIELD_NAMES: dict[type, tuple[str, ...] | None] = {}
_SCALARS = frozenset({int, float, bool, str, bytes, type(None)})


def _field_names(kind: type) -> tuple[str, ...] | None:
    """A dataclass's field names (None for any other type), looked up once per type."""
    if kind not in _FIELD_NAMES:
        found = dataclasses.is_dataclass(kind)
        _FIELD_NAMES[kind] = tuple(f.name for f in dataclasses.fields(kind)) if found else None
    return _FIELD_NAMES[kind]


def _plain(value) -> object:
    """An `exir.schema` object as nested tuples, compared with `==`; bytes as themselves."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is list or kind is tuple:
        return tuple(v if type(v) is int else _plain(v) for v in value)
    names = _field_names(kind)
    if names is None:
        return value
    return (kind.__name__, *(_plain(getattr(value, n)) for n in names))


def _entry(entries, index: int) -> object:
    """The bytes of a `Buffer` list's entry, or why there are none."""
    if entries is None or not 0 <= index < len(entries):
        return ("out of range", index)
    return entries[index].storage


class _PlanReads:
    """The items one plan reads, values numbered in order of first use."""

    def __init__(self, emitter_output, plan, named: Mapping[str, object], keys: BlobKeys):
        self.output, self.plan, self.named, self.keys = emitter_output, plan, named, keys
        self.ids: dict[int, int] = {}
        self.found: list[_Item] = []

    def value(self, index: int) -> int:
        """The value's number in this plan; describes it the first time."""
        if index in self.ids:
            return self.ids[index]
        number = self.ids[index] = len(self.ids)
        values = self.plan.values
        if not 0 <= index < len(values):
            self.found.append((f"value {number}", ("out of range",)))
            return number
        kind, val = EXIR_SCHEMA.value(values[index])
        what = f"value {number} ({kind})"
        if kind in VALUE_LIST_KINDS:
            items = tuple(-1 if i < 0 else self.value(i) for i in val.items)
            self.found.append((what, (kind, items)))
        elif kind == "Tensor":
            names = (n for n in _field_names(type(val)) or () if n != "data_buffer_idx")
            self.found.append((what, tuple((n, _plain(getattr(val, n))) for n in names)))
            self._tensor_data(what, val)
        else:
            self.found.append((what, _plain(val)))
        return number

    def _tensor_data(self, what: str, tensor) -> None:
        ref = tensor_data_ref(EXIR_SCHEMA, tensor)
        if ref is None:
            return
        output = self.output
        if ref.space is DataSpace.CONSTANT:
            data = _entry(output.program.constant_buffer, ref.index)
        elif ref.space is DataSpace.MUTABLE:
            data = _entry(output.mutable_data, ref.index)
        else:
            # The runtime finds an external tensor by its FQN in the `.ptd` of each tag.
            fqn = tensor.extra_tensor_info.fully_qualified_name
            buffers = output.external_constant_buffer
            tags = output.external_constant_map or {}
            data = tuple(
                (tag, buffers[i] if 0 <= i < len(buffers) else ("out of range", i))
                for tag in sorted(tags)
                if (i := tags[tag].get(fqn)) is not None
            )
        self.found.append((f"{what} data", data))

    def _delegate(self, index: int) -> object:
        delegates = self.plan.delegates
        if not 0 <= index < len(delegates):
            return ("delegate out of range", index)
        delegate = delegates[index]
        return (delegate.id, _plain(delegate.compile_specs), self._blob(delegate))

    def _blob(self, delegate) -> object:
        processed, inline = delegate.processed, self.output.program.backend_delegate_data
        if processed.location != 0 or not 0 <= processed.index < len(inline):
            return ("not inline", _plain(processed))
        return inline[processed.index].data

    def _named_data(self) -> Iterator[_Item]:
        """Each key the plan's delegates may read (all are initialised at load), where found."""
        read: dict[str, None] = {}
        for delegate in self.plan.delegates:
            blob = self._blob(delegate)
            keys = (
                blob_named_keys(delegate.id, blob, self.keys) if isinstance(blob, bytes) else None
            )
            read.update(dict.fromkeys(sorted(self.named) if keys is None else keys))
        for key in read:
            yield (f"named data {key!r}", self.named.get(key, ("missing",)))

    def items(self) -> Iterator[_Item]:
        plan, value = self.plan, self.value
        yield ("inputs", tuple(value(i) for i in plan.inputs))
        for chain_number, chain in enumerate(plan.chains):
            where = f"chain {chain_number}"
            yield (f"{where} inputs", tuple(value(i) for i in chain.inputs))
            for number, instruction in enumerate(chain.instructions):
                yield (f"{where} instruction {number}", self._instruction(instruction))
                yield from self._drain()
            yield (f"{where} outputs", tuple(value(i) for i in chain.outputs))
        yield ("outputs", tuple(value(i) for i in plan.outputs))
        yield ("container_meta_type", _plain(plan.container_meta_type))
        yield ("non_const_buffer_sizes", tuple(plan.non_const_buffer_sizes))
        yield from self._drain()
        yield from self._named_data()

    def _instruction(self, instruction) -> tuple:
        kind, args = EXIR_SCHEMA.instruction(instruction)
        value = self.value
        if kind == "KernelCall":
            operators = self.plan.operators
            op = args.op_index
            name = _plain(operators[op]) if 0 <= op < len(operators) else ("out of range", op)
            return (kind, name, tuple(value(i) for i in args.args))
        if kind == "DelegateCall":
            called = self._delegate(args.delegate_index)
            return (kind, called, tuple(value(i) for i in args.args))
        if kind == "JumpFalseCall":
            return (kind, value(args.cond_value_index), args.destination_instruction)
        if kind == "MoveCall":
            return (kind, value(args.move_from), value(args.move_to))
        if kind == "FreeCall":
            return (kind, value(args.value_index))
        return (kind, _plain(args))

    def _drain(self) -> Iterator[_Item]:
        found, self.found = self.found, []
        yield from found


def _named_entries(named_data) -> dict[str, object]:
    """Where the runtime finds each key of the store: (file tag, its bytes, alignment, layout)
    of every file holding it, the `.pte` (tag None) first."""
    if named_data is None:
        return {}
    buffers = named_data.buffers
    found: dict[str, list] = {}
    locations = [(None, named_data.pte_data)]
    locations += sorted(named_data.external_data.items())
    for tag, entries in locations:
        for key, entry in entries.items():
            index = entry.buffer_index
            data = buffers[index] if 0 <= index < len(buffers) else ("out of range", index)
            found.setdefault(key, []).append(
                (tag, data, entry.alignment, _plain(entry.tensor_layout))
            )
    return {key: tuple(places) for key, places in found.items()}


def read_program(emitter_output, named_data, keys: BlobKeys) -> dict[str, list[_Item]]:
    """What each plan of an `EmitterOutput` reads, by plan name: plain tuples that keep
    (not copy) the bytes objects. Not modified.

    Args:
        emitter_output: The emitted program.
        named_data: The `NamedDataStoreOutput` serialized with it, or None.
        keys: The blobs read so far (`blob_named_keys`); the blobs read here are added.

    Raises:
        ProgramFormatError: A readable backend's blob is malformed.
    """
    named = _named_entries(named_data)
    return {
        plan.name: list(_PlanReads(emitter_output, plan, named, keys).items())
        for plan in emitter_output.program.execution_plan
    }


def _difference(old: list[_Item], new: list[_Item]) -> str | None:
    """The first item the two read differently, or None."""
    if old == new:
        return None
    for (what, left), (what_new, right) in zip(old, new, strict=False):
        if what != what_new:
            return f"{what_new} where it read {what}"
        if left != right:
            return what
    longer = old if len(old) > len(new) else new
    return f"{longer[min(len(old), len(new))][0]} (read on one side only)"


def prove_pruned(before: Mapping[str, list[_Item]], after: Mapping[str, list[_Item]]) -> None:
    """Refuses a prune after which a plan reads other than before (`read_program` of each).

    Raises:
        InvalidOutputError: The first plan that differs, and the item.
    """
    if list(before) != list(after):
        raise InvalidOutputError(
            f"not pruned: its plans {list(after)} are not the ones emitted {list(before)} "
            "(a bug of emitter-filter's prune)"
        )
    for name, old in before.items():
        difference = _difference(old, after[name])
        if difference is not None:
            raise InvalidOutputError(
                f"method {name!r} reads other bytes after the prune than before: "
                f"{difference} (a bug of emitter-filter's prune)"
            )


class Journal:
    """Every field the prune assigns (`prune_emitted`), as it is now: `undo` puts it back.

    Lists are kept as copies, so that one changed in place comes back too.
    """

    def __init__(self, emitter_output) -> None:
        program = emitter_output.program
        saved: list[tuple[Any, str]] = [(program, "constant_buffer")]
        saved += [
            (emitter_output, name)
            for name in ("mutable_data", "external_constant_buffer", "external_constant_map")
        ]
        for plan in program.execution_plan:
            saved += [(plan, "values"), (plan, "inputs"), (plan, "outputs")]
            for chain in plan.chains:
                saved += [(chain, "inputs"), (chain, "outputs")]
                for instruction in chain.instructions:
                    args = instruction.instr_args
                    fields = INSTRUCTION_VALUE_FIELDS.get(type(args).__name__, ())
                    saved += [(args, name) for name in fields]
            for evalue in plan.values:
                kind, val = EXIR_SCHEMA.value(evalue)
                if kind in VALUE_LIST_KINDS:
                    saved.append((val, "items"))
                elif kind == "Tensor":
                    saved.append((val, "data_buffer_idx"))
        self._saved = [(obj, name, _copy(getattr(obj, name))) for obj, name in saved]

    def undo(self) -> None:
        for obj, name, value in self._saved:
            setattr(obj, name, _copy(value))


def _copy(value):
    if isinstance(value, list):
        return list(value)
    if isinstance(value, dict):
        return {k: dict(v) if isinstance(v, dict) else v for k, v in value.items()}
    return value


class PruneProof:
    """The hook's proof of one prune: what each plan reads, and a `Journal`, taken before it
    changes anything (`take`), `check`ed after it.

    A prune that finds nothing to drop changes nothing and never calls `take`: the program
    is written as emitted, so there is nothing to prove (and nothing is read for it).

    Args:
        emitter_output: The emitted program, not yet pruned. Not modified.
        named_data: The named data to be serialized with it. Not modified.
        blobs: The blobs read so far (`named_data.blob_named_keys`).
    """

    def __init__(self, emitter_output, named_data, blobs: BlobKeys) -> None:
        self._output, self._named_data, self._blobs = emitter_output, named_data, blobs
        self._before: dict[str, list[_Item]] | None = None
        self._journal: Journal | None = None

    def take(self) -> None:
        """Reads what each plan reads, and journals the fields the prune assigns: called
        just before the prune changes the program (`prune_emitter_output`'s `before_change`)."""
        if self._before is None:
            self._before = read_program(self._output, self._named_data, self._blobs)
            self._journal = Journal(self._output)

    def check(self, named_data) -> None:
        """Refuses the prune if a plan reads other than before; undoes it first.

        Args:
            named_data: The named data the pruned program is to be serialized with.

        Raises:
            InvalidOutputError: `prove_pruned`'s refusal, the prune undone.
            InvariantError: The prune could not be undone.
        """
        if self._before is None:
            if named_data is self._named_data:
                return  # Nothing was changed: the program is written as it was emitted.
            self.take()  # Only named data dropped: the program is as it was before.
        try:
            prove_pruned(self._taken(), read_program(self._output, named_data, self._blobs))
        except InvalidOutputError:
            self.undo()
            raise

    def undo(self) -> None:
        """Puts back every field the prune assigned, and proves that it did.

        Raises:
            InvariantError: A plan still reads other than before.
        """
        if self._journal is None:
            return  # Not taken: the prune changed nothing.
        self._journal.undo()
        try:
            prove_pruned(self._taken(), read_program(self._output, self._named_data, self._blobs))
        except InvalidOutputError as error:
            raise InvariantError(f"the prune could not be undone: {error}") from error

    def _taken(self) -> dict[str, list[_Item]]:
        if self._before is None:
            raise InvariantError("the prune's proof was checked before it was taken")
        return self._before
