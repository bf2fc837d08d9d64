"""The structural proof of a rewrite: each method of an output reads what its input's did.

No runtime is needed to check what a rewrite can break of its promise: for each method of
an output and the input method it came from, `prove_rewrite` compares, item by item, the
plan's inputs and outputs; each instruction in chain order (the operator by name, the
delegate by backend id, compile specs and blob bytes); every value these reach, numbered
in order of first use (a dropped or renumbered value is no difference), its fields but
where its data is stored; each tensor's data as the runtime resolves it (the constant or
mutable entry, or the `.ptd` entry of its name, for the tensor's size); and each
named-data key a delegate blob names (`delegates/`: XNNPACK, Vulkan, Core ML) as the
runtime hands it to the backend (XNNPACK: from the start of the segment the key names, for
the graph's tensor's size, past the segment where that is shorter; several keys may name
one segment), every key's whole segment for a blob no reader reads. A difference is one line
naming the method and the entry (`InvalidOutputError`, exit 2). Writers prove their outputs
as described (`prove_outputs`, before anything is opened for writing) and the bytes written
(`proved`, their output check). On `read/` alone.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from emitter_filter.delegates import xnnpack_constant_types
from emitter_filter.errors import InvalidOutputError, ProgramFormatError
from emitter_filter.ondisk.analyse.named_sizes import xnnpack_tensor_bytes as tensor_bytes
from emitter_filter.ondisk.analyse.same_bytes import SpanTest, same, same_place, same_span
from emitter_filter.ondisk.read.byte_source import ByteSource, StoredSpan
from emitter_filter.ondisk.read.file_model import NamedData
from emitter_filter.ondisk.read.read_pte import PteProgram, read_pte_program
from emitter_filter.ondisk.read.readers import inline_delegate_spans, xnnpack_graphs
from emitter_filter.program.flatbuffer_tables import FlatbufferError, Table
from emitter_filter.program.generated_fields import table_text, vector_ints
from emitter_filter.program.object_models import GENERATED
from emitter_filter.program.scalar_types import tensor_nbytes

__all__ = ["Side", "Claim", "key_sizes", "prove_rewrite", "prove_outputs", "proved"]

#: A `.pte` or `.ptd`: a path, or an open `ByteSource` (the caller's).
_FileLike = str | os.PathLike | ByteSource


@dataclass(frozen=True)
class Side:
    """A program and the `.ptd` files it reads: an input of a rewrite, or its output; `read`,
    where the caller has it, is `read_pte_program` of these very bytes (not read again)."""

    pte: _FileLike
    ptds: tuple[_FileLike, ...] = ()
    read: PteProgram | None = None


@dataclass(frozen=True)
class Claim:
    """What a writer claims of one output program.

    Attributes:
        inputs: The programs its methods come from.
        pte: Its `.pte`'s position among the writer's `OutputFile`s.
        ptds: Its `.ptd` files' positions among them, then `.ptd` files it reads as they
            are (paths: not rewritten).
        methods: Each output method's (input position, input method name); None: every
            method of the output is the method of that name of `inputs[0]`.
    """

    inputs: tuple[Side, ...]
    pte: int
    ptds: tuple[int | str, ...] = ()
    methods: Mapping[str, tuple[int, str]] | None = None


_OutputCheck = Callable[[Sequence[tuple[str, str]]], None]  # `output`'s, not imported


class _Described(Protocol):
    """An `output.OutputFile`: its target, its bytes' parts, the tests made as it is written."""

    path: str
    confirm: tuple

    def parts(self) -> list: ...


# One item a method reads: (what, value), the value plain data or a span of bytes.
_Item = tuple[str, object]


class _Reads:
    """What the methods of one program read, from one `read_pte_program` of it."""

    def __init__(
        self, read: PteProgram, source: ByteSource, ptds: Mapping[str, ByteSource], graphs: dict
    ):
        self.read, self.pte, self.source = read, read.pte, source
        self.sources = {source.name: source, **ptds}
        self.named: dict[str, NamedData] = {}
        for ptd in self.pte.ptd_files:
            self.named.update(ptd.named_data)
        self.named.update({n.key: n for n in self.pte.named_data if n.file == source.name})
        self.key_sizes = key_sizes(read, source, graphs)
        self._inline = inline_delegate_spans(read.program, read.program_data)
        self.plans = {
            table_text(p.name) or "": n for n, p in enumerate(read.program.executionPlan or ())
        }

    def span(self, file: str, offset: int, nbytes: int) -> object:
        """The bytes at `offset` of `file`, cut at its end (the cut said)."""
        source = self.sources.get(file)
        if source is None or offset < 0:
            return ("not read here", nbytes)
        held = max(0, min(nbytes, source.size - offset))
        span = StoredSpan(source, offset, held)
        return span if held == nbytes else (span, "past the end by", nbytes - held)

    def method(self, name: str) -> list[_Item]:
        number = self.plans[name]
        return list(_MethodReads(self, number).items())


def key_sizes(read: PteProgram, source: ByteSource, graphs: dict | None = None) -> dict:
    """The bytes XNNPACK reads of each named-data key a blob of the program names (None:
    the key's whole segment); `graphs` holds the blobs read already, by their bytes."""
    sizes: dict[str, int | None] = {}
    for _, graph in xnnpack_graphs(read.pte, read.program, read.program_data, source):
        for key, (dtype, dims) in _constant_types(graph, {} if graphs is None else graphs).items():
            sizes.setdefault(key, tensor_bytes(dtype, dims))
    return sizes


_GRAPH_CACHED = 1 << 20


def _constant_types(graph: bytes, graphs: dict) -> dict:
    """`xnnpack_constant_types` of a graph, read once for both sides of a proof where it is
    small (by its bytes: the same bytes read the same); none for a blob that cannot be read
    (the validator's to refuse; its bytes are compared anyway)."""
    found = graphs.get(graph) if len(graph) <= _GRAPH_CACHED else None
    if found is None:
        try:
            found = xnnpack_constant_types(graph)
        except ProgramFormatError:
            found = {}
        if len(graph) <= _GRAPH_CACHED:
            graphs[bytes(graph)] = found
    return found


_SCALARS = frozenset({int, float, bool, str, type(None)})


def _plain(value) -> object:
    """A table, vector or scalar as nested tuples, compared with `==`."""
    if type(value) in _SCALARS:
        return value
    if isinstance(value, Table):
        return (value._table, *(_plain(getattr(value, a)) for a in value._attributes))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if hasattr(value, "tolist"):
        return tuple(value.tolist())
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    return value


class _MethodReads:
    """The items one plan reads, values numbered in order of first use."""

    def __init__(self, reads: _Reads, number: int) -> None:
        self.reads = reads
        self.plan = reads.read.program.executionPlan[number]
        self.refs = reads.pte.plans[number]
        self.ids: dict[int, int] = {}
        self.found: list[_Item] = []

    def value(self, index: int) -> int:
        """The value's number in this method; describes it the first time."""
        if index in self.ids:
            return self.ids[index]
        number = self.ids[index] = len(self.ids)
        values = self.plan.values or ()
        if not 0 <= index < len(values):
            self.found.append((f"value {number}", ("out of range",)))
            return number
        kind, val = GENERATED.value(values[index])
        what = f"value {number} ({kind})"
        if kind in ("IntList", "TensorList", "OptionalTensorList"):
            items = tuple(-1 if i < 0 else self.value(i) for i in vector_ints(val.items))
            self.found.append((what, (kind, items)))
        elif kind == "Tensor":
            self._tensor(what, index, val)
        else:
            self.found.append((what, (kind, _plain(val))))
        return number

    def _tensor(self, what: str, index: int, tensor) -> None:
        # Where the data is stored (its index, constant or external) is the layout's: what
        # the runtime reads is compared below, from wherever it is.
        fields = tuple(
            (a, _plain(getattr(tensor, a)))
            for a in tensor._attributes
            if a not in ("dataBufferIdx", "extraTensorInfo")
        )
        self.found.append((what, fields))
        ref = self.refs.data_refs.get(index)
        if ref is None:
            return
        nbytes = tensor_nbytes(tensor, what) or 0
        entry = self.reads.pte.entries[ref.space].get(ref.index)
        if entry is None:
            self.found.append((f"{what} data", ("missing", ref.space.value)))
            return
        # Not named by its key: `share` moves a tensor under another key, the same bytes.
        # Nor by its space: a planned tensor (`allocation_info`, compared above) starts from
        # these bytes copied into its arena, whether they are mutable data or a `.ptd`'s
        # (`merge --inline` moves a training weight from one to the other).
        span = self.reads.span(entry.file, entry.offset, nbytes)
        self.found.append((f"{what} data", (span,)))

    def _delegate(self, index: int) -> tuple:
        delegates = self.plan.delegates or ()
        if not 0 <= index < len(delegates):
            return ("delegate out of range", index)
        delegate = delegates[index]
        backend = table_text(delegate.id) or ""
        specs = _plain(delegate.compileSpecs)
        processed = delegate.processed
        pte, reads = self.reads.pte, self.reads
        if processed is None:
            return (backend, specs, None)
        if processed.location == 0:  # INLINE
            spans = reads._inline
            if not 0 <= processed.index < len(spans):
                return (backend, specs, ("inline blob out of range",))
            start, size = spans[processed.index]
            blob: object = reads.read.program_data[start : start + size]
        else:
            if not 0 <= processed.index < len(pte.segments):
                return (backend, specs, ("segment out of range",))
            segment = pte.segments[processed.index]
            blob = reads.span(pte.path, segment.offset, segment.size)
        return (backend, specs, blob)

    def _named_data(self, backends: set[str]) -> Iterator[_Item]:
        """The bytes of each key a delegate of the method may read, as the runtime gives them."""
        reads = self.reads
        keys: dict[str, int | None] = {}
        xnnpack = {
            k
            for b in reads.pte.delegates
            if b.named_keys is not None and self._uses(b)
            for k in b.named_keys
        }
        # A blob whose keys its backend's reader names (`delegates/`) reads those; one it
        # cannot read may look up any key.
        opaque = any(b.named_keys is None and self._uses(b) for b in reads.pte.delegates)
        for key in sorted(xnnpack):
            keys[key] = reads.key_sizes.get(key)
        if opaque:
            for key in sorted(reads.named):
                keys.setdefault(key, None)
        for key, size in keys.items():
            entry = reads.named.get(key)
            if entry is None:
                yield (f"named data {key!r}", ("missing",))
                continue
            yield (
                f"named data {key!r}",
                reads.span(entry.file, entry.offset, entry.nbytes if size is None else size),
            )

    def _uses(self, blob) -> bool:
        name = table_text(self.plan.name) or ""
        return any(user.plan == name for user in blob.users)

    def items(self) -> Iterator[_Item]:
        plan, value = self.plan, self.value
        yield ("inputs", tuple(value(i) for i in vector_ints(plan.inputs)))
        backends: set[str] = set()
        operators = [(table_text(o.name), table_text(o.overload)) for o in plan.operators or ()]
        for chain_number, chain in enumerate(plan.chains or ()):
            where = f"chain {chain_number}"
            yield (f"{where} inputs", tuple(value(i) for i in vector_ints(chain.inputs)))
            for number, instruction in enumerate(chain.instructions or ()):
                kind, args = GENERATED.instruction(instruction)
                item: tuple = (kind,)
                if kind == "KernelCall":
                    op = args.opIndex
                    name = operators[op] if 0 <= op < len(operators) else ("out of range", op)
                    item = (kind, name, tuple(value(i) for i in vector_ints(args.args)))
                elif kind == "DelegateCall":
                    called = self._delegate(args.delegateIndex)
                    backends.add(str(called[0]))
                    item = (kind, called, tuple(value(i) for i in vector_ints(args.args)))
                elif kind == "JumpFalseCall":
                    item = (kind, value(args.condValueIndex), args.destinationInstruction)
                elif kind == "MoveCall":
                    item = (kind, value(args.moveFrom), value(args.moveTo))
                elif kind == "FreeCall":
                    item = (kind, value(args.valueIndex))
                yield (f"{where} instruction {number}", item)
                yield from self._drain()
            yield (f"{where} outputs", tuple(value(i) for i in vector_ints(chain.outputs)))
        yield ("outputs", tuple(value(i) for i in vector_ints(plan.outputs)))
        yield ("non_const_buffer_sizes", _plain(plan.nonConstBufferSizes))
        yield from self._drain()
        yield from self._named_data(backends)

    def _drain(self) -> Iterator[_Item]:
        found, self.found = self.found, []
        yield from found


def _difference(
    old: Sequence[_Item], new: Sequence[_Item], same_span: SpanTest = same_span
) -> str | None:
    """The first item the two methods read differently, or None."""
    for (what, left), (what_new, right) in zip(old, new, strict=False):
        if what != what_new:
            return f"{what_new} where its input reads {what}"
        if not same(left, right, same_span):
            return what
    if len(old) != len(new):
        longer = old if len(old) > len(new) else new
        return f"{longer[min(len(old), len(new))][0]} (read by one side only)"
    return None


def _open(file: _FileLike, opened: contextlib.ExitStack) -> ByteSource:
    return file if isinstance(file, ByteSource) else opened.enter_context(ByteSource(file))


def _reads(side: Side, opened: contextlib.ExitStack, graphs: dict) -> _Reads:
    source = _open(side.pte, opened)
    ptds = [_open(p, opened) for p in side.ptds]
    read = side.read if side.read is not None else read_pte_program(source, ptds)
    return _Reads(read, source, {p.name: p for p in ptds}, graphs)


def prove_rewrite(
    inputs: Sequence[Side],
    output: Side,
    methods: Mapping[str, tuple[int, str]] | None = None,
    name: str | None = None,
) -> None:
    """Refuses `output` if one of its methods reads other bytes than its input's method.

    Args:
        inputs: The programs the output's methods come from. Not modified.
        output: The output as written or as described (`ByteSource` of its parts).
        methods: Each output method's (input position, input method name); None: each
            method of the output is the method of that name of `inputs[0]`.
        name: The output's name in the message (its target); its source's name if None.

    Raises:
        InvalidOutputError: The first method that differs, and the entry.
    """
    with contextlib.ExitStack() as opened:
        graphs: dict = {}
        olds = [_reads(side, opened, graphs) for side in inputs]
        try:
            new = _reads(output, opened, graphs)
        except (ProgramFormatError, FlatbufferError) as error:
            target = name or getattr(output.pte, "name", os.fspath(output.pte))  # type: ignore[arg-type]
            raise InvalidOutputError(
                f"{target}: not written: it cannot be read back: {error} "
                "(a bug of emitter-filter's rewrite)"
            ) from error
        target = name or new.source.name
        for method in new.plans:
            number, old_name = (0, method) if methods is None else methods[method]
            old = olds[number]
            if old_name not in old.plans:
                raise InvalidOutputError(
                    f"{target}: not written: method {method!r} is not in its input "
                    f"{old.source.name} (a bug of emitter-filter's rewrite)"
                )
            difference = _difference(old.method(old_name), new.method(method))
            if difference is not None:
                raise InvalidOutputError(
                    f"{target}: not written: method {method!r} reads other bytes than "
                    f"{old_name!r} of {old.source.name}: {difference} "
                    "(a bug of emitter-filter's rewrite)"
                )


def _side(claim: Claim, files: Sequence[_FileLike]) -> Side:
    ptds = tuple(files[p] if isinstance(p, int) else p for p in claim.ptds)
    return Side(files[claim.pte], ptds)


def prove_outputs(outputs: Sequence[_Described], claims: Sequence[Claim]) -> None:
    """`prove_rewrite` of each claimed output as described, before anything is opened for
    writing: its bytes are read from its parts (the inputs' ranges and the made bytes)."""
    sources = [ByteSource(o.parts(), name=o.path) for o in outputs]
    for claim in claims:
        prove_rewrite(claim.inputs, _side(claim, sources), claim.methods)


def proved(
    check: _OutputCheck, claims: Sequence[Claim], described: Sequence[_Described] | None = None
) -> _OutputCheck:
    """`check` (the validator of what was written), then the proof of each claimed output on
    the bytes written: what a writer passes `write_outputs` as `validate`.

    With `described` (the outputs `prove_outputs` proved), cheaply: each output as written
    must be the output as described, method by method, item by item, each range at the same
    place with the same bytes at its ends (`same_bytes.same_place`), not read whole again. An output
    laid out on a test made while it was written (`confirm`: a repeat `prune --dedupe`
    compares as it copies) is proven as described first, now that its tests are made.
    Without `described`, `prove_rewrite` of the bytes written against the inputs.
    """

    def both(written: Sequence[tuple[str, str]]) -> None:
        check(written)
        temps = [temp for temp, _ in written]
        if described is not None and any(o.confirm for o in described):
            prove_outputs(described, claims)
        if described is None:
            for claim in claims:
                target = written[claim.pte][1]
                prove_rewrite(claim.inputs, _side(claim, temps), claim.methods, target)
            return
        sources = [ByteSource(o.parts(), name=o.path) for o in described]
        for claim in claims:
            target = written[claim.pte][1]
            _prove_as_described(_side(claim, sources), _side(claim, temps), target)

    return both


def _prove_as_described(described: Side, written: Side, target: str) -> None:
    """Refuses an output whose methods as written read other ranges than as described."""
    with contextlib.ExitStack() as opened:
        graphs: dict = {}
        before = _reads(described, opened, graphs)
        try:
            after = _reads(written, opened, graphs)
        except (ProgramFormatError, FlatbufferError) as error:
            raise InvalidOutputError(
                f"{target}: not written: what was written cannot be read back: {error} "
                "(a bug of emitter-filter's writer)"
            ) from error
        if list(after.plans) != list(before.plans):
            raise InvalidOutputError(
                f"{target}: not written: its methods as written {list(after.plans)} are not "
                f"the ones decided {list(before.plans)} (a bug of emitter-filter's writer)"
            )
        for method in after.plans:
            difference = _difference(before.method(method), after.method(method), same_place)
            if difference is not None:
                raise InvalidOutputError(
                    f"{target}: not written: method {method!r} as written reads other bytes "
                    f"than decided: {difference} (a bug of emitter-filter's writer)"
                )
