"""The rewrite of a pruned program: every byte of the output `.pte` or `.ptd`, decided.

`prune_file` decides what is kept (`analysis.analyse_file`); this module lays the kept
entries out as `to_executorch(prune_constants=True)` writes them and points every
reference at its new place:

- data entries renumbered in first-reference order (`reachability.order_live_data`, the
  rule `prune_emitted.py` uses in memory), values compacted in order, both patched into
  every plan by `plan_indices` (the one remap);
- the constant segment rebuilt with its placeholder first, each entry but the last
  padded to `tensor_alignment` (`_extract_constant_segment`); mutable data unpadded;
- delegate and named-data segments in the order the program refers to them, each once
  (`_extract_delegate_segments`, `_extract_named_data`);
- the program packed with the layout read back from the input (`layout`).

No constant byte is read or copied here: an output is its prefix and pieces of the
inputs (`output.OutputFile`), streamed when written. `share` and `merge` build on the same
parts (`OutSegment`, `StoredEntry`, `SegmentTable`, ...).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from emitter_filter._program_fbs.executorch_flatbuffer.DataLocation import DataLocation
from emitter_filter.ondisk.read.byte_source import Piece
from emitter_filter.ondisk.read.file_headers import aligned
from emitter_filter.ondisk.read.file_model import PteFile
from emitter_filter.ondisk.read.layout import PteLayout, pack_program, program_prefix
from emitter_filter.ondisk.read.read_ptd import read_ptd_flat_tensor
from emitter_filter.ondisk.read.segment_layout import (
    infer_ptd_layout,
    place_segments,
    ptd_prefix,
    ptd_segment_alignments,
)
from emitter_filter.ondisk.write.output import OutputFile
from emitter_filter.ondisk.write.ptd_writer import pack_flat_tensor
from emitter_filter.program.fbs_schemas import FLAT_TENSOR, PROGRAM
from emitter_filter.program.generated_fields import table_text, vector_ints
from emitter_filter.program.object_models import GENERATED
from emitter_filter.program.plan_indices import remap_data_indices, remap_plan_values
from emitter_filter.program.reachability import (
    DataSpace,
    Liveness,
    new_data_indices,
    order_live_data,
)

__all__ = [
    "pruned_pte",
    "pruned_ptd",
    "packed_pte",
    "verbatim",
    "OutSegment",
    "StoredEntry",
    "stored_entries",
    "constant_segment",
    "mutable_segment",
    "SegmentTable",
    "delegate_segments",
]

logger = logging.getLogger(__name__)


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
    return packed_pte(program, out, layout, output, fd)


def packed_pte(
    program, out: Sequence[OutSegment], layout: PteLayout, output: str, fd: int
) -> OutputFile:
    """The `.pte` of `program` with the segments `out` after it, packed as `layout` says
    (`fd`: an input's, for the prefix's record of where it was read); `prune`'s and
    `merge`'s last step."""
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


def pruned_ptd(
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


# --- the parts `share` and `merge` build on too ---------------------------------------


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
