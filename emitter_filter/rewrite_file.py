"""Prune a `.pte` file (and its `.ptd` files) on disk, streaming the constant bytes.

`prune_file` writes the file `to_executorch(prune_constants=True)` writes for the
same model, without importing torch or `executorch.exir`:

    in.pte   [header | program | constant: P W UB | delegate | named: k0 k1]
    out.pte  [header | program'| constant: P W    | delegate | named: k0   ]

1. Analyse: `pte_file.read_pte_program` reads headers and the program flatbuffer;
   `reachability.find_live` finds the kept values and data entries, and
   `reachability.order_live_data` renumbers them in first-reference order, the
   rule `emitted.py` uses in memory; `pte_file.classify_file_named_data` decides
   which named data no delegate reaches, as the hook does and as `audit` counts.
2. Validate and lay out every output byte before anything is written.
3. Rewrite the unpacked program (values compacted in order, every value and
   `data_buffer_idx` renumbered in `_remap_plan`), pack it with the generated
   object API as `exir/_serialize/_flatbuffer_program.py` does, and stream the
   kept segment bytes from the input into a temporary file beside the output,
   renamed over it only once complete.

Byte identity. The program flatbuffer, header and segment layout follow
`exir/_serialize/_program.py:serialize_pte_binary`; the alignments it was given
(`segment_alignment`, `constant_tensor_alignment`, named-data alignments) are not
stored in the file, so they are inferred from its offsets, preferring
ExecuTorch's defaults (128, 16) when the offsets allow them. Where the offsets
cannot tell (an alignment no entry's padding reveals, a constant whose storage is
longer than its tensor and that becomes the segment's last entry, a
`delegate_alignment` above 32) the output is the same program with the same
bytes but may be laid out differently. A `.ptd` flatbuffer is written, as
ExecuTorch writes it, by the wheel's `flatc` from JSON (one short subprocess
per `.ptd`).

Never touched: the input files (opened read-only), instructions, operators,
delegates and their blobs, and constant bytes (copied, never reinterpreted).
"""

from __future__ import annotations

import errno
import importlib.util
import json
import logging
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import flatbuffers

from emitter_filter._program_fbs.executorch_flatbuffer.DataLocation import DataLocation
from emitter_filter._program_fbs.executorch_flatbuffer.DataSegment import DataSegmentT
from emitter_filter._program_fbs.executorch_flatbuffer.InstructionArguments import (
    InstructionArguments,
)
from emitter_filter._program_fbs.executorch_flatbuffer.KernelTypes import KernelTypes
from emitter_filter._program_fbs.executorch_flatbuffer.SubsegmentOffsets import (
    SubsegmentOffsetsT,
)
from emitter_filter._program_fbs.executorch_flatbuffer.TensorDataLocation import (
    TensorDataLocation,
)
from emitter_filter._program_fbs.flat_tensor_flatbuffer.DataSegment import (
    DataSegmentT as FlatTensorDataSegmentT,
)
from emitter_filter.audit import analyse_file
from emitter_filter.errors import InvariantError, OutputFileError, UnsupportedExecutorchError
from emitter_filter.named_data import NamedDataUse
from emitter_filter.pte_file import (
    ByteSource,
    PteFile,
    PteFormatError,
    read_ptd_flat_tensor,
    read_pte_program,
)
from emitter_filter.reachability import (
    DataSpace,
    Liveness,
    PlanRefs,
    new_data_indices,
    order_live_data,
    value_remapper,
)
from emitter_filter.reports import DroppedConstant

from emitter_filter.state_names import StateFile, state_file

__all__ = ["FilePruneReport", "prune_file"]

logger = logging.getLogger(__name__)

# Layout constants of exir/_serialize/_program.py and
# extension/flat_tensor/serialize/serialize.py; keep in sync.
_PROGRAM_IDENTIFIER = b"ET12"
_EH_MAGIC = b"eh00"
_EH_LENGTH = 32  # _ExtendedHeader.EXPECTED_LENGTH
_FH_MAGIC = b"FH01"
_FH_LENGTH = 40  # FlatTensorHeader.EXPECTED_LENGTH
_FH_PADDED_LENGTH = 48  # aligned to _FLATBUFFER_ALIGNMENT (16)
_DEFAULT_SEGMENT_ALIGNMENT = 128  # serialize_pte_binary, FlatTensorConfig
_DEFAULT_TENSOR_ALIGNMENT = 16  # exir.tensor.ALIGNMENT
_SCHEMA_FORCE_ALIGN = 16  # program.fbs force_align of Buffer.storage and inline delegate data
_MAX_ALIGNMENT = 1 << 16
# Bytes per copy call: bounds memory on the fallback path and paces progress reports.
_COPY_CHUNK = 64 << 20

ProgressFn = Callable[[int, int], None]


@dataclass(frozen=True)
class FilePruneReport:
    """What `prune_file` wrote and dropped.

    Attributes:
        path: The input `.pte`.
        output: The `.pte` written.
        ptd_outputs: For each input `.ptd`, the file written, or None when none
            of its keys is live (ExecuTorch writes no `.ptd` for such a tag).
        bytes_before: Size of the input files together.
        bytes_after: Size of the output files together.
        dropped: The dropped data entries, named data and segments (the input's
            own indices; see `AuditReport.dead`).
        dropped_values: Values no root of their plan reaches.
        dropped_named_data: Named-data keys no delegate reaches, in file order.
        kept_unprovable: Named-data keys kept only because an opaque delegate may read them.
        seconds: Wall time of the whole prune.
    """

    path: str
    output: str
    ptd_outputs: tuple[tuple[str, str | None], ...]
    bytes_before: int
    bytes_after: int
    dropped: tuple[DroppedConstant, ...]
    dropped_values: int
    dropped_named_data: tuple[str, ...]
    kept_unprovable: tuple[str, ...]
    seconds: float

    def summary(self) -> str:
        """One line, for the log and the CLI."""
        dropped_bytes = sum(d.nbytes for d in self.dropped)
        line = (
            f"{self.path} -> {self.output}: {self.bytes_before:,} -> {self.bytes_after:,} B; "
            f"dropped {len(self.dropped)} entries ({dropped_bytes:,} B), "
            f"{self.dropped_values} values, {len(self.dropped_named_data)} named data"
        )
        if self.kept_unprovable:
            line += f"; kept {len(self.kept_unprovable)} unprovable named data"
        return line + f" in {self.seconds * 1e3:.1f} ms"


@dataclass(frozen=True)
class _Piece:
    """`nbytes` bytes at absolute `offset` of an input file, then `pad` zero bytes."""

    fd: int
    offset: int
    nbytes: int
    pad: int


@dataclass
class _OutSegment:
    """One segment of an output: its own alignment, its pieces, and (once laid out) its offset."""

    alignment: int
    pieces: list[_Piece]
    offset: int = 0

    @property
    def size(self) -> int:
        return sum(p.nbytes + p.pad for p in self.pieces)


def _aligned(size: int, alignment: int) -> int:
    return (size + alignment - 1) // alignment * alignment


def _powers_of_two() -> list[int]:
    return [1 << k for k in range(_MAX_ALIGNMENT.bit_length())]


# --- inferring the alignments the serializer was given ---------------------------------


def _infer_tensor_alignment(offsets: Sequence[int], known: dict[int, int]) -> int:
    """`constant_tensor_alignment`: each entry but the last is padded to it."""

    def consistent(alignment: int) -> bool:
        if any(o % alignment for o in offsets):
            return False
        return all(
            offsets[i + 1] - offsets[i] == _aligned(n, alignment)
            for i, n in known.items()
            if i + 1 < len(offsets)
        )

    if consistent(_DEFAULT_TENSOR_ALIGNMENT):
        return _DEFAULT_TENSOR_ALIGNMENT
    for alignment in _powers_of_two():
        if consistent(alignment):
            return alignment
    # A storage longer than its tensor hides the padding: keep the offsets' alignment.
    fallback = max((a for a in _powers_of_two() if not any(o % a for o in offsets)), default=1)
    logger.warning("constant offsets fit no tensor alignment; using %d", fallback)
    return fallback


def _infer_segment_alignment(
    base: int, header_end: int, segments: Sequence[tuple[int, int]], plain: Sequence[bool]
) -> tuple[int, list[int]]:
    """(`segment_alignment`, each segment's own alignment) from the segment offsets.

    Args:
        base: The segment base offset.
        header_end: Where the data before the segments ends (program or flatbuffer).
        segments: (offset relative to `base`, size), in index order.
        plain: Whether each segment has no alignment of its own (constant,
            mutable, delegate) as opposed to named data (`DataEntry.alignment`).
    """

    def own_alignments(alignment: int) -> list[int] | None:
        if _aligned(header_end, alignment) != base:
            return None
        result, end = [], 0
        for (offset, size), is_plain in zip(segments, plain):
            if offset % alignment or offset < _aligned(end, alignment):
                return None
            if is_plain:
                if offset != _aligned(end, alignment):
                    return None
                result.append(alignment)
            else:
                fits = (p for p in _powers_of_two() if p >= alignment and _aligned(end, p) == offset)
                result.append(next(fits, alignment))
            end = offset + size
        return result

    for alignment in (_DEFAULT_SEGMENT_ALIGNMENT, *_powers_of_two()):
        found = own_alignments(alignment)
        if found is not None:
            return alignment, found
    logger.warning("segment offsets fit no alignment; using %d", _DEFAULT_SEGMENT_ALIGNMENT)
    return _DEFAULT_SEGMENT_ALIGNMENT, [_DEFAULT_SEGMENT_ALIGNMENT] * len(segments)


# --- the rewrite of the unpacked program ---------------------------------------------


def _ints(vector) -> list[int]:
    return [] if vector is None else [int(i) for i in vector]


def _remap_plan(
    plan, refs: PlanRefs, live: Sequence[int], data_index: dict[DataSpace, dict[int, int]]
) -> None:
    """Compacts one generated `ExecutionPlanT` to `live` and renumbers it; the only remap.

    Builds the old-to-new value map, patches every field holding a value index
    (the same fields as `emitted._remap_values`), then renumbers each kept
    Tensor's `data_buffer_idx` from the `refs` snapshot, checking that everything
    patched was kept.
    """
    remap = value_remapper(refs.name, refs.num_values, live)

    def remap_all(indices) -> list[int]:
        return [remap(i) for i in _ints(indices)]

    values = plan.values or []
    plan.values = [values[old] for old in live]
    plan.inputs = remap_all(plan.inputs)
    plan.outputs = remap_all(plan.outputs)
    for chain in plan.chains or ():
        chain.inputs = remap_all(chain.inputs)
        chain.outputs = remap_all(chain.outputs)
        for instruction in chain.instructions or ():
            kind, args = instruction.instrArgsType, instruction.instrArgs
            if kind in (InstructionArguments.KernelCall, InstructionArguments.DelegateCall):
                args.args = remap_all(args.args)
            elif kind == InstructionArguments.MoveCall:
                args.moveFrom, args.moveTo = remap(args.moveFrom), remap(args.moveTo)
            elif kind == InstructionArguments.JumpFalseCall:
                args.condValueIndex = remap(args.condValueIndex)
            elif kind == InstructionArguments.FreeCall:
                args.valueIndex = remap(args.valueIndex)
    for new_value, old_value in enumerate(live):
        evalue = plan.values[new_value]
        kind, val = evalue.valType, evalue.val
        if kind == KernelTypes.OptionalTensorList:
            val.items = [-1 if i == -1 else remap(i) for i in _ints(val.items)]
        elif kind in (KernelTypes.IntList, KernelTypes.TensorList):
            val.items = remap_all(val.items)
        ref = refs.data_refs.get(old_value)
        if ref is not None:
            try:
                val.dataBufferIdx = data_index[ref.space][ref.index]
            except KeyError:
                raise InvariantError(
                    f"plan {refs.name!r} value {old_value}: {ref.space.value} entry "
                    f"{ref.index} is used but was dropped"
                ) from None


@dataclass(frozen=True)
class _PtdPlan:
    """A pruned `.ptd`: its kept named data and segments, laid out by `_pack_ptd`."""

    path: str
    output: str
    flat_tensor: object
    segments: list[_OutSegment]
    segment_alignment: int


@dataclass
class _Plan:
    """Every byte of the outputs, decided before any is written."""

    program_data: bytes
    segment_base_offset: int
    segments: list[_OutSegment]
    ptds: list[_PtdPlan]


def _subsegment_spans(offsets: Sequence[int], segment_size: int) -> list[int]:
    return [
        (offsets[i + 1] if i + 1 < len(offsets) else segment_size) - offsets[i]
        for i in range(len(offsets))
    ]


def _constant_segment(
    pte: PteFile, program, fd: int, order: Sequence[int]
) -> tuple[_OutSegment, list[int], int]:
    """The new constant segment, its offsets, and the tensor alignment used."""
    offsets = _ints(program.constantSegment.offsets)
    segment = pte.segments[program.constantSegment.segmentIndex]
    spans = _subsegment_spans(offsets, segment.size)
    entries = pte.entries[DataSpace.CONSTANT]
    alignment = _infer_tensor_alignment(offsets, {i: e.nbytes for i, e in entries.items()})
    last = len(offsets) - 1
    kept = [0, *order]
    pieces, new_offsets, at = [], [], 0
    for position, index in enumerate(kept):
        # A span holds the entry padded to the alignment, except for the last
        # entry, which the serializer leaves unpadded.
        nbytes = entries[index].nbytes
        if index != last and _aligned(nbytes, alignment) == spans[index]:
            raw = nbytes
        else:
            # Never fewer bytes than the tensor reads, even where entries overlap.
            raw = max(nbytes, spans[index])
        pad = 0 if position == len(kept) - 1 else _aligned(raw, alignment) - raw
        new_offsets.append(at)
        pieces.append(_Piece(fd, segment.offset + offsets[index], raw, pad))
        at += raw + pad
    return _OutSegment(1, pieces), new_offsets, alignment


def _mutable_segment(
    pte: PteFile, program, fd: int, order: Sequence[int]
) -> tuple[_OutSegment, list[int]] | None:
    """The new mutable data segment and its offsets; None when no data is left."""
    subsegment = program.mutableDataSegments[0]
    offsets = _ints(subsegment.offsets)
    if not offsets:
        # Not even the placeholder: no tensor can refer to mutable data (read_pte checked).
        return None
    segment = pte.segments[subsegment.segmentIndex]
    spans = _subsegment_spans(offsets, segment.size)
    pieces, new_offsets, at = [], [], 0
    # Mutable data is not padded: it is copied into the arena at load.
    entries = pte.entries[DataSpace.MUTABLE]
    for index in [0, *order]:
        # Never fewer bytes than the tensor reads, even where entries overlap.
        size = max(spans[index], entries[index].nbytes)
        new_offsets.append(at)
        pieces.append(_Piece(fd, segment.offset + offsets[index], size, 0))
        at += size
    if at == 0:
        return None
    return _OutSegment(1, pieces), new_offsets


def _layout_segments(
    out: list[_OutSegment], alignment: int
) -> tuple[list[tuple[int, int]], int]:
    """(offset, size) of each segment relative to the base, and the data size."""
    placed, end = [], 0
    for segment in out:
        offset = _aligned(end, max(alignment, segment.alignment))
        placed.append((offset, segment.size))
        end = offset + segment.size
    return placed, end


def _plan_ptd(
    path: str,
    output: str,
    fd: int,
    keep: Callable[[str], bool],
) -> _PtdPlan | None:
    _, flat_tensor, base = read_ptd_flat_tensor(path)
    segments = list(flat_tensor.segments or ())
    named = [e for e in (flat_tensor.namedData or ()) if keep(_text(e.key))]
    if not named:
        return None
    # FlatTensorHeader (read_ptd checked it): the flatbuffer's offset and size at [16:32].
    head = os.pread(fd, 32, 0)
    fb_offset = int.from_bytes(head[16:24], "little")
    fb_size = int.from_bytes(head[24:32], "little")
    alignment, own = _infer_segment_alignment(
        base, fb_offset + fb_size, [(s.offset, s.size) for s in segments], [False] * len(segments)
    )
    new_index: dict[int, int] = {}
    out: list[_OutSegment] = []
    for entry in named:
        old = entry.segmentIndex
        if old not in new_index:
            new_index[old] = len(out)
            source = segments[old]
            out.append(_OutSegment(own[old], [_Piece(fd, base + source.offset, source.size, 0)]))
        entry.segmentIndex = new_index[old]
    flat_tensor.namedData = named
    return _PtdPlan(path, output, flat_tensor, out, alignment)


def _pack_ptd(plan: _PtdPlan) -> tuple[bytes, int, int, list[tuple[int, int]]]:
    """(header and flatbuffer, segment base offset, data size, placed segments) of a `.ptd`."""
    placed, data_size = _layout_segments(plan.segments, plan.segment_alignment)
    plan.flat_tensor.segments = [
        _flat_tensor_segment(offset, size) for offset, size in placed
    ]
    flatbuffer = _compile_flat_tensor(plan.flat_tensor)
    base = _aligned(len(flatbuffer) + _FH_PADDED_LENGTH, plan.segment_alignment)
    header = (
        _FH_MAGIC
        + _FH_LENGTH.to_bytes(4, "little")
        + _FH_PADDED_LENGTH.to_bytes(8, "little")
        + len(flatbuffer).to_bytes(8, "little")
        + base.to_bytes(8, "little")
        + data_size.to_bytes(8, "little")
    ).ljust(_FH_PADDED_LENGTH, b"\0")
    data = _insert_header(flatbuffer, header)
    return data, base, data_size, placed


def _flat_tensor_json(flat_tensor) -> str:
    """The JSON `FlatTensorSerializer` hands flatc: its dataclasses' fields, in their order."""

    def layout(value):
        if value is None:
            return None
        return {
            "scalar_type": value.scalarType,
            "sizes": _ints(value.sizes),
            "dim_order": _ints(value.dimOrder),
        }

    return json.dumps({
        "version": flat_tensor.version,
        "segments": [{"offset": s.offset, "size": s.size} for s in flat_tensor.segments or ()],
        "named_data": [
            {
                "key": _text(entry.key),
                "segment_index": entry.segmentIndex,
                "tensor_layout": layout(entry.tensorLayout),
            }
            for entry in flat_tensor.namedData or ()
        ],
    })


def _executorch_file(*parts: str) -> str:
    """A file shipped in the executorch wheel, found without importing executorch."""
    spec = importlib.util.find_spec("executorch")
    if spec is None or not spec.submodule_search_locations:
        raise UnsupportedExecutorchError("executorch is not installed")
    return os.path.join(list(spec.submodule_search_locations)[0], *parts)


def _compile_flat_tensor(flat_tensor) -> bytes:
    """Packs a `.ptd` flatbuffer with the wheel's flatc, from JSON, as ExecuTorch does.

    `extension/flat_tensor/serialize/serialize.py:_serialize_to_flatbuffer` writes
    it this way; flatc lays tables out in its own order, which the Python
    builder does not reproduce, so this is what keeps the `.ptd` byte-identical.
    """
    flatc = _executorch_file("data", "bin", "flatc")
    schemas = _executorch_file("extension", "flat_tensor", "serialize")
    with tempfile.TemporaryDirectory(prefix="emitter-filter-") as directory:
        for name in ("flat_tensor.fbs", "scalar_type.fbs"):
            shutil.copyfile(os.path.join(schemas, name), os.path.join(directory, name))
        json_path = os.path.join(directory, "flat_tensor.json")
        with open(json_path, "w", encoding="ascii") as f:
            f.write(_flat_tensor_json(flat_tensor))
        try:
            subprocess.run(
                [flatc, "--binary", "-o", directory,
                 os.path.join(directory, "flat_tensor.fbs"), json_path],
                check=True, capture_output=True,
            )
        except (OSError, subprocess.CalledProcessError) as error:
            detail = getattr(error, "stderr", b"") or b""
            raise UnsupportedExecutorchError(
                f"{flatc} could not write the .ptd flatbuffer: {error}; "
                f"{detail.decode(errors='replace').strip()}"
            ) from error
        with open(os.path.join(directory, "flat_tensor.ptd"), "rb") as f:
            return f.read()


def _flat_tensor_segment(offset: int, size: int):
    segment = FlatTensorDataSegmentT()
    segment.offset, segment.size = offset, size
    return segment


def _insert_header(flatbuffer: bytes, header: bytes) -> bytes:
    """`_insert_flatbuffer_header`: the header goes after the identifier, the root offset moves."""
    root = int.from_bytes(flatbuffer[0:4], "little") + len(header)
    return root.to_bytes(4, "little") + flatbuffer[4:8] + header + flatbuffer[8:]


def _plan_pte(
    pte: PteFile,
    program,
    liveness: Liveness,
    use: NamedDataUse,
    fd: int,
    ptd_inputs: Sequence[tuple[str, str, int]],
) -> _Plan:
    """Decides every output byte; rewrites `program` (our own unpacked copy) in place."""
    order = order_live_data(pte.plans, liveness)

    data_index = new_data_indices(order)

    external_fqns = {t.name for t in pte.tensors if t.ref.space is DataSpace.EXTERNAL}
    dead_keys = frozenset(use.dead)
    live_fqns = _live_external_names(program, liveness)

    segments = [(s.offset - pte.segment_base_offset, s.size) for s in pte.segments]
    out: list[_OutSegment] = []
    alignment = _DEFAULT_SEGMENT_ALIGNMENT
    tensor_alignment = _DEFAULT_TENSOR_ALIGNMENT
    if pte.segment_base_offset:
        named_segments = {e.segmentIndex for e in program.namedData or ()}
        alignment, own = _infer_segment_alignment(
            pte.segment_base_offset,
            pte.program_size,
            segments,
            [i not in named_segments for i in range(len(segments))],
        )
    else:
        # No extended header: every segment is empty; nothing to infer.
        own = [_DEFAULT_SEGMENT_ALIGNMENT] * len(segments)

    if program.constantSegment is not None and _ints(program.constantSegment.offsets):
        constant, offsets, tensor_alignment = _constant_segment(
            pte, program, fd, order[DataSpace.CONSTANT]
        )
        program.constantSegment = SubsegmentOffsetsT()
        program.constantSegment.segmentIndex = len(out)
        program.constantSegment.offsets = offsets
        out.append(constant)
    if program.mutableDataSegments:
        mutable = _mutable_segment(pte, program, fd, order[DataSpace.MUTABLE])
        if mutable is None:
            program.mutableDataSegments = None
        else:
            subsegment = SubsegmentOffsetsT()
            subsegment.segmentIndex, subsegment.offsets = len(out), mutable[1]
            program.mutableDataSegments = [subsegment]
            out.append(mutable[0])

    # Delegate segments, then named data, each in first-reference order, as
    # `_extract_delegate_segments` and `_extract_named_data` append them.
    delegate_segment: dict[int, int] = {}
    for plan in program.executionPlan or ():
        for delegate in plan.delegates or ():
            if delegate.processed.location != DataLocation.SEGMENT:
                continue
            old = delegate.processed.index
            if old not in delegate_segment:
                delegate_segment[old] = len(out)
                source = pte.segments[old]
                out.append(_OutSegment(1, [_Piece(fd, source.offset, source.size, 0)]))
            delegate.processed.index = delegate_segment[old]
    named_segment: dict[int, int] = {}
    kept_named = []
    for entry in program.namedData or ():
        if _text(entry.key) in dead_keys:
            continue
        old = entry.segmentIndex
        if old not in named_segment:
            named_segment[old] = len(out)
            source = pte.segments[old]
            out.append(_OutSegment(own[old], [_Piece(fd, source.offset, source.size, 0)]))
        entry.segmentIndex = named_segment[old]
        kept_named.append(entry)
    if program.namedData is not None:
        program.namedData = kept_named

    for plan, refs, live in zip(program.executionPlan or (), pte.plans, liveness.live_values):
        _remap_plan(plan, refs, live, data_index)

    placed, data_size = _layout_segments(out, alignment)
    program.segments = [_program_segment(offset, size) for offset, size in placed]
    builder = flatbuffers.Builder(1024)
    builder.Finish(program.Pack(builder), file_identifier=_PROGRAM_IDENTIFIER)
    flatbuffer = bytes(builder.Output())
    if data_size == 0:
        # Like serialize_pte_binary: no segment data, no extended header.
        program_data, base = flatbuffer, 0
    else:
        max_alignment = max(_SCHEMA_FORCE_ALIGN, tensor_alignment)
        padded = _aligned(_EH_LENGTH, max_alignment)
        program_size = padded + len(flatbuffer)
        base = _aligned(program_size, alignment)
        header = (
            _EH_MAGIC
            + _EH_LENGTH.to_bytes(4, "little")
            + program_size.to_bytes(8, "little")
            + base.to_bytes(8, "little")
            + data_size.to_bytes(8, "little")
        ).ljust(padded, b"\0")
        program_data = _insert_header(flatbuffer, header)
    for segment, (offset, _) in zip(out, placed):
        segment.offset = offset

    def keep_ptd_key(key: str) -> bool:
        if key in external_fqns:
            return key in live_fqns
        return key not in dead_keys

    ptds = []
    for path, output, ptd_fd in ptd_inputs:
        ptd_plan = _plan_ptd(path, output, ptd_fd, keep_ptd_key)
        if ptd_plan is not None:
            ptds.append(ptd_plan)
    return _Plan(
        program_data=program_data,
        segment_base_offset=base,
        segments=out,
        ptds=ptds,
    )


def _live_external_names(program, liveness) -> set[str]:
    """`fully_qualified_name` of every live EXTERNAL tensor: the `.ptd` keys still read."""
    names = set()
    for plan, live in zip(program.executionPlan or (), liveness.live_values):
        values = plan.values or []
        for index in live:
            evalue = values[index]
            if evalue.valType != KernelTypes.Tensor or evalue.val.extraTensorInfo is None:
                continue
            info = evalue.val.extraTensorInfo
            if info.location == TensorDataLocation.EXTERNAL and info.fullyQualifiedName:
                names.add(_text(info.fullyQualifiedName))
    return names


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def _program_segment(offset: int, size: int) -> DataSegmentT:
    segment = DataSegmentT()
    segment.offset, segment.size = offset, size
    return segment


# --- writing --------------------------------------------------------------------------


class _Writer:
    """Appends to an output file descriptor, copying input ranges in the kernel where it can."""

    def __init__(self, fd: int, total: int, progress: ProgressFn | None) -> None:
        self.fd = fd
        self.position = 0
        self.total = total
        self.progress = progress
        self._kernel_copy = hasattr(os, "copy_file_range")

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self.fd, view)
            view = view[written:]
        self.position += len(data)

    def zeros(self, count: int) -> None:
        if count:
            self.write(bytes(count))

    def copy(self, src: int, offset: int, count: int) -> None:
        end = offset + count
        while offset < end:
            chunk = min(_COPY_CHUNK, end - offset)
            copied = self._copy_chunk(src, offset, chunk)
            if copied == 0:
                raise PteFormatError(
                    _fd_name(src), f"input ended while copying {count} bytes", offset
                )
            offset += copied
            self.position += copied
            if self.progress is not None:
                self.progress(self.position, self.total)

    def _copy_chunk(self, src: int, offset: int, count: int) -> int:
        if self._kernel_copy:
            try:
                return os.copy_file_range(src, self.fd, count, offset)
            except OSError as error:
                # Filesystems without in-kernel copy: fall back to read and write, as cp does.
                if error.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                    raise
                self._kernel_copy = False
        data = os.pread(src, min(count, 1 << 20), offset)
        self.write(data)
        self.position -= len(data)
        return len(data)


def _fd_name(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return f"fd {fd}"


def _write_segments(writer: _Writer, base: int, segments: Sequence[_OutSegment]) -> None:
    writer.zeros(base - writer.position)
    for segment in segments:
        writer.zeros(base + segment.offset - writer.position)
        for piece in segment.pieces:
            writer.copy(piece.fd, piece.offset, piece.nbytes)
            writer.zeros(piece.pad)


def _open_temp(dst: str, mode: int) -> tuple[int, str]:
    directory = os.path.dirname(os.path.abspath(dst))
    try:
        fd, temp = tempfile.mkstemp(
            dir=directory, prefix=f".{os.path.basename(dst)}.", suffix=".tmp"
        )
        os.fchmod(fd, mode)
    except OSError as error:
        raise OutputFileError(f"{dst}: cannot write: {error.strerror}") from error
    return fd, temp


def _open_input(path: str, opened: list[int]) -> int:
    """Opens an input read-only (it is never written) and records it for closing."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as error:
        raise PteFormatError(path, f"cannot open: {error.strerror}") from error
    opened.append(fd)
    return fd


def _same_file(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _check_outputs(inputs: Sequence[str], outputs: Sequence[str]) -> None:
    for output in outputs:
        for source in inputs:
            if _same_file(source, output):
                raise OutputFileError(
                    f"{output}: is the input {source}; prune never overwrites its input"
                )
    if len({os.path.realpath(o) for o in outputs}) != len(outputs):
        raise OutputFileError(f"two outputs would be written to the same file: {list(outputs)}")


def prune_file(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    ptd_paths: Sequence[str | os.PathLike] = (),
    ptd_out: str | os.PathLike | None = None,
    *,
    progress: ProgressFn | None = None,
    keep_constants: Sequence[str] = (),
    names: str | os.PathLike | StateFile | None = None,
) -> FilePruneReport:
    """Writes `src` without the constants and named data its program cannot reach.

    The output is the program `to_executorch(prune_constants=True)` writes for
    the same model (see the module docstring for where its layout may differ).
    Segment bytes are streamed, so memory stays flat whatever the file size.

    Args:
        src: The `.pte` to prune. Not modified.
        dst: Where to write the pruned `.pte`; must not be `src`. Written
            atomically: a temporary file in its directory, renamed over it once
            complete; on any error nothing is left behind.
        ptd_paths: The `.ptd` files with the program's external constants and
            delegate data. Not modified.
        ptd_out: The directory for the pruned `.ptd` files, written under their
            input names (required with `ptd_paths`). A `.ptd` left with no live
            key is not written, as ExecuTorch writes none for such a tag.
        progress: Called with (bytes written, bytes to write) as data is copied.
        keep_constants: `fnmatch` patterns of FQNs to keep, as `audit_file` takes them.
        names: The model's `.pt2` or ETRecord, as `audit_file` takes it.

    Returns:
        What was written and dropped.

    Raises:
        PteFormatError: A file is malformed, or the `.ptd` does not match the `.pte`.
        ProgramFormatError: The program refers to something that does not exist.
        OutputFileError: An output would replace an input, or cannot be written.
    """
    started = time.perf_counter()
    src, dst = os.fspath(src), os.fspath(dst)
    ptd_paths = [os.fspath(p) for p in ptd_paths]
    if ptd_paths and ptd_out is None:
        raise OutputFileError(f"{dst}: .ptd inputs given without a directory for their outputs")
    ptd_outputs = [os.path.join(os.fspath(ptd_out), os.path.basename(p)) for p in ptd_paths]
    _check_outputs([src, *ptd_paths], [dst, *ptd_outputs])

    pte, program = read_pte_program(src, ptd_paths)
    with ByteSource(src) as source:
        analysis = analyse_file(pte, {pte.path: source}, keep_constants, state_file(names))
    pte, liveness, use = analysis.pte, analysis.liveness, analysis.use
    # Unused inline delegate blobs stay: the rewrite never touches backend_delegate_data.
    dropped = tuple(d for d in analysis.dead if d.space != "delegate")
    dropped_values = liveness.dead_value_count(pte.plans)

    opened: list[int] = []
    # [fd or None once closed, temporary path, final path], one per output.
    temps: list[list] = []
    try:
        fd = _open_input(src, opened)
        ptd_inputs = [
            (path, output, _open_input(path, opened))
            for path, output in zip(ptd_paths, ptd_outputs)
        ]
        plan = _plan_pte(pte, program, liveness, use, fd, ptd_inputs)
        packed_ptds = [(p, *_pack_ptd(p)) for p in plan.ptds]
        total = plan.segment_base_offset + sum(s.size for s in plan.segments) + sum(
            base + size for _, _, base, size, _ in packed_ptds
        )
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        writer_total = max(total, 1)

        out_fd, temp = _open_temp(dst, mode)
        temps.append([out_fd, temp, dst])
        writer = _Writer(out_fd, writer_total, progress)
        writer.write(plan.program_data)
        if plan.segments and plan.segment_base_offset:
            _write_segments(writer, plan.segment_base_offset, plan.segments)
        written_bytes = writer.position
        ptd_written: dict[str, str] = {}
        for ptd_plan, data, base, _, placed in packed_ptds:
            for segment, (offset, _) in zip(ptd_plan.segments, placed):
                segment.offset = offset
            ptd_fd, ptd_temp = _open_temp(ptd_plan.output, mode)
            temps.append([ptd_fd, ptd_temp, ptd_plan.output])
            ptd_writer = _Writer(ptd_fd, writer_total, progress)
            ptd_writer.write(data)
            _write_segments(ptd_writer, base, ptd_plan.segments)
            ptd_written[ptd_plan.path] = ptd_plan.output
            written_bytes += ptd_writer.position
        for entry in temps:
            os.close(entry[0])
            entry[0] = None
        # The .ptd files first: a new .pte must never sit beside stale .ptd files.
        for index in [*range(1, len(temps)), 0]:
            _, temp, final = temps[index]
            try:
                os.replace(temp, final)
            except OSError as error:
                raise OutputFileError(f"{final}: cannot write: {error.strerror}") from error
        temps.clear()
    except OSError as error:
        raise OutputFileError(f"{dst}: {error.strerror or error}") from error
    finally:
        for out_fd, temp, _ in temps:
            if out_fd is not None:
                os.close(out_fd)
            try:
                os.unlink(temp)
            except FileNotFoundError:
                pass  # Renamed into place before a later output failed.
        for input_fd in opened:
            os.close(input_fd)

    report = FilePruneReport(
        path=src,
        output=dst,
        ptd_outputs=tuple((p, ptd_written.get(p)) for p in ptd_paths),
        bytes_before=pte.file_bytes + sum(p.file_bytes for p in pte.ptd_files),
        bytes_after=written_bytes,
        dropped=dropped,
        dropped_values=dropped_values,
        dropped_named_data=use.dead,
        kept_unprovable=use.kept_unprovable,
        seconds=time.perf_counter() - started,
    )
    logger.info("%s", report.summary())
    return report
