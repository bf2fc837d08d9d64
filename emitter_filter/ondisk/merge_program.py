"""The bytes of a merge's outputs, equal bytes stored once: the merged `.pte` and its `.ptd`.

`Contents` says where the data of several inputs holds equal bytes, as `share` finds
them (`duplicates.group_duplicates`): nothing whose size no other has is read.
`check_data_keys` refuses a key two `.ptd` files of one input give with other bytes.

`merged_pte` writes every input's program as one (steps 3 and 4 of `merge`):

1. The constant and mutable entries each input's live plans read (`_data_entries`):
   constant entries with equal bytes once, in first-reference order over the inputs;
   mutable entries per input (merging does not make methods share state); with
   `inline`, the external tensors among them.
2. The constant and mutable data segments (`_tensor_data_segments`), as `prune` lays
   them out.
3. Delegate segments, inline delegate blobs and named data, equal bytes once, a key
   with other bytes refused (`_delegate_data`).
4. Each plan's values and data indices renumbered (`_renumbered_plans`).
5. Packed with the inputs' largest alignments (`merged_layout`, `prune_rewrite.packed_pte`).

`merged_ptd` writes the one `.ptd`: every live key of the inputs' `.ptd` files once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from emitter_filter._program_fbs.executorch_flatbuffer.BackendDelegateInlineData import (
    BackendDelegateInlineDataT,
)
from emitter_filter._program_fbs.executorch_flatbuffer.DataLocation import DataLocation
from emitter_filter._program_fbs.executorch_flatbuffer.TensorDataLocation import (
    TensorDataLocation,
)
from emitter_filter.errors import InvariantError, PteFormatError
from emitter_filter.ondisk.merge_inputs import MergeInput
from emitter_filter.ondisk.read.byte_source import ByteSource, Piece, StoredSpan
from emitter_filter.ondisk.read.layout import PteLayout
from emitter_filter.ondisk.read.read_ptd import read_ptd_flat_tensor
from emitter_filter.ondisk.read.segment_layout import (
    PtdLayout,
    infer_ptd_layout,
    place_segments,
    ptd_prefix,
    ptd_segment_alignments,
)
from emitter_filter.ondisk.write.output import OutputFile
from emitter_filter.ondisk.write.prune_rewrite import (
    OutSegment,
    SegmentTable,
    StoredEntry,
    constant_segment,
    delegate_segments,
    mutable_segment,
    packed_pte,
)
from emitter_filter.ondisk.write.ptd_writer import pack_flat_tensor
from emitter_filter.program.duplicates import StoredCopy, group_duplicates
from emitter_filter.program.fbs_schemas import FLAT_TENSOR, PROGRAM
from emitter_filter.program.generated_fields import table_text
from emitter_filter.program.object_models import GENERATED
from emitter_filter.program.plan_indices import remap_data_indices, remap_plan_values
from emitter_filter.program.reachability import DataSpace, new_data_indices

__all__ = ["Contents", "check_data_keys", "merged_layout", "merged_pte", "merged_ptd"]


# --- where equal bytes meet ------------------------------------------------------


class Contents:
    """Where equal bytes meet, by kind of data: `duplicates.group_duplicates` (the finder
    `audit` and `share` use) over every place an input's data of that kind is read from.

    Every place of a kind is expected before the first key of that kind is asked for;
    a place whose bytes nothing else has is its own key (and is never read).
    """

    def __init__(self, sources: Mapping[int, ByteSource]) -> None:
        self.sources = sources  # by the descriptor `Piece`s read from
        self._places: dict[str, dict[tuple, None]] = {}
        self._keys: dict[str, dict[tuple, tuple]] = {}

    def expect(self, kind: str, fd: int, offset: int, size: int) -> None:
        if kind in self._keys:
            raise InvariantError(f"merge: a {kind} place expected after its keys were given")
        self._places.setdefault(kind, {})[(fd, offset, size)] = None

    def key(self, kind: str, fd: int, offset: int, size: int) -> tuple:
        if kind not in self._keys:
            places = list(self._places.get(kind, ()))
            copies = [
                (StoredCopy(kind, None, number, ()), StoredSpan(self.sources[fd], at, n))
                for number, (fd, at, n) in enumerate(places)
            ]
            self._keys[kind] = {
                places[_numbered(copy)]: (kind, places[_numbered(group.copies[0])])
                for group in group_duplicates(copies, digests=False)
                for copy in group.copies
            }
        place = (fd, offset, size)
        return self._keys[kind].get(place, (kind, place))


def _numbered(copy: StoredCopy) -> int:
    """The number `Contents.key` gave a copy (only an external copy in memory has none)."""
    assert copy.index is not None
    return copy.index


def check_data_keys(items: Sequence[MergeInput], contents: Contents) -> None:
    """Refuses a key two of one input's `.ptd` files give with other bytes: a program
    loads one data map, and which file's bytes it would read is not the user's to guess
    (in every mode: `--inline` would pick one silently). Per-program files
    (`FILE=IN.ptd`) never meet here: each input reads its own."""
    given = []
    for item in items:
        places: dict[str, list] = {}
        for ptd in item.read.pte.ptd_files:
            for key, entry in ptd.named_data.items():
                places.setdefault(key, []).append(entry)
        for key, entries in places.items():
            if len(entries) > 1:
                given.append((item, key, entries))
                for entry in entries:
                    contents.expect("given", item.fds[entry.file], entry.offset, entry.nbytes)
    for item, key, entries in given:
        first = entries[0]
        want = contents.key("given", item.fds[first.file], first.offset, first.nbytes)
        for entry in entries[1:]:
            if contents.key("given", item.fds[entry.file], entry.offset, entry.nbytes) != want:
                raise PteFormatError(
                    entry.file,
                    f"{key!r} holds other bytes than {key!r} in {first.file}, "
                    f"and {item.path} loads with both: give each program its own, "
                    "--data FILE=IN.ptd",
                )


# --- the merged .pte -------------------------------------------------------------


def merged_pte(
    inputs: Sequence[MergeInput],
    names: Sequence[Sequence[str]],
    contents: Contents,
    output: str,
    inline: bool,
) -> tuple[OutputFile, int]:
    """Every byte of the merged `.pte`, and the bytes stored once for several inputs.

    The merged program is the first input's, its plans, data and delegates those of
    every input renumbered (the inputs' programs are modified in place); `names` are
    each input's plans' names in the output.
    """
    layout = merged_layout([item.layout for item in inputs])
    new_index = [new_data_indices(item.order) for item in inputs]
    mutable_external = [item.mutable_external() if inline else frozenset() for item in inputs]
    constants, mutables = _data_entries(inputs, contents, new_index, inline, mutable_external)
    program = inputs[0].program
    out = _tensor_data_segments(program, constants, mutables, layout, inputs[0].fd)
    blobs_from = len(out)
    blobs, named = _delegate_data(inputs, contents, SegmentTable(out), inline)
    program.executionPlan = _renumbered_plans(inputs, new_index, names, inline)
    if blobs or program.backendDelegateData is not None:
        program.backendDelegateData = blobs
    if named or program.namedData is not None:
        program.namedData = named
    result = packed_pte(program, out, layout, output, inputs[0].fd)
    written = (
        sum(entry.nbytes for entry in constants[1:])
        + sum(
            item.external(old).nbytes
            for item, mutable in zip(inputs, mutable_external, strict=True)
            for old in item.order[DataSpace.EXTERNAL]
            if old in mutable
        )
        + sum(s.size for s in out[blobs_from:])
        + sum(len(bytes(blob.data or b"")) for blob in blobs)
    )
    return result, written


def _tensor_data_segments(
    program, constants: list[StoredEntry], mutables: list[StoredEntry], layout: PteLayout, fd: int
) -> list[OutSegment]:
    """The output's constant segment and, where there is mutable data, its mutable data
    segment; points `program` at them."""
    out: list[OutSegment] = []
    # Always a constant segment, with its placeholder at least, as the serializer writes
    # it; never `constant_buffer` beside it (the runtime refuses a program using both),
    # nor instead of it (the deprecated path, off in ExecuTorch 1.5's wheels).
    segment, offsets = constant_segment(
        constants or [StoredEntry(fd, 0, 0, 0, True, 1)], layout.tensor_alignment
    )
    program.constantSegment = PROGRAM.SubsegmentOffsets(segmentIndex=0, offsets=offsets)
    out.append(segment)
    if program.constantBuffer:
        program.constantBuffer = []
    mutable = mutable_segment(mutables) if mutables else None
    if mutable is not None:
        program.mutableDataSegments = [
            PROGRAM.SubsegmentOffsets(segmentIndex=len(out), offsets=mutable[1])
        ]
        out.append(mutable[0])
    elif program.mutableDataSegments:
        program.mutableDataSegments = None  # As prune leaves a segment with no data.
    return out


def _delegate_data(
    inputs: Sequence[MergeInput], contents: Contents, table: SegmentTable, inline: bool
) -> tuple[list, list]:
    """The delegate segments (added to `table`), the inline blobs and the named data of
    the output, equal bytes once; points the delegates and named data at them."""
    for item in inputs:
        for blob in item.read.pte.delegates:
            if blob.location == "segment":
                contents.expect("delegate", item.fd, blob.offset, blob.nbytes)
        for entry in item.read.pte.named_data:
            contents.expect("named", item.fds[entry.file], entry.offset, entry.nbytes)
    for item in inputs:
        pte = item.read.pte

        def key(index, pte=pte, item=item):
            segment = pte.segments[index]
            return contents.key("delegate", item.fd, segment.offset, segment.size)

        delegate_segments(pte, item.program, item.fd, table, key)
    blobs = _inline_blobs(inputs)
    return blobs, _program_named_data(inputs, _NamedData(contents, table), inline)


def _renumbered_plans(
    inputs: Sequence[MergeInput], new_index: list, names: Sequence[Sequence[str]], inline: bool
) -> list:
    """Every input's plans, their values and data indices renumbered, named as `names`
    says; with `inline`, their external tensors read from the constant segment."""
    plans = []
    for item, index, methods in zip(inputs, new_index, names, strict=True):
        pte, live_values = item.read.pte, item.analysis.liveness.live_values
        for plan, refs, live, name in zip(
            item.program.executionPlan or (), pte.plans, live_values, methods, strict=True
        ):
            remap_plan_values(GENERATED, plan, refs, live)
            for ref, tensor in remap_data_indices(GENERATED, plan, refs, live, index):
                if inline and ref.space is DataSpace.EXTERNAL:
                    tensor.extraTensorInfo.location = TensorDataLocation.SEGMENT
            plan.name = name
            plans.append(plan)
    return plans


def merged_layout(layouts: Sequence[PteLayout]) -> PteLayout:
    """The inputs' largest alignments (powers of two: the largest is their multiple)."""
    return PteLayout(
        segment_alignment=max(layout.segment_alignment for layout in layouts),
        tensor_alignment=max(layout.tensor_alignment for layout in layouts),
        delegate_alignment=max(layout.delegate_alignment for layout in layouts),
        header_length=max(layout.header_length for layout in layouts),
        header_padded_length=max(layout.header_padded_length for layout in layouts),
        segment_alignments=(),
        reproduced=False,
    )


def _data_entries(
    inputs: Sequence[MergeInput],
    contents: Contents,
    new_index: list,
    inline: bool,
    mutable_external: Sequence[frozenset[int]],
) -> tuple[list[StoredEntry], list[StoredEntry]]:
    """The output's constant and mutable entries (with `inline`, the external tensors'
    among them: `mutable_external`'s, per input, among the mutable ones); fills each
    input's data index map."""
    for item, mutable in zip(inputs, mutable_external, strict=True):
        entries = item.entries(DataSpace.CONSTANT)
        places = [entries[old] for old in item.order[DataSpace.CONSTANT]]
        if inline:
            places += [
                item.external(old) for old in item.order[DataSpace.EXTERNAL] if old not in mutable
            ]
        for entry in places:
            contents.expect("constant", entry.fd, entry.offset, entry.nbytes)
    constants: list[StoredEntry] = []
    mutables: list[StoredEntry] = []
    where: dict[tuple, int] = {}
    external_index: dict[str, int] = {}
    for number, item in enumerate(inputs):
        index, mutable = new_index[number], mutable_external[number]
        entries = item.entries(DataSpace.CONSTANT)
        stored = [(DataSpace.CONSTANT, old, entries[old]) for old in item.order[DataSpace.CONSTANT]]
        if inline:
            stored += [
                (DataSpace.EXTERNAL, old, item.external(old))
                for old in item.order[DataSpace.EXTERNAL]
                if old not in mutable
            ]
        else:
            # One index per key over all inputs, in first-reference order, as one export numbers them.
            names = item.external_names()
            for old in item.order[DataSpace.EXTERNAL]:
                index[DataSpace.EXTERNAL][old] = external_index.setdefault(
                    names[old], len(external_index)
                )
        if (entries or stored) and not constants:
            # The placeholder, once, as prune keeps it: the input's own, or none of its bytes.
            constants.append(entries[0] if entries else StoredEntry(item.fd, 0, 0, 0, True, 1))
        for space, old, entry in stored:
            key = contents.key("constant", entry.fd, entry.offset, entry.nbytes)
            if key not in where:
                where[key] = len(constants)
                constants.append(entry)
            index[space][old] = where[key]
        entries = item.entries(DataSpace.MUTABLE)
        stored = [(DataSpace.MUTABLE, old, entries[old]) for old in item.order[DataSpace.MUTABLE]]
        # Inline, a mutable external tensor's initial bytes are mutable data, as an export
        # without `external_mutable_weights` writes them: each input's own, never shared.
        stored += [
            (DataSpace.EXTERNAL, old, item.external(old))
            for old in item.order[DataSpace.EXTERNAL]
            if old in mutable
        ]
        if stored and not mutables:
            # The placeholder, once: the input's own, or none of its bytes.
            mutables.append(entries[0] if entries else StoredEntry(item.fd, 0, 0, 0, True, 1))
        for space, old, entry in stored:
            index[space][old] = len(mutables)
            mutables.append(entry)
    return constants, mutables


def _inline_blobs(inputs: Sequence[MergeInput]) -> list:
    """The output's `backend_delegate_data`: each blob a delegate reads, equal bytes once;
    points the delegates at them."""
    blobs: list[BackendDelegateInlineDataT] = []
    where: dict[bytes, int] = {}
    for item in inputs:
        inline = item.program.backendDelegateData or []
        for plan in item.program.executionPlan or ():
            for delegate in plan.delegates or ():
                if delegate.processed.location != DataLocation.INLINE:
                    continue
                blob = inline[delegate.processed.index]
                key = bytes(blob.data or b"")
                if key not in where:
                    where[key] = len(blobs)
                    blobs.append(blob)
                delegate.processed.index = where[key]
    return blobs


class _NamedData:
    """Named data of several files as one store: each key once, refused with two contents."""

    def __init__(self, contents: Contents, table: SegmentTable, kind: str = "named") -> None:
        self.contents, self.table, self.kind = contents, table, kind
        self.first: dict[str, tuple[str, tuple]] = {}

    def add(self, key: str, file: str, segment, alignment: int, fd: int) -> int | None:
        """The output segment of `key`'s bytes (`segment` of `file`), or None if the key is
        in already with these bytes."""
        content = self.contents.key(self.kind, fd, segment.offset, segment.size)
        if key in self.first:
            if self.first[key][1] != content:
                raise PteFormatError(
                    file,
                    f"named data {key!r} holds other bytes than {key!r} "
                    f"in {self.first[key][0]}: one file cannot hold both"
                    + ("" if file.endswith(".pte") else "; merge with --inline"),
                )
            return None
        self.first[key] = (file, content)
        return self.table.add(content, Piece(fd, segment.offset, segment.size), alignment)


def _program_named_data(inputs: Sequence[MergeInput], store: _NamedData, inline: bool) -> list:
    """The merged program's `named_data`: each input's live keys; with `inline`, also the
    live keys of its `.ptd` files that are not external tensors'."""
    named = []
    for item in inputs:
        pte = item.read.pte
        dead = frozenset(item.analysis.use.dead)
        for entry in item.program.namedData or ():
            key = table_text(entry.key) or ""
            if key in dead:
                continue
            segment = pte.segments[entry.segmentIndex]
            index = store.add(
                key, pte.path, segment, item.layout.segment_alignments[segment.index], item.fd
            )
            if index is not None:
                entry.segmentIndex = index
                named.append(entry)
        if not inline:
            continue
        tensors = set(item.external_names().values())
        for ptd in pte.ptd_files:
            for key, entry in ptd.named_data.items():
                if key in tensors or not item.keep_ptd_key(key):
                    continue
                index = store.add(
                    key, ptd.path, ptd.segments[entry.segment_index], 1, item.fds[ptd.path]
                )
                if index is not None:
                    named.append(PROGRAM.NamedData(key=key, segmentIndex=index))
    return named


# --- the merged .ptd -------------------------------------------------------------


def merged_ptd(inputs: Sequence[MergeInput], contents: Contents, output: str) -> OutputFile | None:
    """The one `.ptd` of the merged program: every live key of the inputs' `.ptd` files
    once (a key with two contents refused); None when no input reads one."""
    flat_tensors: dict[str, tuple] = {}
    out: list[OutSegment] = []
    store = _NamedData(contents, SegmentTable(out), "ptd")
    entries, alignment, fd = [], 1, None
    for item in inputs:
        for ptd in item.read.pte.ptd_files:
            if ptd.path not in flat_tensors:
                flat_tensor = read_ptd_flat_tensor(ptd.path)[1]
                layout = infer_ptd_layout(
                    ptd_segment_alignments(ptd), None, len(flat_tensor.segments or ())
                )
                flat_tensors[ptd.path] = (flat_tensor, layout)
                for entry in ptd.named_data.values():
                    contents.expect("ptd", item.fds[ptd.path], entry.offset, entry.nbytes)
    for item in inputs:
        for ptd in item.read.pte.ptd_files:
            flat_tensor, layout = flat_tensors[ptd.path]
            alignment, fd = max(alignment, layout.segment_alignment), item.fds[ptd.path]
            for entry in flat_tensor.namedData or ():
                key = table_text(entry.key) or ""
                if not item.keep_ptd_key(key):
                    continue
                segment = ptd.segments[entry.segmentIndex]
                index = store.add(
                    key, ptd.path, segment, layout.segment_alignments[entry.segmentIndex], fd
                )
                if index is not None:
                    entry.segmentIndex = index
                    entries.append(entry)
    if not entries or fd is None:  # fd is set wherever an entry was kept
        return None
    offsets, data_size = place_segments([(s.size, s.alignment) for s in out], alignment)
    flat_tensor = FLAT_TENSOR.FlatTensor(
        segments=[
            FLAT_TENSOR.DataSegment(offset=o, size=s.size)
            for o, s in zip(offsets, out, strict=True)
        ],
        namedData=entries,
    )
    prefix, base = ptd_prefix(pack_flat_tensor(flat_tensor), PtdLayout(alignment, ()), data_size)
    return OutputFile(
        output, fd, prefix, [(base + o, s.pieces) for o, s in zip(offsets, out, strict=True)]
    )
