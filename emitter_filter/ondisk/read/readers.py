"""Who reads each stored entry of a `.pte`: the operator or delegate call, or the key's delegate.

`explain` says, for every entry, what reads it; `diff` matches entries of two
files by it when they carry no name. One pass over each plan's instructions:

- a tensor value in a `KernelCall`'s or `DelegateCall`'s `args` (directly, or as
  an item of a `TensorList`/`OptionalTensorList` argument) is read by that call:
  `aten::linear.out arg 1 in plan 'forward'`, or `XnnpackBackend delegate 0 arg 2`;
- a tensor value among a plan's outputs is read by whoever calls the method;
- a named-data key is read by every delegate whose blob names it (XNNPACK, Vulkan,
  a Core ML reference: `delegates`), or maybe by any opaque delegate (whose blob
  we cannot read).

Only the program flatbuffer is read, never tensor bytes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from emitter_filter.delegates import XNNPACK_BACKEND_ID, BlobFormat, blob_format
from emitter_filter.errors import ProgramFormatError, PteFormatError
from emitter_filter.ondisk.read.byte_source import ByteSource
from emitter_filter.ondisk.read.file_model import DelegateData, PteFile
from emitter_filter.program.fbs_schemas import PROGRAM
from emitter_filter.program.flatbuffer_tables import Table
from emitter_filter.program.generated_fields import table_text, vector_ints
from emitter_filter.program.object_models import GENERATED
from emitter_filter.program.reachability import DataRef

__all__ = [
    "Reader",
    "PlanCall",
    "plan_calls",
    "find_tensor_readers",
    "find_named_data_readers",
    "find_named_data_types",
    "delegate_graphs",
    "xnnpack_graphs",
    "inline_delegate_spans",
]


@dataclass(frozen=True)
class Reader:
    """One call (or method output) that reads an entry.

    Attributes:
        plan: The execution plan's name.
        op: The operator (`aten::linear.out`), `<backend> delegate <i>`, or `output`.
        arg: The argument's position in the call (the output's position for
            `output`); -1 for a delegate reading named data.
        ordinal: How many calls of the same `op` come before it in the plan: with
            `plan`, `op` and `arg`, a name for the reader that survives unrelated
            calls being added elsewhere (what `diff` matches on).
        key: The named-data key the delegate reads it by, if any.
    """

    plan: str
    op: str
    arg: int
    ordinal: int = 0
    key: str | None = None

    def describe(self) -> str:
        """`aten::embedding.out arg 0 in plan 'forward'` (`via key ...` for named data)."""
        if self.op == "output":
            what = f"output {self.arg}"
        else:
            what = self.op if self.arg < 0 else f"{self.op} arg {self.arg}"
        via = "" if self.key is None else f" via key {self.key}"
        return f"{what} in plan {self.plan!r}{via}"


def _operator_names(plan) -> list[str]:
    names = []
    for operator in plan.operators or ():
        name, overload = table_text(operator.name) or "?", table_text(operator.overload)
        names.append(f"{name}.{overload}" if overload else name)
    return names


def _delegate_names(plan) -> list[str]:
    return [f"{table_text(d.id) or '?'} delegate {i}" for i, d in enumerate(plan.delegates or ())]


@dataclass(frozen=True)
class PlanCall:
    """One kernel or delegate call of a plan: what `Reader.op` names, its arguments,
    where it is (`plan.chains[chain].instructions[instruction]`), and for a delegate call
    which of `plan.delegates` it calls."""

    op: str
    args: tuple[int, ...]
    chain: int
    instruction: int
    delegate: int | None = None


def plan_calls(plan) -> list[PlanCall]:
    """Each kernel and delegate call of `plan`, in chain then instruction order: the order
    `Reader.ordinal` counts in."""
    operators, delegates = _operator_names(plan), _delegate_names(plan)
    calls = []
    for chain_index, chain in enumerate(plan.chains or ()):
        for index, instruction in enumerate(chain.instructions or ()):
            kind, args = GENERATED.instruction(instruction)
            if kind == "KernelCall":
                op = operators[args.opIndex] if 0 <= args.opIndex < len(operators) else "?"
            elif kind == "DelegateCall":
                number = args.delegateIndex
                op = delegates[number] if 0 <= number < len(delegates) else "?"
            else:
                continue
            calls.append(
                PlanCall(
                    op,
                    tuple(vector_ints(args.args)),
                    chain_index,
                    index,
                    args.delegateIndex if kind == "DelegateCall" else None,
                )
            )
    return calls


def find_tensor_readers(pte: PteFile, program: Table) -> dict[DataRef, tuple[Reader, ...]]:
    """The calls that read each tensor data entry, over every plan, in plan then call order.

    Args:
        pte: What `read_pte_program` returned with `program`. Not modified.
        program: The unpacked program. Not modified.
    """
    readers: dict[DataRef, list[Reader]] = {}
    for refs, plan in zip(pte.plans, program.executionPlan or (), strict=True):
        seen: dict[str, int] = {}
        for call in plan_calls(plan):
            op = call.op
            ordinal = seen[op] = seen.get(op, -1) + 1
            for position, value in enumerate(call.args):
                for item in (value, *refs.list_items.get(value, ())):
                    ref = refs.data_refs.get(item)
                    if ref is not None:
                        readers.setdefault(ref, []).append(Reader(refs.name, op, position, ordinal))
        for position, value in enumerate(vector_ints(plan.outputs)):
            ref = refs.data_refs.get(value)
            if ref is not None:
                readers.setdefault(ref, []).append(Reader(refs.name, "output", position))
    return {ref: tuple(dict.fromkeys(found)) for ref, found in readers.items()}


def find_named_data_readers(pte: PteFile) -> Mapping[str, Sequence[Reader]]:
    """The delegates that read each named-data key; opaque delegates may read any key.

    A key no readable delegate names gets every opaque delegate, `op` marked
    `(opaque)`: the same rule as `classify_file_named_data`, which keeps such keys.
    """
    readers: dict[str, list[Reader]] = {}
    opaque: list[Reader] = []
    for blob in pte.delegates:
        for user in blob.users:
            op = f"{user.backend_id} delegate {user.index}"
            if blob.named_keys is None:
                opaque.append(Reader(user.plan, f"{op} (opaque)", -1))
                continue
            for key in sorted(blob.named_keys):
                readers.setdefault(key, []).append(Reader(user.plan, op, -1, key=key))
    keys = {entry.key for entry in pte.named_data}
    return {key: tuple(readers.get(key, ())) or tuple(opaque) for key in keys}


def delegate_graphs(
    pte: PteFile, program: Table, program_data: bytes, source: ByteSource
) -> Iterator[tuple[DelegateData, BlobFormat, bytes]]:
    """Each blob of a backend `delegates` reads, with its format and its header and graph,
    never its constant bytes.

    Args:
        pte: What `read_pte_program` returned with `program` and `program_data`. Not modified.
        program, program_data: The program, decoded and as bytes, for inline blobs.
        source: The `.pte`, open, for blobs in segments.

    Raises:
        PteFormatError: A blob's header points outside it.
    """
    for blob in pte.delegates:
        backends = {u.backend_id for u in blob.users}
        if len(backends) != 1:
            continue
        found = blob_format(backends.pop())
        if found is None:
            continue
        if blob.location == "segment":

            def read(start, count, at=(blob.offset, 0), what=f"{found.name} blob"):
                return source.read(at[0] + start, count, what)
        else:
            spans = inline_delegate_spans(program, program_data)

            def read(start, count, at=spans[blob.index], what=""):
                return program_data[at[0] + start : at[0] + min(start + count, at[1])]

        try:
            graph = found.read_graph(read, blob.nbytes)
        except ProgramFormatError as error:
            raise PteFormatError(pte.path, f"{found.name} blob: {error}", blob.offset) from error
        yield blob, found, graph


def xnnpack_graphs(
    pte: PteFile, program: Table, program_data: bytes, source: ByteSource
) -> Iterator[tuple[DelegateData, bytes]]:
    """Each XNNPACK blob with its header and flatbuffer; arguments as `delegate_graphs`'."""
    for blob, found, graph in delegate_graphs(pte, program, program_data, source):
        if found.backend_id == XNNPACK_BACKEND_ID:
            yield blob, graph


def find_named_data_types(
    pte: PteFile, program: Table, program_data: bytes, source: ByteSource
) -> dict[str, tuple[str, tuple[int, ...] | None]]:
    """The datatype and dims each named-data key is read as, by the first readable
    delegate that reads it (`FLOAT`, `CHAR`, ...: `scalar_types`; an XNNPACK blockwise
    scale's: `("scales", None)`); arguments as `delegate_graphs` takes them."""
    types: dict[str, tuple[str, tuple[int, ...] | None]] = {}
    for blob, found, graph in delegate_graphs(pte, program, program_data, source):
        try:
            for key, typed in found.constant_types(graph).items():
                types.setdefault(key, typed)
        except ProgramFormatError as error:
            raise PteFormatError(pte.path, f"{found.name} blob: {error}", blob.offset) from error
    return types


def inline_delegate_spans(program: Table, program_data: bytes) -> list[tuple[int, int]]:
    """(offset, size) of each `backend_delegate_data[i].data` vector in the flatbuffer."""
    spans = []
    for blob in program.backendDelegateData or ():
        start = PROGRAM.vector_at(program_data, blob, "data")
        spans.append((0, 0) if start is None else (start, len(blob.data)))
    return spans
