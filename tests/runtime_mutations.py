"""Mutated `.pte`/`.ptd` files aimed at what ExecuTorch's runtime checks when it loads them.

Random byte flips (`tests/fuzz_files.py`) mostly die in the flatbuffer verifier;
these change one field the runtime reads after it, to a value near its bound:
indices (constant and mutable data, memory ids, delegates, values, operators),
offsets and sizes of segments and subsegments, tensor shapes and types against
the bytes stored for them, `constant_buffer` beside the constant segment, named
data and external keys against the data file, and the header fields.

Each mutation decodes a valid seed's program (or its `.ptd`'s FlatTensor),
changes one field, and packs it again with the segment data kept as it was
(`tests.layouts.with_program_changed`). Deterministic: case `i` of a run with
`seed` is always the same file. Imports neither torch nor executorch.
"""

from __future__ import annotations

import dataclasses
import random
import struct
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from emitter_filter._program_fbs.executorch_flatbuffer.BackendDelegateInlineData import (
    BackendDelegateInlineDataT,
)
from emitter_filter._program_fbs.executorch_flatbuffer.Buffer import BufferT
from emitter_filter._program_fbs.executorch_flatbuffer.DataSegment import DataSegmentT
from emitter_filter._program_fbs.executorch_flatbuffer.ExtraTensorInfo import ExtraTensorInfoT
from emitter_filter._program_fbs.executorch_flatbuffer.InstructionArguments import (
    InstructionArguments,
)
from emitter_filter._program_fbs.executorch_flatbuffer.KernelTypes import KernelTypes
from emitter_filter._program_fbs.executorch_flatbuffer.NamedData import NamedDataT
from emitter_filter._program_fbs.executorch_flatbuffer.SubsegmentOffsets import (
    SubsegmentOffsetsT,
)
from emitter_filter._program_fbs.executorch_flatbuffer.TensorDataLocation import (
    TensorDataLocation,
)
from emitter_filter.ondisk.read.file_headers import aligned
from emitter_filter.ondisk.read.read_ptd import read_ptd_flat_tensor
from emitter_filter.ondisk.write.ptd_writer import pack_flat_tensor
from tests.fuzz_files import Seed, mutate
from tests.layouts import ptd_file, with_program_changed


@dataclasses.dataclass(frozen=True)
class Mutant:
    """One mutated file set: `pte` and `ptds` bytes, what was changed (`field`, `how`)."""

    seed: str
    field: str
    how: str
    pte: bytes
    ptds: tuple[bytes, ...]

    def write(self, directory: Path) -> tuple[Path, tuple[Path, ...]]:
        directory.mkdir(parents=True, exist_ok=True)
        pte = directory / "model.pte"
        pte.write_bytes(self.pte)
        ptds = []
        for index, data in enumerate(self.ptds):
            ptds.append(directory / f"data{index}.ptd")
            ptds[-1].write_bytes(data)
        return pte, tuple(ptds)


class _NotApplicable(Exception):
    """The seed has nothing this mutation changes."""


def _near(rng: random.Random, bound: int, unsigned: bool = True) -> int:
    """A value at or near `bound` (a length, a size), or an extreme."""
    choices = [bound - 1, bound, bound + 1, bound + 8, 2 * bound + 16, 0, 1, 0xFFFF, 0x7FFFFFFF]
    if not unsigned:
        choices.append(-1)
    return rng.choice([c for c in choices if not unsigned or c >= 0])


def _pick(rng: random.Random, items):
    items = list(items)
    if not items:
        raise _NotApplicable
    return rng.choice(items)


def _tensors(program, want: Callable[[object], bool] = lambda t: True):
    return [
        (plan, index, value.val)
        for plan in program.executionPlan or ()
        for index, value in enumerate(plan.values or ())
        if value.valType == KernelTypes.Tensor and want(value.val)
    ]


def _constant(tensor) -> bool:
    return tensor.allocationInfo is None and tensor.dataBufferIdx > 0 and not _external(tensor)


def _planned(tensor) -> bool:
    return tensor.allocationInfo is not None


def _external(tensor) -> bool:
    info = tensor.extraTensorInfo
    return info is not None and info.location == TensorDataLocation.EXTERNAL


def _segment_data_size(program) -> int:
    return max((s.offset + s.size for s in program.segments or ()), default=0)


# Each mutation changes `program` in place and returns what it did.


def constant_offset(rng, program):
    offsets = (program.constantSegment and program.constantSegment.offsets) or []
    position = _pick(rng, range(len(offsets)))
    segment = program.segments[program.constantSegment.segmentIndex]
    offsets[position] = _near(rng, segment.size)
    return f"constant_segment.offsets[{position}] = {offsets[position]}"


def constant_offsets_cut(rng, program):
    offsets = (program.constantSegment and program.constantSegment.offsets) or []
    if len(offsets) < 2:
        raise _NotApplicable
    keep = rng.randrange(len(offsets))
    program.constantSegment.offsets = offsets[:keep]
    return f"constant_segment.offsets cut to {keep} entries"


def constant_segment_index(rng, program):
    if program.constantSegment is None:
        raise _NotApplicable
    program.constantSegment.segmentIndex = _near(rng, len(program.segments or ()))
    return f"constant_segment.segment_index = {program.constantSegment.segmentIndex}"


def segment_field(rng, program):
    segment = _pick(rng, program.segments or ())
    name = rng.choice(("offset", "size"))
    setattr(
        segment,
        name,
        _near(rng, _segment_data_size(program))
        if rng.random() < 0.7
        else getattr(segment, name) + rng.choice((-1, 1, 16)) % (1 << 64),
    )
    return f"segments[{program.segments.index(segment)}].{name} = {getattr(segment, name)}"


def segments_removed(rng, program):
    if not program.segments:
        raise _NotApplicable
    keep = rng.randrange(len(program.segments))
    program.segments = program.segments[:keep]
    return f"segments cut to {keep} entries"


def data_buffer_idx(rng, program):
    plan, index, tensor = _pick(rng, _tensors(program))
    offsets = (program.constantSegment and program.constantSegment.offsets) or []
    tensor.dataBufferIdx = _near(rng, len(offsets)) if rng.random() < 0.7 else rng.choice((0, 1, 2))
    return f"plan {plan.name!r} value {index}: data_buffer_idx = {tensor.dataBufferIdx}"


def memory_id(rng, program):
    plan, index, tensor = _pick(rng, _tensors(program, _planned))
    tensor.allocationInfo.memoryId = _near(rng, len(plan.nonConstBufferSizes or ()))
    return (
        f"plan {plan.name!r} value {index}: allocation_info.memory_id = "
        f"{tensor.allocationInfo.memoryId}"
    )


def memory_offset(rng, program):
    plan, index, tensor = _pick(rng, _tensors(program, _planned))
    sizes = plan.nonConstBufferSizes or [0]
    bound = (
        sizes[tensor.allocationInfo.memoryId] if tensor.allocationInfo.memoryId < len(sizes) else 0
    )
    if rng.random() < 0.8:
        tensor.allocationInfo.memoryOffsetLow = _near(rng, bound) & 0xFFFFFFFF
        return (
            f"plan {plan.name!r} value {index}: allocation_info.memory_offset_low = "
            f"{tensor.allocationInfo.memoryOffsetLow}"
        )
    tensor.allocationInfo.memoryOffsetHigh = rng.choice((1, 0xFFFF, 0xFFFFFFFF))
    return (
        f"plan {plan.name!r} value {index}: allocation_info.memory_offset_high = "
        f"{tensor.allocationInfo.memoryOffsetHigh}"
    )


def allocation_removed(rng, program):
    plan, index, tensor = _pick(rng, _tensors(program, _planned))
    tensor.allocationInfo = None
    return f"plan {plan.name!r} value {index}: allocation_info removed"


def non_const_buffer_sizes(rng, program):
    plan = _pick(rng, program.executionPlan or ())
    sizes = plan.nonConstBufferSizes or []
    if rng.random() < 0.3 or not sizes:
        plan.nonConstBufferSizes = sizes[: rng.randrange(len(sizes) + 1)]
        return f"plan {plan.name!r}: non_const_buffer_sizes = {plan.nonConstBufferSizes}"
    position = rng.randrange(len(sizes))
    sizes[position] = rng.choice(
        (0, max(sizes[position] - 1, 0), sizes[position] // 2, sizes[position] + 1, 1 << 40)
    )
    return f"plan {plan.name!r}: non_const_buffer_sizes[{position}] = {sizes[position]}"


def tensor_sizes(rng, program):
    plan, index, tensor = _pick(rng, _tensors(program))
    sizes = list(tensor.sizes or [])
    if not sizes or rng.random() < 0.2:
        sizes.append(rng.choice((1, 2, 7)))
        tensor.dimOrder = list(range(len(sizes)))
    else:
        position = rng.randrange(len(sizes))
        sizes[position] = rng.choice((0, sizes[position] + 1, sizes[position] * 2, -1, 0x7FFFFFFF))
    tensor.sizes = sizes
    return f"plan {plan.name!r} value {index}: sizes = {sizes}"


def tensor_scalar_type(rng, program):
    plan, index, tensor = _pick(rng, _tensors(program))
    # BYTE, CHAR, HALF, INT, LONG, DOUBLE, BOOL, BFLOAT16, and out-of-enum values.
    tensor.scalarType = rng.choice((0, 1, 3, 5, 4, 7, 11, 15, 23, 44, 127))
    return f"plan {plan.name!r} value {index}: scalar_type = {tensor.scalarType}"


def tensor_dim_order(rng, program):
    plan, index, tensor = _pick(rng, _tensors(program))
    order = list(tensor.dimOrder or [])
    choice = rng.randrange(3)
    if choice == 0:
        order = order[:-1] if order else [0]
    elif choice == 1:
        order = order + [len(order)]
    else:
        order = [len(order) + 3] + order[1:] if order else [5]
    tensor.dimOrder = order
    return f"plan {plan.name!r} value {index}: dim_order = {order}"


def mutable_segments(rng, program):
    segments = program.mutableDataSegments
    if not segments:
        # A planned tensor says its initial state is in a mutable segment that does not exist.
        plan, index, tensor = _pick(rng, _tensors(program, _planned))
        tensor.dataBufferIdx = rng.choice((1, 2))
        return (
            f"plan {plan.name!r} value {index}: data_buffer_idx = {tensor.dataBufferIdx} "
            "(a planned tensor, no mutable_data_segments)"
        )
    choice = rng.randrange(4)
    if choice == 0:
        program.mutableDataSegments = None
        return "mutable_data_segments removed"
    if choice == 1:
        segments[0].segmentIndex = _near(rng, len(program.segments or ()))
        return f"mutable_data_segments[0].segment_index = {segments[0].segmentIndex}"
    if choice == 2:
        offsets = segments[0].offsets or [0]
        position = rng.randrange(len(offsets))
        segment = program.segments[segments[0].segmentIndex]
        offsets[position] = _near(rng, segment.size)
        segments[0].offsets = offsets
        return f"mutable_data_segments[0].offsets[{position}] = {offsets[position]}"
    segments[0].offsets = (segments[0].offsets or [])[:1]
    return f"mutable_data_segments[0].offsets cut to {len(segments[0].offsets)}"


def mutable_state_index(rng, program):
    plan, index, tensor = _pick(
        rng, _tensors(program, lambda t: _planned(t) and t.dataBufferIdx > 0)
    )
    tensor.dataBufferIdx = _near(rng, len(program.mutableDataSegments[0].offsets or ()))
    return (
        f"plan {plan.name!r} value {index}: data_buffer_idx = {tensor.dataBufferIdx} "
        "(mutable state)"
    )


def external_key(rng, program):
    plan, index, tensor = _pick(rng, _tensors(program, _external))
    info = tensor.extraTensorInfo
    choice = rng.randrange(3)
    if choice == 0:
        info.fullyQualifiedName = (info.fullyQualifiedName or b"") + b".x"
        return (
            f"plan {plan.name!r} value {index}: fully_qualified_name = "
            f"{info.fullyQualifiedName!r} (not in the .ptd)"
        )
    if choice == 1:
        info.fullyQualifiedName = None
        return f"plan {plan.name!r} value {index}: fully_qualified_name removed"
    info.location = TensorDataLocation.SEGMENT
    return f"plan {plan.name!r} value {index}: location = SEGMENT (was EXTERNAL)"


def made_external(rng, program):
    plan, index, tensor = _pick(rng, _tensors(program, _constant))
    tensor.extraTensorInfo = tensor.extraTensorInfo or ExtraTensorInfoT()
    tensor.extraTensorInfo.location = TensorDataLocation.EXTERNAL
    tensor.extraTensorInfo.fullyQualifiedName = rng.choice((b"lin.weight", b"nowhere", None))
    return (
        f"plan {plan.name!r} value {index}: location = EXTERNAL, fully_qualified_name = "
        f"{tensor.extraTensorInfo.fullyQualifiedName!r}"
    )


def delegate_reference(rng, program):
    plan = _pick(rng, [p for p in program.executionPlan or () if p.delegates])
    delegate = rng.choice(plan.delegates)
    choice = rng.randrange(4)
    if choice == 0:
        delegate.processed.location = 1 - delegate.processed.location
        return (
            f"plan {plan.name!r}: delegates[0].processed.location = {delegate.processed.location}"
        )
    if choice == 1:
        bound = (
            len(program.segments or ())
            if delegate.processed.location == 1
            else len(program.backendDelegateData or ())
        )
        delegate.processed.index = _near(rng, bound)
        return f"plan {plan.name!r}: delegates[0].processed.index = {delegate.processed.index}"
    if choice == 2:
        delegate.id = rng.choice((b"NoSuchBackend", b"", None))
        return f"plan {plan.name!r}: delegates[0].id = {delegate.id!r}"
    calls = [
        i.instrArgs
        for c in plan.chains
        for i in c.instructions
        if i.instrArgsType == InstructionArguments.DelegateCall
    ]
    call = _pick(rng, calls)
    call.delegateIndex = _near(rng, len(plan.delegates), unsigned=False)
    return f"plan {plan.name!r}: delegate_call.delegate_index = {call.delegateIndex}"


def named_data(rng, program):
    entries = program.namedData
    if not entries:
        raise _NotApplicable
    entry = rng.choice(entries)
    choice = rng.randrange(4)
    if choice == 0:
        entry.key = (entry.key or b"")[:-1] + b"!"
        return f"named_data key renamed to {entry.key!r}"
    if choice == 1:
        entry.segmentIndex = _near(rng, len(program.segments or ()))
        return f"named_data segment_index = {entry.segmentIndex}"
    if choice == 2:
        copy = NamedDataT()
        copy.key, copy.segmentIndex = entry.key, 0
        entries.append(copy)
        return "named_data: a key twice (other segments)"
    program.namedData = entries[:-1] or None
    return "named_data: last entry removed"


def constant_buffer(rng, program):
    placeholder = BufferT()
    placeholder.storage = []
    if rng.random() < 0.5:
        full = BufferT()
        full.storage = list(bytes(range(16)))
        program.constantBuffer = [placeholder, full]
        return "constant_buffer = [placeholder, 16 bytes] beside constant_segment"
    program.constantBuffer = [placeholder]
    if rng.random() < 0.5 and program.constantSegment is not None:
        program.constantSegment = None
        return "constant_buffer = [placeholder], constant_segment removed"
    return "constant_buffer = [placeholder] beside constant_segment"


def inline_delegate_data(rng, program):
    data = BackendDelegateInlineDataT()
    data.data = list(bytes(8))
    program.backendDelegateData = (program.backendDelegateData or []) + [data]
    return "backend_delegate_data: an unused entry"


def plan_io_index(rng, program):
    plan = _pick(rng, program.executionPlan or ())
    name = rng.choice(("inputs", "outputs"))
    values = getattr(plan, name) or []
    position = _pick(rng, range(len(values)))
    values[position] = _near(rng, len(plan.values), unsigned=False)
    return f"plan {plan.name!r}: {name}[{position}] = {values[position]}"


def instruction_arg(rng, program):
    plan = _pick(rng, program.executionPlan or ())
    instructions = [
        i
        for c in plan.chains
        for i in c.instructions
        if i.instrArgsType == InstructionArguments.KernelCall
    ]
    call = _pick(rng, instructions).instrArgs
    if rng.random() < 0.4:
        call.opIndex = _near(rng, len(plan.operators or ()))
        return f"plan {plan.name!r}: kernel_call.op_index = {call.opIndex}"
    position = _pick(rng, range(len(call.args or ())))
    call.args[position] = _near(rng, len(plan.values), unsigned=False)
    return f"plan {plan.name!r}: kernel_call.args[{position}] = {call.args[position]}"


def operator_name(rng, program):
    plan = _pick(rng, [p for p in program.executionPlan or () if p.operators])
    operator = rng.choice(plan.operators)
    operator.name = rng.choice((b"aten::no_such_op", b"", (operator.name or b"") + b"_"))
    return f"plan {plan.name!r}: operator renamed {operator.name!r}"


def value_type(rng, program):
    plan = _pick(rng, program.executionPlan or ())
    value = rng.choice(plan.values)
    value.valType = rng.choice(
        (KernelTypes.Null, KernelTypes.Int, KernelTypes.TensorList, KernelTypes.String)
    )
    value.val = None if value.valType == KernelTypes.Null else value.val
    return f"plan {plan.name!r}: value type = {value.valType}"


def required_field_removed(rng, program):
    """A vector or string the runtime requires left unwritten (an empty one is fine)."""
    plan = _pick(rng, program.executionPlan or ())
    choice = rng.randrange(6)
    if choice == 0:
        plan.delegates = None
        return f"plan {plan.name!r}: delegates not written"
    if choice == 1:
        plan.chains = rng.choice((None, []))
        return f"plan {plan.name!r}: chains = {plan.chains}"
    if choice == 2:
        chain = _pick(rng, plan.chains or ())
        chain.instructions = None
        return f"plan {plan.name!r}: a chain's instructions not written"
    if choice == 3:
        call = _pick(
            rng,
            [
                i.instrArgs
                for c in plan.chains
                for i in c.instructions or ()
                if i.instrArgsType == InstructionArguments.KernelCall
            ],
        )
        call.args = None
        return f"plan {plan.name!r}: kernel_call.args not written"
    if choice == 4:
        operator = _pick(rng, plan.operators or ())
        operator.name = None
        return f"plan {plan.name!r}: an operator's name not written"
    plan.values = None
    return f"plan {plan.name!r}: values not written"


def constant_segment_added(rng, program):
    """A second (empty) segment the constant segment then points at."""
    segment = DataSegmentT()
    segment.offset, segment.size = aligned(_segment_data_size(program), 16), 0
    program.segments = (program.segments or []) + [segment]
    program.constantSegment = program.constantSegment or SubsegmentOffsetsT()
    program.constantSegment.segmentIndex = len(program.segments) - 1
    return "constant_segment points at an empty segment"


PROGRAM_MUTATIONS: dict[str, Callable] = {
    f.__name__: f
    for f in (
        constant_offset,
        constant_offsets_cut,
        constant_segment_index,
        segment_field,
        segments_removed,
        data_buffer_idx,
        memory_id,
        memory_offset,
        allocation_removed,
        non_const_buffer_sizes,
        tensor_sizes,
        tensor_scalar_type,
        tensor_dim_order,
        mutable_segments,
        mutable_state_index,
        external_key,
        made_external,
        delegate_reference,
        named_data,
        constant_buffer,
        inline_delegate_data,
        plan_io_index,
        instruction_arg,
        operator_name,
        value_type,
        required_field_removed,
        constant_segment_added,
    )
}

# Header fields: (name, offset, width) in the `.pte` extended header and the `.ptd` header.
PTE_HEADER = (
    ("header_length", 12, 4),
    ("program_size", 16, 8),
    ("segment_base_offset", 24, 8),
    ("segment_data_size", 32, 8),
)
PTD_HEADER = (
    ("header_length", 12, 4),
    ("flatbuffer_offset", 16, 8),
    ("flatbuffer_size", 24, 8),
    ("segment_base_offset", 32, 8),
    ("segment_data_size", 40, 8),
)


def _header(rng, data: bytes, fields) -> tuple[str, bytes]:
    name, offset, width = rng.choice(fields)
    old = int.from_bytes(data[offset : offset + width], "little")
    new = rng.choice(
        (
            old - 1,
            old + 1,
            old + 8,
            old - 8,
            len(data),
            len(data) + 1,
            0,
            old * 2,
            (1 << (8 * width)) - 1,
        )
    ) % (1 << (8 * width))
    buffer = bytearray(data)
    buffer[offset : offset + width] = new.to_bytes(width, "little")
    return f"header {name} {old} -> {new}", bytes(buffer)


def _ptd_mutation(rng, path: Path) -> tuple[str, bytes]:
    data = path.read_bytes()
    if rng.random() < 0.25:
        return _header(rng, data, PTD_HEADER)
    ptd, table = read_ptd_flat_tensor(path)
    choice = rng.randrange(5)
    entry = _pick(rng, table.namedData or ())
    if choice == 0:
        entry.key = (entry.key or b"") + b".x"
        how = f"named_data key {entry.key!r}"
    elif choice == 1:
        entry.segmentIndex = _near(rng, len(table.segments or ()))
        how = f"named_data segment_index = {entry.segmentIndex}"
    elif choice == 2:
        segment = _pick(rng, table.segments or ())
        field = rng.choice(("offset", "size"))
        end = max(s.offset + s.size for s in table.segments)
        setattr(segment, field, _near(rng, end))
        how = f"segments[{table.segments.index(segment)}].{field} = {getattr(segment, field)}"
    elif choice == 3 and entry.tensorLayout is not None:
        layout = entry.tensorLayout
        if rng.random() < 0.5:
            layout.scalarType = rng.choice((1, 4, 5, 7, 11, 44))
            how = f"named_data tensor_layout.scalar_type = {layout.scalarType}"
        else:
            layout.sizes = list(layout.sizes or []) + [2]
            layout.dimOrder = list(range(len(layout.sizes)))
            how = f"named_data tensor_layout.sizes = {layout.sizes}"
    else:
        table.namedData = [e for e in table.namedData if e is not entry]
        how = f"named_data {entry.key!r} removed"
    flatbuffer = pack_flat_tensor(table)
    base = aligned(len(flatbuffer) + 48, 128)
    return how, ptd_file(flatbuffer, [data[ptd.segment_base_offset :]], [0], base)


def as_is(seeds: Sequence[Seed]) -> Iterator[Mutant]:
    """Each seed unchanged (field "as is")."""
    for seed in seeds:
        yield Mutant(
            seed.name, "as is", "", seed.pte.read_bytes(), tuple(p.read_bytes() for p in seed.ptds)
        )


def mutants(seeds: Sequence[Seed], count: int, seed: int = 0) -> Iterator[Mutant]:
    """`count` mutants of `seeds`, derandomised by `seed`: structured ones mostly, a fifth
    of them `tests.fuzz_files.mutate`'s byte-level ones."""
    originals = {s.name: (s.pte.read_bytes(), tuple(p.read_bytes() for p in s.ptds)) for s in seeds}
    names = sorted(PROGRAM_MUTATIONS)
    index = attempt = 0
    while index < count:
        if attempt > 50 * count + 1000:
            raise ValueError(f"no mutation applies to the seeds {[s.name for s in seeds]}")
        rng = random.Random(f"{seed}:{attempt}")
        attempt += 1
        chosen = seeds[attempt % len(seeds)]
        pte, ptds = originals[chosen.name]
        roll = rng.random()
        try:
            if roll < 0.2:
                target = rng.randrange(1 + len(ptds))
                how, data = mutate(rng, (pte, *ptds)[target])
                field = f"bytes of {'the .pte' if target == 0 else 'the .ptd'}"
                if target == 0:
                    yield Mutant(chosen.name, field, how, data, ptds)
                else:
                    yield Mutant(
                        chosen.name, field, how, pte, ptds[: target - 1] + (data,) + ptds[target:]
                    )
            elif roll < 0.27:
                if pte[8:12] != b"eh00":
                    raise _NotApplicable
                how, data = _header(rng, pte, PTE_HEADER)
                yield Mutant(chosen.name, "pte header", how, data, ptds)
            elif roll < 0.35:
                if not ptds:
                    raise _NotApplicable
                how, data = _ptd_mutation(rng, chosen.ptds[0])
                yield Mutant(chosen.name, "ptd", how, pte, (data,) + ptds[1:])
            else:
                # The mutation first, then a seed it applies to: a field few seeds have
                # (named data, delegates, mutable state) gets its share of the cases.
                name = rng.choice(names)
                for chosen in rng.sample(list(seeds), len(seeds)):
                    pte, ptds = originals[chosen.name]
                    done: list[str] = []

                    def change(program, name=name, rng=rng, done=done):
                        done.append(PROGRAM_MUTATIONS[name](rng, program))

                    try:
                        data = with_program_changed(pte, change)
                    except (_NotApplicable, ValueError):  # ValueError: a seed the reader refuses
                        continue
                    yield Mutant(chosen.name, name, done[0], data, ptds)
                    break
                else:
                    raise _NotApplicable
        except (
            _NotApplicable,
            struct.error,
            OverflowError,
            TypeError,
            AttributeError,
            ValueError,
        ):  # ValueError: a seed's .ptd the reader refuses
            continue
        index += 1
