"""`.pte` and `.ptd` files in layouts other than ExecuTorch 1.5.1's, built with flatbuffers alone.

Imports neither torch nor executorch, so that the file-tool tests run where only
`flatbuffers` is installed:
- `build_program` writes a tiny program from scratch with the generated object
  API (one kernel call reading a constant, optionally a dead constant, constants
  in the `.pte`, in a `.ptd`, or none at all behind a placeholder-only
  `constant_buffer`);
- `relayout` writes an existing `.pte` again as another producer might: every
  default-valued field written out (other vtables), the 24-byte extended
  header of older releases, other segment alignment, extra padding;
- `old_flat_tensor` writes a `.ptd` in the schema of ExecuTorch 0.6 (early 2025);
- `with_program_changed` writes a `.pte` whose program says something else about
  the same segment data (malformed files).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

import flatbuffers

from emitter_filter._program_fbs.executorch_flatbuffer.Buffer import BufferT
from emitter_filter._program_fbs.executorch_flatbuffer.Chain import ChainT
from emitter_filter._program_fbs.executorch_flatbuffer.DataSegment import DataSegmentT
from emitter_filter._program_fbs.executorch_flatbuffer.EValue import EValueT
from emitter_filter._program_fbs.executorch_flatbuffer.ExecutionPlan import ExecutionPlanT
from emitter_filter._program_fbs.executorch_flatbuffer.ExtraTensorInfo import ExtraTensorInfoT
from emitter_filter._program_fbs.executorch_flatbuffer.Instruction import InstructionT
from emitter_filter._program_fbs.executorch_flatbuffer.InstructionArguments import (
    InstructionArguments,
)
from emitter_filter._program_fbs.executorch_flatbuffer.KernelCall import KernelCallT
from emitter_filter._program_fbs.executorch_flatbuffer.KernelTypes import KernelTypes
from emitter_filter._program_fbs.executorch_flatbuffer.Operator import OperatorT
from emitter_filter._program_fbs.executorch_flatbuffer.Program import ProgramT
from emitter_filter._program_fbs.executorch_flatbuffer.ScalarType import ScalarType
from emitter_filter._program_fbs.executorch_flatbuffer.SubsegmentOffsets import (
    SubsegmentOffsetsT,
)
from emitter_filter._program_fbs.executorch_flatbuffer.Tensor import TensorT
from emitter_filter._program_fbs.executorch_flatbuffer.TensorDataLocation import (
    TensorDataLocation,
)
from emitter_filter._program_fbs.flat_tensor_flatbuffer.DataSegment import (
    DataSegmentT as FlatTensorSegmentT,
)
from emitter_filter._program_fbs.flat_tensor_flatbuffer.FlatTensor import FlatTensorT
from emitter_filter._program_fbs.flat_tensor_flatbuffer.NamedData import NamedDataT
from emitter_filter._program_fbs.flat_tensor_flatbuffer.TensorLayout import TensorLayoutT
from emitter_filter.ondisk.read.file_headers import (
    EH,
    EH_MAGIC,
    EH_SEGMENT_DATA_SIZE,
    FH,
    FH_MAGIC,
    PROGRAM_IDENTIFIER,
    aligned,
)
from emitter_filter.ondisk.read.read_pte import read_pte_program
from emitter_filter.program.flatbuffer_tables import to_object_api

LIVE = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)
DEAD = struct.pack("<6f", *range(6))


def _tensor(data_buffer_idx: int = 0, sizes=(4,), fqn: str | None = None) -> EValueT:
    tensor = TensorT()
    tensor.scalarType = ScalarType.FLOAT
    tensor.sizes = list(sizes)
    tensor.dimOrder = list(range(len(sizes)))
    tensor.dataBufferIdx = data_buffer_idx
    if fqn is not None:
        tensor.extraTensorInfo = ExtraTensorInfoT()
        tensor.extraTensorInfo.fullyQualifiedName = fqn
        tensor.extraTensorInfo.location = TensorDataLocation.EXTERNAL
    value = EValueT()
    value.valType, value.val = KernelTypes.Tensor, tensor
    return value


def _plan(values: list[EValueT]) -> ExecutionPlanT:
    call = KernelCallT()
    call.opIndex, call.args = 0, [0, 1, 2]
    instruction = InstructionT()
    instruction.instrArgsType, instruction.instrArgs = InstructionArguments.KernelCall, call
    chain = ChainT()
    chain.inputs, chain.outputs, chain.instructions = [0], [2], [instruction]
    operator = OperatorT()
    operator.name, operator.overload = "aten::add", "out"
    plan = ExecutionPlanT()
    plan.name = "forward"
    plan.values = values
    plan.inputs, plan.outputs = [0], [2]
    plan.chains, plan.operators = [chain], [operator]
    plan.delegates = []  # Method::init refuses a plan without the field ("Missing delegates field")
    plan.nonConstBufferSizes = [0, 32]
    return plan


def pack(program, force_defaults: bool = False) -> bytes:
    """The program flatbuffer as the generated object API packs it (`program` decoded by
    `read_pte_program`, or built with the object API)."""
    builder = flatbuffers.Builder(1024)
    builder.ForceDefaults(force_defaults)
    builder.Finish(to_object_api(program).Pack(builder), file_identifier=PROGRAM_IDENTIFIER)
    return bytes(builder.Output())


def _insert_header(flatbuffer: bytes, header: bytes) -> bytes:
    """The header after the file identifier, the root offset moved past it."""
    root = int.from_bytes(flatbuffer[0:4], "little") + len(header)
    return root.to_bytes(4, "little") + flatbuffer[4:8] + header + flatbuffer[8:]


def ptd_file(flatbuffer: bytes, blobs: list[bytes], offsets: list[int], base: int) -> bytes:
    """A `.ptd`: FH01 header padded to 48 bytes, the flatbuffer, `blobs` at `base + offsets`."""
    end = offsets[-1] + len(blobs[-1]) if blobs else 0
    header = FH.pack(FH_MAGIC, 40, 48, len(flatbuffer), base, end).ljust(48, b"\0")
    out = bytearray(_insert_header(flatbuffer, header))
    for offset, blob in zip(offsets, blobs, strict=True):
        out.extend(bytes(base + offset - len(out)))
        out.extend(blob)
    return bytes(out.ljust(base, b"\0"))


def _with_header(
    flatbuffer: bytes,
    segments: list[bytes],
    offsets: list[int],
    *,
    segment_alignment: int = 128,
    header_length: int = 32,
    padded: int = 32,
) -> bytes:
    """header + flatbuffer + segments at `offsets` (relative to the base)."""
    program_size = padded + len(flatbuffer)
    base = aligned(program_size, segment_alignment)
    data_size = offsets[-1] + len(segments[-1]) if segments else 0
    fields = EH.pack(EH_MAGIC, header_length, program_size, base)
    if header_length >= 32:
        fields += EH_SEGMENT_DATA_SIZE.pack(data_size)
    out = bytearray(_insert_header(flatbuffer, fields.ljust(padded, b"\0")))
    for offset, data in zip(offsets, segments, strict=True):
        out.extend(bytes(base + offset - len(out)))
        out.extend(data)
    return bytes(out)


@dataclass(frozen=True)
class Files:
    pte: bytes
    ptd: bytes | None


def build_program(*, dead: bool, where: str = "segment") -> Files:
    """forward(x) = x + w, with `w` in the constant segment, in a `.ptd`, or inline.

    Args:
        dead: Whether a value and a constant nothing reads come too.
        where: "segment" (the constant segment), "external" (a `.ptd`),
            "placeholder" (no constants at all: `constant_buffer` holds only the
            empty placeholder, no extended header, and `w` is an input).
    """
    program = ProgramT()
    program.version = 0
    if where == "placeholder":
        values = [_tensor(), _tensor(), _tensor()]
        if dead:
            values.append(_tensor())
        plan = _plan(values)
        plan.inputs = chain_inputs = [0, 1]
        plan.chains[0].inputs = chain_inputs
        program.executionPlan = [plan]
        placeholder = BufferT()
        placeholder.storage = b""
        program.constantBuffer = [placeholder]
        return Files(pack(program), None)
    if where == "external":
        values = [_tensor(), _tensor(0, fqn="w"), _tensor()]
        if dead:
            values.append(_tensor(1, sizes=(6,), fqn="unused"))
        program.executionPlan = [_plan(values)]
        program.constantSegment = SubsegmentOffsetsT()
        program.constantSegment.segmentIndex, program.constantSegment.offsets = 0, [0]
        program.segments = [_segment(0, 0)]
        keys = [("w", LIVE, 4)] + ([("unused", DEAD, 6)] if dead else [])
        return Files(pack(program), flat_tensor(keys))
    values = [_tensor(), _tensor(1), _tensor()]
    constants = [LIVE]
    if dead:
        values.append(_tensor(2, sizes=(6,)))
        constants.append(DEAD)
    offsets, data = [0], b""
    for constant in constants:
        data = data.ljust(aligned(len(data), 16), b"\0")
        offsets.append(len(data))
        data += constant
    program.executionPlan = [_plan(values)]
    program.constantSegment = SubsegmentOffsetsT()
    program.constantSegment.segmentIndex, program.constantSegment.offsets = 0, offsets
    program.segments = [_segment(0, len(data))]
    return Files(_with_header(pack(program), [data], [0]), None)


def _segment(offset: int, size: int) -> DataSegmentT:
    segment = DataSegmentT()
    segment.offset, segment.size = offset, size
    return segment


def flat_tensor(keys: list[tuple[str, bytes, int]], segment_alignment: int = 128) -> bytes:
    """A `.ptd` as ExecuTorch 1.5.1 lays it out, packed with the generated object API."""
    from emitter_filter.ondisk.write.ptd_writer import pack_flat_tensor

    table = FlatTensorT()
    table.version, table.segments, table.namedData = 0, [], []
    end = 0
    for index, (key, data, numel) in enumerate(keys):
        segment = FlatTensorSegmentT()
        segment.offset, segment.size = aligned(end, segment_alignment), len(data)
        end = segment.offset + segment.size
        table.segments.append(segment)
        entry = NamedDataT()
        entry.key, entry.segmentIndex = key, index
        entry.tensorLayout = TensorLayoutT()
        entry.tensorLayout.scalarType = ScalarType.FLOAT
        entry.tensorLayout.sizes, entry.tensorLayout.dimOrder = [numel], [0]
        table.namedData.append(entry)
    flatbuffer = pack_flat_tensor(table)
    base = aligned(len(flatbuffer) + 48, segment_alignment)
    return ptd_file(flatbuffer, [d for _, d, _ in keys], [s.offset for s in table.segments], base)


def old_flat_tensor() -> bytes:
    """A `.ptd` in the schema of ExecuTorch 0.6: FlatTensor{version,
    tensor_alignment, tensors: [TensorMetadata], segments}, same identifier."""
    builder = flatbuffers.Builder(256)
    name = builder.CreateString("w")
    builder.StartObject(6)  # TensorMetadata
    builder.PrependUOffsetTRelativeSlot(0, name, 0)
    builder.PrependInt8Slot(1, ScalarType.FLOAT, 0)
    tensor = builder.EndObject()
    builder.StartVector(4, 1, 4)
    builder.PrependUOffsetTRelative(tensor)
    tensors = builder.EndVector()
    builder.StartObject(2)  # DataSegment
    builder.PrependUint64Slot(1, 16, 0)
    segment = builder.EndObject()
    builder.StartVector(4, 1, 4)
    builder.PrependUOffsetTRelative(segment)
    segments = builder.EndVector()
    builder.StartObject(4)
    builder.PrependUint32Slot(1, 16, 0)
    builder.PrependUOffsetTRelativeSlot(2, tensors, 0)
    builder.PrependUOffsetTRelativeSlot(3, segments, 0)
    builder.Finish(builder.EndObject(), file_identifier=b"FT01")
    flatbuffer = bytes(builder.Output())
    return ptd_file(flatbuffer, [LIVE], [0], aligned(len(flatbuffer) + 48, 128))


def relayout(
    pte: bytes,
    *,
    force_defaults: bool = False,
    header_length: int = 32,
    segment_alignment: int = 128,
    padded: int = 32,
) -> bytes:
    """`pte` written again as another producer might, the same program and bytes.

    Args:
        force_defaults: Write every default-valued field (other vtables and tables).
        header_length: 24 for the extended header of older releases.
        segment_alignment: Where each segment starts.
        padded: The bytes the extended header takes.
    """
    read = read_pte_program(pte)
    program, data = read.program, read.program_data
    segments = []
    base = int.from_bytes(data[24:32], "little") if data[8:12] == EH_MAGIC else 0
    for segment in program.segments or ():
        segments.append(pte[base + segment.offset : base + segment.offset + segment.size])
    offsets, end = [], 0
    for blob in segments:
        offsets.append(aligned(end, segment_alignment))
        end = offsets[-1] + len(blob)
    if program.segments is not None:
        program.segments = [_segment(o, len(b)) for o, b in zip(offsets, segments, strict=True)]
    flatbuffer = pack(program, force_defaults)
    if not end:
        return flatbuffer
    return _with_header(
        flatbuffer,
        segments,
        offsets,
        segment_alignment=segment_alignment,
        header_length=header_length,
        padded=padded,
    )


def build_constants(
    constants: list[bytes],
    dead: frozenset[int],
    *,
    tensor_alignment: int = 16,
    segment_alignment: int = 128,
    header_length: int = 32,
    padded: int = 32,
    force_defaults: bool = False,
) -> bytes:
    """A program reading each constant but those in `dead` once, laid out as asked.

    Values are [x, one tensor per constant, out], one `add` per live constant;
    the dead constants' values are in the plan and nothing reads them. With no
    dead constant, it is the program `prune` must write for one with them.
    """
    values = [_tensor()]
    for index, constant in enumerate(constants):
        values.append(_tensor(index + 1, sizes=(len(constant) // 4,)))
    values.append(_tensor())
    out = len(values) - 1
    instructions = []
    for index in range(len(constants)):
        if index in dead:
            continue
        call = KernelCallT()
        call.opIndex, call.args = 0, [0, index + 1, out]
        instruction = InstructionT()
        instruction.instrArgsType, instruction.instrArgs = InstructionArguments.KernelCall, call
        instructions.append(instruction)
    plan = _plan(values)
    plan.outputs = plan.chains[0].outputs = [out]
    plan.chains[0].instructions = instructions
    offsets, data = [0], b""
    for index, constant in enumerate(constants):
        if index:
            data = data.ljust(aligned(len(data), tensor_alignment), b"\0")
        offsets.append(len(data))
        data += constant
    program = ProgramT()
    program.executionPlan = [plan]
    program.constantSegment = SubsegmentOffsetsT()
    program.constantSegment.segmentIndex, program.constantSegment.offsets = 0, offsets
    program.segments = [_segment(0, len(data))]
    flatbuffer = pack(program, force_defaults)
    if not data:
        return flatbuffer
    return _with_header(
        flatbuffer,
        [data],
        [0],
        segment_alignment=segment_alignment,
        header_length=header_length,
        padded=padded,
    )


def without(constants: list[bytes], dead: frozenset[int]) -> list[bytes]:
    return [c for i, c in enumerate(constants) if i not in dead]


def with_program_changed(pte: bytes, change: Callable[[object], None]) -> bytes:
    """`pte` with `change(program)` applied to its program, its segment data as it was.

    For files no writer makes (a hostile or corrupt input): the segment data is
    kept byte for byte at the same offsets relative to the base, whatever the
    changed program says about it.
    """
    read = read_pte_program(pte)
    change(read.program)
    data = pte[read.pte.segment_base_offset :]
    return _with_header(pack(read.program), [data], [0])
