"""Prune a `.pte` file (and its `.ptd` files) on disk, streaming the constant bytes.

`prune_file` reads, decides, then writes, as the in-memory filter analyses, then
rewrites:

    in.pte   [header | program | constant: P W UB | delegate | named: k0 k1]
    out.pte  [header | program'| constant: P W    | delegate | named: k0   ]

1. Read: `read_pte.read_pte_program` reads headers and the program flatbuffer;
   `analysis.analyse_file` checks the file (refusing what `audit` refuses), then
   finds the kept values and data entries, the named data no delegate reaches and
   what is dead, as `audit` counts it (with the `keep_constants` roots and `names`).
2. Decide every output byte before any is written. A file with nothing dead is
   its own output, byte for byte. Otherwise `layout.read_pte_layout` reads
   the serializer options back from the file; the unpacked program is
   rewritten (values compacted in order and renumbered by `plan_indices`, data
   entries renumbered in first-reference order by `reachability.order_live_data`,
   the rule `prune_emitted.py` uses in memory) and packed with that layout; a `.ptd`
   with something dead is rebuilt the same way (`flat_tensor_writer`).
3. Write: `output.write_outputs` streams the kept bytes from the inputs
   into temporary files beside the outputs, renamed over them once complete.
   The `.pte`'s is begun before step 1 as a copy of the input (`output.EarlyCopy`):
   only what the decided output holds elsewhere than the input is written after.

Byte identity: for a file ExecuTorch's serializer wrote, the layout read back
reproduces the input (`PteLayout.reproduced`), and the pruned file is the one
`to_executorch(prune_constants=True)` writes with the same options. What the
file cannot tell (`layout`): an alignment no padding shows, such as a
`delegate_alignment` that inline blobs happen to satisfy at a smaller value,
or the padding of the input's last constant once another entry follows it.
There the output is the same program with the same bytes, laid out with the
default that fits. Files from other writers (older releases, other tools) are
written in ExecuTorch 1.5.1's layout: the same program, not the same bytes.

Never touched: the input files (opened read-only), instructions, operators,
delegates and their blobs, and constant bytes (copied, never reinterpreted).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from emitter_filter._program_fbs.executorch_flatbuffer.DataLocation import DataLocation
from emitter_filter.errors import OutputFileError
from emitter_filter.ondisk.analyse.analysis import FileAnalysis, analyse_file
from emitter_filter.ondisk.analyse.dead_bytes import keep_ptd_key
from emitter_filter.ondisk.analyse.proof import Claim, Side, prove_outputs, proved
from emitter_filter.ondisk.analyse.stored_ranges import find_aliases, find_shared_ranges
from emitter_filter.ondisk.analyse.validate import check_inputs, validate_outputs
from emitter_filter.ondisk.read.byte_source import ByteSource, Piece
from emitter_filter.ondisk.read.file_headers import aligned, program_prefix, ptd_prefix
from emitter_filter.ondisk.read.file_model import PteFile
from emitter_filter.ondisk.read.layout import PteLayout, pack_program, read_pte_layout
from emitter_filter.ondisk.read.read_ptd import read_ptd_flat_tensor
from emitter_filter.ondisk.read.read_pte import PteProgram, read_pte_program
from emitter_filter.ondisk.read.segment_layout import (
    infer_ptd_layout,
    place_segments,
    ptd_segment_alignments,
    read_segment_layout,
    shared_segment_alignment,
)
from emitter_filter.ondisk.write.output import (
    EarlyCopy,
    OutputFile,
    ProgressFn,
    check_outputs,
    open_input,
    output_directory,
    write_outputs,
)
from emitter_filter.ondisk.write.ptd_writer import pack_flat_tensor
from emitter_filter.program.fbs_schemas import FLAT_TENSOR, PROGRAM
from emitter_filter.program.generated_fields import table_text, vector_ints
from emitter_filter.program.names import DroppedConstant
from emitter_filter.program.object_models import GENERATED
from emitter_filter.program.plan_indices import remap_data_indices, remap_plan_values
from emitter_filter.program.reachability import (
    DataSpace,
    Liveness,
    new_data_indices,
    order_live_data,
)
from emitter_filter.program.state_names import StateFile, state_file

if TYPE_CHECKING:
    from emitter_filter.ondisk.dedupe import DedupeReport

# Besides `prune_file`, `share` and `merge` build on the rewrite's parts.
__all__ = [
    "JSON_SCHEMA",
    "FilePruneReport",
    "prune_file",
    "read_layout",
    "pruned_pte",
    "OutSegment",
    "verbatim",
    "StoredEntry",
    "stored_entries",
    "constant_segment",
    "mutable_segment",
    "SegmentTable",
    "delegate_segments",
    "ProgramView",
    "changes_pte",
    "relies_on_constant_buffer",
]

logger = logging.getLogger(__name__)

#: The value of the "schema" key of `FilePruneReport.to_json()` (`prune --json`).
JSON_SCHEMA = "emitter-filter-prune/1"
#: What `prune --json` says of each dropped entry: the fields of audit's "dead" entries
#: (`DroppedConstant.to_json`) that name it.
_DROPPED_FIELDS = ("space", "index", "bytes", "name", "names", "readable_by_name")


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
        seconds: Wall time of the whole prune (and dedupe).
        dedupe: What `dedupe=True` saved on top of pruning, or None when it was off.
        left_constant_buffer_path: The input relied on the deprecated `constant_buffer`
            path (`relies_on_constant_buffer`), which the runtime's wheels refuse; the output
            has its placeholder in the constant segment.
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
    dedupe: DedupeReport | None = None
    left_constant_buffer_path: bool = False

    def to_json(self) -> dict:
        """What `prune --json` prints: the files, the bytes, each dropped entry by name."""
        return {
            "schema": JSON_SCHEMA,
            "path": self.path,
            "output": self.output,
            "ptd_outputs": [{"path": p, "output": o} for p, o in self.ptd_outputs],
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "dropped_bytes": sum(d.nbytes for d in self.dropped),
            "dropped": [
                {field: entry[field] for field in _DROPPED_FIELDS}
                for entry in (d.to_json() for d in self.dropped)
            ],
            "dropped_values": self.dropped_values,
            "dropped_named_data": list(self.dropped_named_data),
            "kept_unprovable": list(self.kept_unprovable),
            "left_constant_buffer_path": self.left_constant_buffer_path,
            **({} if self.dedupe is None else {"dedupe": self.dedupe.to_json()}),
        }

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
        line += f" in {self.seconds * 1e3:.1f} ms"
        if self.left_constant_buffer_path:
            line += (
                "; rewritten from the deprecated constant_buffer path, which the runtime "
                "refuses, to the constant segment"
            )
        return line


# --- decide: the rewrite of the unpacked program --------------------------------------


@dataclass(frozen=True)
class ProgramView:
    """A file to prune in place of the input's, and the layout to write it with.

    `merge.split_file` prunes the program without some plans: `source` makes that
    file from the input's (each segment where the input has it), `layout` is the
    input's (the view's own offsets, a smaller program before the same segment
    base, would read as another).
    """

    source: Callable[[ByteSource], ByteSource]
    layout: PteLayout
    #: Each method's name in the input, by its name in the view (a split's renames).
    methods: Mapping[str, str] | None = None


@dataclass
class OutSegment:
    """One segment of an output: its own alignment and its pieces."""

    alignment: int
    pieces: list[Piece]

    @property
    def size(self) -> int:
        return sum(p.nbytes + p.pad for p in self.pieces)


def _subsegment_spans(offsets: Sequence[int], segment_size: int) -> list[int]:
    return [
        (offsets[i + 1] if i + 1 < len(offsets) else segment_size) - offsets[i]
        for i in range(len(offsets))
    ]


@dataclass(frozen=True)
class StoredEntry:
    """One entry of an input's constant or mutable segment, as a rewrite copies it.

    `nbytes` is what tensors read, `span` the bytes up to the next entry (its
    padding included); `alignment` the input's `constant_tensor_alignment`, which
    its entries but the last are padded to.
    """

    fd: int
    offset: int
    nbytes: int
    span: int
    last: bool
    alignment: int


def stored_entries(
    pte: PteFile, subsegment, fd: int, space: DataSpace, alignment: int = 1
) -> list[StoredEntry]:
    """Every entry of `subsegment` (a `SubsegmentOffsets` of the program), by index."""
    offsets = vector_ints(subsegment.offsets)
    segment = pte.segments[subsegment.segmentIndex]
    spans = _subsegment_spans(offsets, segment.size)
    entries = pte.entries[space]
    return [
        StoredEntry(
            fd,
            segment.offset + offset,
            entries[index].nbytes,
            spans[index],
            index == len(offsets) - 1,
            alignment,
        )
        for index, offset in enumerate(offsets)
    ]


def constant_segment(
    entries: Sequence[StoredEntry], alignment: int
) -> tuple[OutSegment, list[int]]:
    """The new constant segment holding `entries` in order, and its offsets
    (`_extract_constant_segment`): each but the last padded to `alignment`."""
    pieces, new_offsets, at = [], [], 0
    for position, entry in enumerate(entries):
        # A span holds the entry padded to its input's alignment, except for the input's
        # last entry, which the serializer leaves unpadded.
        if not entry.last and aligned(entry.nbytes, entry.alignment) == entry.span:
            raw = entry.nbytes
        else:
            # Never fewer bytes than the tensor reads, even where entries overlap.
            raw = max(entry.nbytes, entry.span)
        pad = 0 if position == len(entries) - 1 else aligned(raw, alignment) - raw
        new_offsets.append(at)
        pieces.append(Piece(entry.fd, entry.offset, raw, pad))
        at += raw + pad
    return OutSegment(1, pieces), new_offsets


def mutable_segment(entries: Sequence[StoredEntry]) -> tuple[OutSegment, list[int]] | None:
    """The new mutable data segment holding `entries`, and its offsets; None when empty."""
    pieces, new_offsets, at = [], [], 0
    # Mutable data is not padded: it is copied into the arena at load.
    for entry in entries:
        # Never fewer bytes than the tensor reads, even where entries overlap.
        size = max(entry.span, entry.nbytes)
        new_offsets.append(at)
        pieces.append(Piece(entry.fd, entry.offset, size))
        at += size
    if at == 0:
        return None
    return OutSegment(1, pieces), new_offsets


class SegmentTable:
    """The output's segments in order, each added once under a key of the caller's
    (an input's segment index, or the bytes' digest where several inputs meet)."""

    def __init__(self, out: list[OutSegment]) -> None:
        self.out = out
        self._index: dict[object, int] = {}

    def add(self, key: object, piece: Piece, alignment: int = 1) -> int:
        """The index of the segment under `key`, added as `piece` if new; it takes the
        largest `alignment` asked for."""
        index = self._index.get(key)
        if index is None:
            index = self._index[key] = len(self.out)
            self.out.append(OutSegment(alignment, [piece]))
        else:
            self.out[index].alignment = max(self.out[index].alignment, alignment)
        return index


def read_layout(
    src: str | os.PathLike | bytes, ptd_paths: Sequence[str | os.PathLike] = ()
) -> PteLayout:
    """The serializer options `prune_file` reads back from a `.pte` and its `.ptd` files.

    What the pruned file is laid out with; `PteLayout.reproduced` says whether
    they write the input back. For tests and diagnosis.
    """
    read = read_pte_program(src, ptd_paths)
    aliased = find_aliases(find_shared_ranges(read.pte))
    return read_pte_layout(
        read.pte,
        read.program,
        read.program_data,
        aliased,
        shared_segment_alignment(read.pte, aliased),
    )


def _tensor_data_segments(
    pte: PteFile,
    program,
    fd: int,
    order,
    layout: PteLayout,
    out: list[OutSegment],
    extra_constants: Sequence[StoredEntry] = (),
    extra_mutables: Sequence[StoredEntry] = (),
) -> None:
    """Appends the new constant and mutable data segments to `out`; rewrites `program`'s
    `constant_segment` and `mutable_data_segments` to them. `extra_constants` and
    `extra_mutables` follow the input's entries (after its placeholder, where it has none)."""
    has_constants = program.constantSegment is not None and vector_ints(
        program.constantSegment.offsets
    )
    # Always a constant segment, with its placeholder at least, as the serializer writes
    # it: without one the runtime takes the deprecated `constant_buffer` path.
    entries = (
        stored_entries(
            pte, program.constantSegment, fd, DataSpace.CONSTANT, layout.tensor_alignment
        )
        if has_constants
        else [StoredEntry(fd, 0, 0, 0, True, 1)]
    )
    entries += extra_constants
    constant, offsets = constant_segment(
        [entries[i] for i in [0, *order[DataSpace.CONSTANT]]], layout.tensor_alignment
    )
    program.constantSegment = PROGRAM.SubsegmentOffsets(segmentIndex=len(out), offsets=offsets)
    out.append(constant)
    if program.constantBuffer:
        program.constantBuffer = []  # Its placeholder now the segment's: only one is used.
    if program.mutableDataSegments or extra_mutables:
        # No offsets, not even the placeholder: no tensor can refer to mutable data.
        entries = (
            stored_entries(pte, program.mutableDataSegments[0], fd, DataSpace.MUTABLE)
            if program.mutableDataSegments
            else []
        )
        if extra_mutables:
            entries = [*(entries or [StoredEntry(fd, 0, 0, 0, True, 1)]), *extra_mutables]
        mutable = entries and mutable_segment([entries[i] for i in [0, *order[DataSpace.MUTABLE]]])
        if not mutable:
            program.mutableDataSegments = None
        else:
            program.mutableDataSegments = [
                PROGRAM.SubsegmentOffsets(segmentIndex=len(out), offsets=mutable[1])
            ]
            out.append(mutable[0])


def delegate_segments(pte: PteFile, program, fd: int, table: SegmentTable, key) -> None:
    """Adds the segments the plans' delegates read to `table`, in first-reference order
    (`_extract_delegate_segments`), and points the delegates at them; `key(index)` is the
    table's key of input segment `index`."""
    for plan in program.executionPlan or ():
        for delegate in plan.delegates or ():
            if delegate.processed.location != DataLocation.SEGMENT:
                continue
            source = pte.segments[delegate.processed.index]
            delegate.processed.index = table.add(
                key(source.index), Piece(fd, source.offset, source.size)
            )


def _named_data_segments(
    pte: PteFile,
    program,
    fd: int,
    table: SegmentTable,
    key,
    alignments: Sequence[int],
    dead_keys: frozenset[str] = frozenset(),
) -> list:
    """Adds the segments of `named_data` but `dead_keys` to `table` (`_extract_named_data`,
    each at its input alignment from `alignments`); returns the kept entries, pointed at
    them."""
    kept = []
    for entry in program.namedData or ():
        if table_text(entry.key) in dead_keys:
            continue
        source = pte.segments[entry.segmentIndex]
        entry.segmentIndex = table.add(
            key(source.index), Piece(fd, source.offset, source.size), alignments[source.index]
        )
        kept.append(entry)
    return kept


def pruned_pte(
    pte: PteFile,
    program,
    liveness: Liveness,
    dead_keys: frozenset[str],
    layout: PteLayout,
    fd: int,
    output: str,
    *,
    extra_constants: Sequence[StoredEntry] = (),
    extra_mutables: Sequence[StoredEntry] = (),
    extra_named: Sequence[tuple[str, Piece, int]] = (),
) -> OutputFile:
    """Decides every byte of the pruned `.pte` laid out with `layout`; rewrites `program`
    (our own copy) in place.

    `share` brings data in from elsewhere (a `.ptd`): `extra_constants` are constant
    entries the plans' refs number after the input's own, `extra_mutables` mutable
    entries (a training weight's initial bytes) likewise, `extra_named` named data
    (key, bytes, alignment) added after its own.
    """
    logger.debug("%s: %s", pte.path, layout)
    order = order_live_data(pte.plans, liveness)
    out: list[OutSegment] = []
    _tensor_data_segments(pte, program, fd, order, layout, out, extra_constants, extra_mutables)
    table = SegmentTable(out)
    delegate_segments(pte, program, fd, table, key=lambda index: ("delegate", index))
    named = _named_data_segments(
        pte,
        program,
        fd,
        table,
        lambda index: ("named", index),
        layout.segment_alignments,
        dead_keys,
    )
    for key, piece, alignment in extra_named:
        named.append(
            PROGRAM.NamedData(key=key, segmentIndex=table.add(("extra", key), piece, alignment))
        )
    if program.namedData is not None or extra_named:
        program.namedData = named
    data_index = new_data_indices(order)
    for plan, refs, live in zip(
        program.executionPlan or (), pte.plans, liveness.live_values, strict=True
    ):
        remap_plan_values(GENERATED, plan, refs, live)
        remap_data_indices(GENERATED, plan, refs, live, data_index)

    offsets, data_size = place_segments(
        [(s.size, s.alignment) for s in out], layout.segment_alignment
    )
    if out or program.segments is not None:
        # ExecuTorch always writes the list; a file without it keeps it absent.
        program.segments = [
            PROGRAM.DataSegment(offset=o, size=s.size) for o, s in zip(offsets, out, strict=True)
        ]
    flatbuffer = pack_program(program, layout.tensor_alignment, layout.delegate_alignment)
    prefix, base = program_prefix(flatbuffer, layout, data_size)
    result = OutputFile(output, fd, prefix)
    if data_size:
        result.runs = [(base + o, s.pieces) for o, s in zip(offsets, out, strict=True)]
    return result


def _pruned_ptd(
    path: str, output: str, fd: int, keep: Callable[[str], bool], segment_alignment: int | None
) -> OutputFile | None:
    """The pruned `.ptd` (as `FlatTensorSerializer` writes it); None when no key is kept."""
    ptd, flat_tensor = read_ptd_flat_tensor(path)
    segments = list(flat_tensor.segments or ())
    named = [e for e in (flat_tensor.namedData or ()) if keep(table_text(e.key) or "")]
    if not named:
        return None
    layout = infer_ptd_layout(ptd_segment_alignments(ptd), segment_alignment, len(segments))
    new_index: dict[int, int] = {}
    out: list[OutSegment] = []
    for entry in named:
        old = entry.segmentIndex
        if old not in new_index:
            new_index[old] = len(out)
            source = segments[old]
            piece = Piece(fd, ptd.segment_base_offset + source.offset, source.size)
            out.append(OutSegment(layout.segment_alignments[old], [piece]))
        entry.segmentIndex = new_index[old]
    offsets, data_size = place_segments(
        [(s.size, s.alignment) for s in out], layout.segment_alignment
    )
    flat_tensor.namedData = named
    flat_tensor.segments = [
        FLAT_TENSOR.DataSegment(offset=o, size=s.size) for o, s in zip(offsets, out, strict=True)
    ]
    prefix, base = ptd_prefix(pack_flat_tensor(flat_tensor), layout, data_size)
    return OutputFile(
        output, fd, prefix, [(base + o, s.pieces) for o, s in zip(offsets, out, strict=True)]
    )


def verbatim(path: str, fd: int, size: int) -> OutputFile:
    """An output that is its input, byte for byte."""
    return OutputFile(path, fd, b"", [(0, [Piece(fd, 0, size)])])


# --- the entry point ------------------------------------------------------------------


def relies_on_constant_buffer(pte: PteFile) -> bool:
    """Whether the runtime would take the deprecated `constant_buffer` path for `pte`:
    its `constant_segment` has no offsets, not even the placeholder (`Program::load` in
    `runtime/executor/program.cpp`; builds with `ET_ENABLE_DEPRECATED_CONSTANT_BUFFER=0`,
    as ExecuTorch 1.5's wheels are, refuse the program). `read_pte` refuses constants
    inline in `constant_buffer`: what is left is a placeholder, moved to the segment."""
    return pte.constant_segment is None


def changes_pte(analysis: FileAnalysis) -> bool:
    """Whether the `.pte` itself has dead values, data entries, segments or named data,
    or relies on the `constant_buffer` path (rewritten to the constant segment)."""
    pte, dead_keys = analysis.pte, frozenset(analysis.use.dead)
    return (
        relies_on_constant_buffer(pte)
        or analysis.liveness.dead_value_count(pte.plans) > 0
        or any(d.space in ("constant", "mutable", "segments") for d in analysis.dead)
        or any(e.key in dead_keys for e in pte.named_data if e.file == pte.path)
    )


def _decide_outputs(
    src: str,
    dst: str,
    read: PteProgram,
    analysis: FileAnalysis,
    ptd_outputs: Sequence[tuple[str, str]],
    opened: list[int],
    layout: PteLayout | None = None,
) -> tuple[list[OutputFile], dict[str, str]]:
    """Every output file's bytes, and the `.ptd` outputs written, by input; opens the inputs
    into `opened`. A file with nothing dead is its own output, unless a `layout` to write
    it with is given."""
    pte, program, liveness = analysis.pte, read.program, analysis.liveness
    dead_keys = frozenset(analysis.use.dead)
    aliased = find_aliases(analysis.shared)
    segment_alignment = shared_segment_alignment(pte, aliased)
    keep_key = keep_ptd_key(pte, program, liveness, dead_keys)
    fd = open_input(src, opened)
    if layout is not None or changes_pte(analysis):
        layout = layout or read_pte_layout(
            pte, program, read.program_data, aliased, segment_alignment
        )
        outputs = [pruned_pte(pte, program, liveness, dead_keys, layout, fd, dst)]
    else:
        outputs = [verbatim(dst, fd, pte.file_bytes)]
    ptd_written: dict[str, str] = {}
    for (path, output), ptd in zip(ptd_outputs, pte.ptd_files, strict=True):
        ptd_fd = open_input(path, opened)
        written: OutputFile | None
        if all(keep_key(key) for key in ptd.named_data):
            written = verbatim(output, ptd_fd, ptd.file_bytes)
        else:
            written = _pruned_ptd(path, output, ptd_fd, keep_key, segment_alignment)
        if written is not None:
            outputs.append(written)
            ptd_written[path] = output
    return outputs, ptd_written


def prune_file(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    ptd_paths: Sequence[str | os.PathLike] = (),
    ptd_out: str | os.PathLike | None = None,
    *,
    progress: ProgressFn | None = None,
    keep_constants: Sequence[str] = (),
    names: str | os.PathLike | StateFile | None = None,
    dedupe: bool = False,
    early: EarlyCopy | None = None,
    view: ProgramView | None = None,
    ptd_outputs: Sequence[str | os.PathLike] | None = None,
) -> FilePruneReport:
    """Writes `src` without the constants and named data its program cannot reach.

    A file with nothing dead is written byte for byte as it is (each `.ptd` on
    its own). Otherwise the output is the program
    `to_executorch(prune_constants=True)` writes for the same model (see the
    module docstring for where its layout may differ). Segment bytes are
    streamed, so memory stays flat whatever the file size.

    Args:
        src: The `.pte` to prune. Not modified.
        dst: Where to write the pruned `.pte`; must not be `src`. Written
            atomically: a temporary file in its directory, renamed over it once
            complete; on any error nothing is left behind.
        ptd_paths: The `.ptd` files with the program's external constants and
            delegate data. Not modified.
        ptd_out: The directory for the pruned `.ptd` files, written under their
            input names (required with `ptd_paths`); created if missing, and
            removed again if a write fails. A `.ptd` left with no live
            key is not written, as ExecuTorch writes none for such a tag.
        progress: Called with (bytes written, bytes to write) as data is copied.
        keep_constants: `fnmatch` patterns of FQNs to keep, as `audit_file` takes them.
        names: The model's `.pt2` or ETRecord, as `audit_file` takes it.
        dedupe: Then store once the named data that repeats a constant
            (`dedupe.dedupe_output` of the pruned file before it is written, the
            order the hook applies them in; one pass, as a prune alone); the
            `.ptd` files are only pruned. A file that already
            shares (deduplicated before) is deduplicated again whatever this
            says, so pruning keeps the sharing and never grows a file.
        early: `EarlyCopy(src, dst)` begun by the caller (the command line starts
            it before importing this module); one is begun here otherwise.
        view: The file to prune in place of `src`'s (`ProgramView`). The output is
            then always rewritten.
        ptd_outputs: Where to write each pruned `.ptd`, one per `ptd_paths`, in place
            of `ptd_out` (the command line writes the `.ptd` found beside `src` beside
            `dst` with its stem, where the rule of `data_files` finds it again).

    Returns:
        What was written and dropped.

    Raises:
        PteFormatError: A file is malformed, or the `.ptd` does not match the `.pte`.
        ProgramFormatError: The program refers to something that does not exist.
        OutputFileError: An output would replace an input, or cannot be written.
    """
    # What a rewrite imports (the generated object API, flatbuffers, and numpy where it
    # is installed: 0.2-0.7 s on a loaded 2-core machine) is an import, not the prune:
    # done before the clock starts.
    import emitter_filter._program_fbs.executorch_flatbuffer.Program  # noqa: F401
    import emitter_filter.ondisk.dedupe  # noqa: F401

    started = time.perf_counter()
    src_path, dst_path = os.fspath(src), os.fspath(dst)
    ptd_files = [os.fspath(p) for p in ptd_paths]
    ptd_dir = "" if ptd_out is None else os.fspath(ptd_out)
    if ptd_outputs is not None:
        ptd_targets = [os.fspath(p) for p in ptd_outputs]
        if len(ptd_targets) != len(ptd_files):
            raise ValueError(f"{len(ptd_targets)} .ptd outputs for {len(ptd_files)} inputs")
    elif ptd_files and ptd_out is None:
        raise OutputFileError(
            f"{dst_path}: .ptd inputs given without a directory for their outputs"
        )
    else:
        ptd_targets = [os.path.join(ptd_dir, os.path.basename(p)) for p in ptd_files]
    check_outputs(
        [src_path, *ptd_files], [dst_path, *ptd_targets], created=[ptd_dir] if ptd_dir else []
    )

    # Read, then decide every output byte, then write; the kernel copies the .pte
    # meanwhile, where most of the output will be its input at the same offsets.
    if early is not None and not early.copies(src_path, dst_path):
        raise ValueError(f"the early copy given is not one of {src_path} to {dst_path}")
    with early if early is not None else EarlyCopy(src_path, dst_path) as early:
        if view is None:  # A view's maker checked the file it views (`split_file`).
            check_inputs([(src_path, ptd_files)])
        with ByteSource(src_path) as source:
            if view is not None:
                source = view.source(source)
            read = read_pte_program(source, ptd_files)
            analysis = analyse_file(
                read.pte, {read.pte.path: source}, keep_constants, state_file(names)
            )
        # A file that shares already: the rewrite copies each segment's bytes, so an alias
        # into the constant segment would be written out again. Deduplicating again keeps it.
        dedupe = dedupe or _undoes_sharing(analysis, view is not None)
        return _write_pruned(
            src_path,
            dst_path,
            read,
            analysis,
            ptd_files,
            ptd_targets,
            progress,
            started,
            early,
            dedupe=dedupe,
            layout=None if view is None else view.layout,
            methods=None if view is None else view.methods,
        )


def _undoes_sharing(analysis: FileAnalysis, rewrite: bool = False) -> bool:
    """Whether pruning would write out again a segment that reads a constant's range."""
    aliased = find_aliases(analysis.shared)
    return (rewrite or changes_pte(analysis)) and any(
        a.space == "constant" for a in aliased.values()
    )


def _claim(src: str, ptd_paths, ptd_written: Mapping[str, str], methods) -> Claim:
    """What a prune claims of its output: each method is its input's (by `methods`, a
    split's new name to old, where given); each `.ptd` written is its input's, pruned."""
    positions = {path: number for number, path in enumerate(ptd_written, start=1)}
    return Claim(
        inputs=(Side(src, tuple(ptd_paths)),),
        pte=0,
        ptds=tuple(positions[p] for p in ptd_paths if p in positions),
        methods=None if methods is None else {new: (0, old) for new, old in methods.items()},
    )


def _write_pruned(
    src,
    dst,
    read,
    analysis,
    ptd_paths,
    ptd_outputs,
    progress,
    started,
    early,
    *,
    dedupe: bool,
    layout: PteLayout | None = None,
    methods: Mapping[str, str] | None = None,
) -> FilePruneReport:
    """The prune itself, once the file is read and analysed: decide, deduplicate if asked,
    write, report.

    `layout`, where given, is the one to write with (a `ProgramView`'s), and the output
    is then rewritten whatever is dead.

    With `dedupe`, the decided `.pte` is deduplicated before anything is written
    (`dedupe.write_deduplicated`): one pass over the input, as a prune alone; the
    `.ptd` files are only pruned.
    """
    from emitter_filter.ondisk.dedupe import write_deduplicated

    if dedupe:
        # Read before the rewrite: the alignment the input shows (the pruned file alone
        # may allow others), and its reading where the .pte is its own output.
        aliased = find_aliases(analysis.shared)
        alignment, _ = (
            read_segment_layout(read.pte, aliased, shared_segment_alignment(read.pte, aliased))
            if layout is None
            else (layout.segment_alignment, ())
        )
        verbatim_read = None if layout is not None or changes_pte(analysis) else read
    dedupe_report = None
    opened: list[int] = []
    try:
        outputs, ptd_written = _decide_outputs(
            src, dst, read, analysis, list(zip(ptd_paths, ptd_outputs, strict=True)), opened, layout
        )
        claims = [_claim(src, ptd_paths, ptd_written, methods)]
        if not dedupe:  # Deduplicated, the outputs are proven once deduplicated.
            prove_outputs(outputs, claims)
        # `outputs` as decided: deduplicated in place where asked, before the check runs.
        validate = proved(validate_outputs, claims, outputs)
        # The .ptd outputs' directory, created as `share --out` is (and removed on failure).
        # (Every .ptd output is in the one `ptd_out`.)
        directory = os.path.dirname(ptd_outputs[0]) if ptd_outputs else ""
        with output_directory(directory) if directory else contextlib.nullcontext():
            if dedupe:
                bytes_after, dedupe_report = write_deduplicated(
                    outputs,
                    alignment,
                    read=verbatim_read,
                    progress=progress,
                    early=early,
                    validate=validate,
                    prove=lambda decided: prove_outputs(decided, claims),
                )
            else:
                bytes_after = write_outputs(outputs, progress, early, validate=validate)
    finally:
        for input_fd in opened:
            os.close(input_fd)

    pte, use = analysis.pte, analysis.use
    report = FilePruneReport(
        path=src,
        output=dst,
        ptd_outputs=tuple((p, ptd_written.get(p)) for p in ptd_paths),
        bytes_before=pte.file_bytes + sum(p.file_bytes for p in pte.ptd_files),
        bytes_after=bytes_after,
        # Unused inline delegate blobs stay: the rewrite never touches backend_delegate_data.
        dropped=tuple(d for d in analysis.dead if d.space != "delegate"),
        dropped_values=analysis.liveness.dead_value_count(pte.plans),
        dropped_named_data=use.dead,
        kept_unprovable=use.kept_unprovable,
        seconds=time.perf_counter() - started,
        dedupe=dedupe_report,
        left_constant_buffer_path=relies_on_constant_buffer(pte),
    )
    logger.info("%s", report.summary())
    if dedupe_report is not None:
        logger.info("%s -> %s: %s", src, dst, dedupe_report)
    return report
