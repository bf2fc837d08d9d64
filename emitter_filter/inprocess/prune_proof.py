"""The structural proof of the hook's prune: each plan reads, after it, what it read before.

The prune rewrites ExecuTorch's `EmitterOutput` in place before anything is serialized, so
the file side's proof (`ondisk/analyse/proof.py`, on bytes) would need a serialization more.
What the prune changes is indices only: each plan's `values` compacted and every value index
renumbered (the plan's and each chain's inputs and outputs, instruction arguments, list
items), the data lists compacted and every `data_buffer_idx` renumbered, and the named data
no delegate reaches left out of a new store. Every object it keeps is the same object (it
moves objects, never copies them), and it assigns no other field.

So `Journal` keeps the old value of every field the prune assigns, taken just before it
changes anything (`PruneProof.take`), and the proof walks each plan as it was (the journal's
indices over the same objects) and as it is, at once, pairing each index it reaches: per
plan, its inputs and outputs, each chain's, each instruction's arguments, in chain order;
each value reached, which must be the very `EValue` it was, and the same old index must
always become the same new one (a renumbering, not a swap); each list's items, item by item;
each tensor's data, the very bytes it read (the constant or mutable `Buffer`, or the `.ptd`
entry of its FQN, per tag); each named-data key the plan's delegates read (every key for a
blob no reader in `delegates/` reads), the same bytes, alignment and layout in the `.pte`
and in each `.ptd`. Nothing is rebuilt to be compared: the cost is the indices'.

A field the prune assigned that the journal does not hold would go unseen here:
tests/inprocess/test_proof_prune.py checks, on every case, that after `Journal.undo` the
whole program is as it was before the prune, field by field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from emitter_filter.errors import InvalidOutputError, InvariantError
from emitter_filter.inprocess.named_data import BlobKeys, blob_named_keys
from emitter_filter.program.object_models import EXIR_SCHEMA
from emitter_filter.program.plan_indices import (
    INSTRUCTION_VALUE_FIELDS,
    VALUE_LIST_KINDS,
    tensor_data_ref,
)
from emitter_filter.program.reachability import DataRef, DataSpace

__all__ = ["PruneProof", "Journal"]


class Journal:
    """Every field the prune assigns (`prune_emitted`), as it is now: `undo` puts it back,
    `before` says what it was.

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
        # By the object's identity: each object is held in `_saved`, so no id is reused.
        self._before = {(id(obj), name): value for obj, name, value in self._saved}

    def before(self, obj, name: str):
        """What `obj.name` was when the journal was taken (a field it holds)."""
        return self._before[id(obj), name]

    def undo(self) -> None:
        for obj, name, value in self._saved:
            setattr(obj, name, _copy(value))

    def changed(self) -> str | None:
        """The first field that is not what it was, or None."""
        for obj, name, value in self._saved:
            if getattr(obj, name) != value:
                return f"{type(obj).__name__}.{name}"
        return None


def _copy(value):
    if isinstance(value, list):
        return list(value)
    if isinstance(value, dict):
        return {k: dict(v) if isinstance(v, dict) else v for k, v in value.items()}
    return value


def _text(what: tuple) -> str:
    """Where in a plan, from its parts (joined only for a message: most are never shown)."""
    return " ".join(str(part) for part in what)


class _Differs(Exception):
    """What a plan reads differently after the prune: the message's last part."""


def _same(old, new) -> bool:
    """The same bytes: the very object (a prune never copies), or equal ones."""
    return old is new or old == new


def _entry(entries, index: int) -> object:
    """The bytes of a `Buffer` list's entry, or why there are none."""
    if entries is None or not 0 <= index < len(entries):
        return ("out of range", index)
    return entries[index].storage


class _Data:
    """The data a tensor reads, before the prune (the journal's lists) and after it."""

    def __init__(self, emitter_output, journal: Journal | None) -> None:
        program = emitter_output.program
        self.after = (
            program.constant_buffer,
            emitter_output.mutable_data,
            emitter_output.external_constant_buffer,
            emitter_output.external_constant_map or {},
        )
        if journal is None:
            self.before = self.after
        else:
            self.before = (
                journal.before(program, "constant_buffer"),
                journal.before(emitter_output, "mutable_data"),
                journal.before(emitter_output, "external_constant_buffer"),
                journal.before(emitter_output, "external_constant_map") or {},
            )

    def read(self, tensor, ref: DataRef | None, after: bool) -> object:
        """The bytes `tensor` reads where `ref` says (`tensor_data_ref`), in the program
        before or after."""
        constant, mutable, external, tags = self.after if after else self.before
        if ref is None:
            return None
        if ref.space is DataSpace.CONSTANT:
            return _entry(constant, ref.index)
        if ref.space is DataSpace.MUTABLE:
            return _entry(mutable, ref.index)
        # The runtime finds an external tensor by its FQN in the `.ptd` of each tag.
        fqn = tensor.extra_tensor_info.fully_qualified_name
        return tuple(
            (tag, external[i] if 0 <= i < len(external) else ("out of range", i))
            for tag in sorted(tags)
            if (i := tags[tag].get(fqn)) is not None
        )


class _Plan:
    """One plan as it was and as it is, paired index by index (a `_Differs` where not)."""

    def __init__(self, plan, journal: Journal | None, data: _Data) -> None:
        self.plan, self.journal, self.data = plan, journal, data
        self.old_values = self._before(plan, "values")
        self.new_of: dict[int, int] = {}
        self.old_of: dict[int, int] = {}

    def _before(self, obj, name: str):
        return getattr(obj, name) if self.journal is None else self.journal.before(obj, name)

    def indices(self, obj, name: str, what: tuple) -> None:
        """Pairs the value indices of `obj.name` (one, or a list) before and after."""
        old, new = self._before(obj, name), getattr(obj, name)
        if isinstance(old, int) and isinstance(new, int):
            self.value(old, new, what)
            return
        if isinstance(old, int) or isinstance(new, int):
            raise _Differs(f"{_text(what)}: {old!r} is now {new!r}")
        if len(old) != len(new):
            raise _Differs(f"{_text(what)}: {len(old)} values, now {len(new)}")
        for left, right in zip(old, new, strict=True):
            self.value(left, right, what)

    def value(self, old: int, new: int, what: tuple) -> None:
        """Pairs value `old` before with `new` after: the same `EValue`, its indices paired."""
        paired = self.new_of.get(old)
        if paired is not None:  # Reached before: the same value must be reached.
            if paired != new:
                raise _Differs(f"{_text(what)}: value {old} is now value {new}, and value {paired}")
            return
        if old == -1 or new == -1:  # None, in an OptionalTensorList
            if old != new:
                raise _Differs(f"{_text(what)}: value {old} is now {new}")
            return
        if new in self.old_of:
            raise _Differs(
                f"{_text(what)}: value {old} is now value {new}, which another value became"
            )
        self.new_of[old], self.old_of[new] = new, old
        values = self.plan.values
        if not (0 <= old < len(self.old_values) and 0 <= new < len(values)):
            raise _Differs(f"{_text(what)}: value {old} (now {new}) out of range")
        evalue = self.old_values[old]
        if evalue is not values[new]:
            raise _Differs(f"{_text(what)}: value {old} is now value {new}, another value")
        kind, val = EXIR_SCHEMA.value(evalue)
        if kind in VALUE_LIST_KINDS:
            self.indices(val, "items", ("value", old, f"({kind})", "items"))
        elif kind == "Tensor":
            ref = tensor_data_ref(EXIR_SCHEMA, val)
            index = self._before(val, "data_buffer_idx")
            if ref is None and index == 0:
                return  # No data, before or after (an activation).
            before = self.data.read(val, tensor_data_ref(EXIR_SCHEMA, val, index), after=False)
            if not _same(before, self.data.read(val, ref, after=True)):
                raise _Differs(f"value {old} (Tensor) data")

    def walk(self) -> None:
        """Pairs everything the plan reads, from its inputs to its outputs, in chain order."""
        plan = self.plan
        self.indices(plan, "inputs", ("inputs",))
        for chain_number, chain in enumerate(plan.chains):
            self.indices(chain, "inputs", ("chain", chain_number, "inputs"))
            for number, instruction in enumerate(chain.instructions):
                args = instruction.instr_args
                for name in INSTRUCTION_VALUE_FIELDS.get(type(args).__name__, ()):
                    self.indices(args, name, ("chain", chain_number, "instruction", number, name))
            self.indices(chain, "outputs", ("chain", chain_number, "outputs"))
        self.indices(plan, "outputs", ("outputs",))


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
            found.setdefault(key, []).append((tag, data, entry.alignment, entry.tensor_layout))
    return {key: tuple(places) for key, places in found.items()}


def _read_keys(emitter_output, plan, every: Sequence[str], keys: BlobKeys) -> list[str]:
    """The named-data keys the plan's delegates may read (all are initialised at load);
    `every` key for a blob no reader reads."""
    inline = emitter_output.program.backend_delegate_data
    read: dict[str, None] = {}
    for delegate in plan.delegates:
        processed = delegate.processed
        inside = processed.location == 0 and 0 <= processed.index < len(inline)
        blob = inline[processed.index].data if inside else None
        found = blob_named_keys(delegate.id, blob, keys) if isinstance(blob, bytes) else None
        read.update(dict.fromkeys(sorted(every) if found is None else found))
    return list(read)


def _named_data_difference(plan_keys: list[str], before: Mapping, after: Mapping) -> str | None:
    """The first key a plan reads that is not where it was (`_named_entries` of each store)."""
    for key in plan_keys:
        old, new = before.get(key, ("missing",)), after.get(key, ("missing",))
        if len(old) != len(new) or not all(
            a[0] == b[0] and _same(a[1], b[1]) and a[2:] == b[2:]
            for a, b in zip(old, new, strict=True)
        ):
            return f"named data {key!r}"
    return None


class PruneProof:
    """The hook's proof of one prune: a `Journal` taken just before it changes anything
    (`take`), `check`ed after it.

    A prune that finds nothing to drop changes nothing and never calls `take`: the program
    is written as emitted, so there is nothing to prove.

    Args:
        emitter_output: The emitted program, not yet pruned. Not modified.
        named_data: The named data to be serialized with it. Not modified.
        blobs: The blobs read so far (`named_data.blob_named_keys`).
    """

    def __init__(self, emitter_output, named_data, blobs: BlobKeys) -> None:
        self._output, self._named_data, self._blobs = emitter_output, named_data, blobs
        self._journal: Journal | None = None

    def take(self) -> None:
        """Journals every field the prune assigns: called just before it changes the
        program (`prune_emitter_output`'s `before_change`)."""
        if self._journal is None:
            self._journal = Journal(self._output)

    def check(self, named_data) -> None:
        """Refuses the prune if a plan reads other than before; undoes it first.

        Args:
            named_data: The named data the pruned program is to be serialized with (the
                store itself when none was dropped).

        Raises:
            InvalidOutputError: The first plan that differs, and the item; the prune undone.
            InvariantError: The prune could not be undone.
        """
        if self._journal is None and named_data is self._named_data:
            return  # Nothing was changed: the program is written as it was emitted.
        difference = self._difference(named_data)
        if difference is not None:
            self.undo()
            raise InvalidOutputError(
                f"method {difference[0]!r} reads other bytes after the prune than before: "
                f"{difference[1]} (a bug of emitter-filter's prune)"
            )

    def _difference(self, named_data) -> tuple[str, str] | None:
        """(plan, item) of the first item a plan reads differently, or None."""
        output, journal = self._output, self._journal
        data = _Data(output, journal)
        dropped = named_data is not self._named_data
        before = _named_entries(self._named_data) if dropped else {}
        after = _named_entries(named_data) if dropped else {}
        for plan in output.program.execution_plan:
            try:
                if journal is not None:  # Else only named data was dropped.
                    _Plan(plan, journal, data).walk()
            except _Differs as differs:
                return plan.name, str(differs)
            if dropped:
                keys = _read_keys(output, plan, sorted(before), self._blobs)
                found = _named_data_difference(keys, before, after)
                if found is not None:
                    return plan.name, found
        return None

    def undo(self) -> None:
        """Puts back every field the prune assigned, and checks that it did.

        Raises:
            InvariantError: A field is still not what it was.
        """
        if self._journal is None:
            return  # Not taken: the prune changed nothing.
        self._journal.undo()
        changed = self._journal.changed()
        if changed is not None:
            raise InvariantError(f"the prune could not be undone: {changed} is not as it was")
