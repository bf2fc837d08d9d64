"""Several programs, one `.pte` of several methods: `emitter-filter merge`; and `split` back.

ExecuTorch's runtime loads any method of a program by name, and every method
reads the one constant segment, `segments` table and `named_data`. `merge_files`
writes the programs of separately exported `.pte` files as one:

    a.pte  [header | program: forward            | constant: P W1 W2 | delegate: D ]
    b.pte  [header | program: forward            | constant: P W1 W3 | delegate: D ]
    out    [header | program: head_a, head_b     | constant: P W1 W2 W3 | delegate: D ]

1. Read each input and analyse it as `prune` does (`analysis.analyse_file`): only
   what a method can reach is written, so the output audits clean.
2. Choose and name the methods (`merge_names`: as in their inputs, or as `--method`,
   `--prefix` and `--drop` say; a method equal to one of an earlier input with its
   name written once), refusing differing methods of one name, all at once with the
   command that resolves them, before anything is opened for writing. An input with
   methods left out is read without them, as `split` reads a file (`_read_without`).
3. Store once, in first-reference order over the inputs in the order given:
   constant entries with equal bytes (tensors of any layout read an entry as raw
   bytes, as the emitter's own sharing within a program does), delegate segments
   with equal bytes, inline delegate blobs with equal bytes, named data with an
   equal key and equal bytes (an equal key with other bytes is refused: the
   runtime resolves a key once). Equal bytes are found as `share` finds them
   (`duplicates.group_duplicates`): nothing whose size no other has is read.
   Mutable data stays per input: merging does not make methods share state.
4. Renumber each plan's values (`plan_indices.remap_plan_values`), data indices
   (`remap_data_indices`, one map per input) and delegates, and pack with the
   inputs' largest alignments, as `prune` packs (`layout.pack_program`); with
   `dedupe`, store once what repeats within the output, as `prune --dedupe` does
   (`dedupe.dedupe_output`); stream every segment from its input
   (`output.write_outputs`).

`split_file` is the other way: the chosen methods of a file, with only what they
read (`NEW=NAME` renames a method as it is cut). It is `prune` of the program
without the other plans (`_without_plans`): their instructions were the only
readers of what they alone read.

Inputs with `.ptd` files (`data`): each reads its keys from the `.ptd` files it is
given (a key two of them give with other bytes refused, `_check_data_keys`); the
output has one `.ptd` with every live key once (`_merged_ptd`), or, with `inline`,
none: external tensors become constant entries (mutable ones, training weights,
mutable entries), the `.ptd`'s named data the program's own.

The output always has a constant segment, never `constant_buffer`: an input on that
deprecated path (`prune.relies_on_constant_buffer`) comes out in the layout the
runtime accepts, and the report names it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import os
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from emitter_filter._program_fbs.executorch_flatbuffer.BackendDelegateInlineData import (
    BackendDelegateInlineDataT,
)
from emitter_filter._program_fbs.executorch_flatbuffer.DataLocation import DataLocation
from emitter_filter._program_fbs.executorch_flatbuffer.TensorDataLocation import (
    TensorDataLocation,
)
from emitter_filter.errors import InvariantError, MethodSetError, PteFormatError
from emitter_filter.ondisk.analyse.analysis import FileAnalysis, analyse_file
from emitter_filter.ondisk.analyse.dead_bytes import keep_ptd_key
from emitter_filter.ondisk.analyse.proof import Claim, Side, prove_outputs, proved
from emitter_filter.ondisk.analyse.stored_ranges import find_aliases
from emitter_filter.ondisk.analyse.validate import check_inputs, validate_outputs
from emitter_filter.ondisk.dedupe import dedupe_output
from emitter_filter.ondisk.merge_names import (
    TRAINING_PREFIX,
    Choice,
    MethodClashes,
    check_new_name,
    choose_methods,
    is_constant_method,
    parse_drop,
    parse_method,
    parse_prefix,
    plan_names,
    resolving_flags,
    same_method,
    spans_open,
)
from emitter_filter.ondisk.prune import (
    FilePruneReport,
    OutSegment,
    ProgramView,
    SegmentTable,
    StoredEntry,
    changes_pte,
    constant_segment,
    delegate_segments,
    mutable_segment,
    prune_file,
    relies_on_constant_buffer,
    stored_entries,
    verbatim,
)
from emitter_filter.ondisk.read.byte_source import ByteSource, Piece, StoredSpan
from emitter_filter.ondisk.read.data_files import data_files_for, input_of
from emitter_filter.ondisk.read.file_headers import (
    extended_header_prefix,
    program_prefix,
    ptd_prefix,
)
from emitter_filter.ondisk.read.layout import PteLayout, pack_program, read_pte_layout
from emitter_filter.ondisk.read.method_bound import check_renames
from emitter_filter.ondisk.read.read_ptd import read_ptd_flat_tensor
from emitter_filter.ondisk.read.read_pte import PteProgram, read_pte_program
from emitter_filter.ondisk.read.segment_layout import (
    PtdLayout,
    infer_ptd_layout,
    place_segments,
    ptd_segment_alignments,
    shared_segment_alignment,
)
from emitter_filter.ondisk.split_moved import moved_copy, moves_segments
from emitter_filter.ondisk.write.output import (
    OutputFile,
    ProgressFn,
    check_outputs,
    open_input,
    write_outputs,
)
from emitter_filter.ondisk.write.ptd_writer import pack_flat_tensor
from emitter_filter.program.duplicates import StoredCopy, group_duplicates
from emitter_filter.program.fbs_schemas import FLAT_TENSOR, PROGRAM
from emitter_filter.program.generated_fields import table_text, vector_ints
from emitter_filter.program.object_models import GENERATED
from emitter_filter.program.plan_indices import remap_data_indices, remap_plan_values
from emitter_filter.program.reachability import DataSpace, new_data_indices, order_live_data

__all__ = [
    "JSON_SCHEMA",
    "MergedMethod",
    "MergeReport",
    "merge_files",
    "parse_method",
    "split_file",
]

logger = logging.getLogger(__name__)

#: The value of the "schema" key of `MergeReport.to_json()` (`merge --json`).
JSON_SCHEMA = "emitter-filter-merge/1"


@dataclass(frozen=True)
class MergedMethod:
    """One method of the merged file: its name there, and where it came from.

    `same_in` are the other inputs whose method of that name is the same method
    (an exporter's constant method, in each of them): written once, from `source`.
    """

    name: str
    source: str
    source_method: str
    same_in: tuple[str, ...] = ()
    #: Which input `source` is (0 for the first): one file may be given twice.
    source_number: int = 0

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "source": self.source,
            "source_method": self.source_method,
            "same_in": list(self.same_in),
        }


@dataclass(frozen=True)
class MergeReport:
    """What `merge_files` wrote.

    Attributes:
        inputs: The programs, in the order given.
        output: The merged `.pte`.
        ptd_output: Its `.ptd` (`ptd_out`), if one was written.
        methods: Each method of the output, in order.
        bytes_before: The inputs' sizes, their `.ptd` files' included, summed.
        bytes_after: The outputs' sizes.
        stored_once: Bytes of data an input reads that the output holds once for
            several inputs (constants, delegate blobs, named data).
        dropped: The inputs' dead bytes (`audit`'s one count), not written.
        seconds: Wall time.
        dropped_methods: (input, method) of each method `--drop` left out.
        deduplicated_bytes: With `dedupe`, what storing repeats within the output
            once saved; None without.
        data: The `.ptd` files each input was read with (`data_files.data_files_for`).
        constant_buffer_inputs: The inputs that relied on the deprecated
            `constant_buffer` path, written with a constant segment instead.
    """

    inputs: tuple[str, ...]
    output: str
    ptd_output: str | None
    methods: tuple[MergedMethod, ...]
    bytes_before: int
    bytes_after: int
    stored_once: int
    dropped: int
    seconds: float
    dropped_methods: tuple[tuple[str, str], ...] = ()
    deduplicated_bytes: int | None = None
    data: tuple[tuple[str, ...], ...] = ()
    constant_buffer_inputs: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {
            "schema": JSON_SCHEMA,
            "data": [
                {"program": p, "data": list(f)} for p, f in zip(self.inputs, self.data, strict=True)
            ],
            "inputs": list(self.inputs),
            "output": self.output,
            "ptd_output": self.ptd_output,
            "methods": [m.to_json() for m in self.methods],
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "stored_once": self.stored_once,
            "dropped": self.dropped,
            "seconds": self.seconds,
            "dropped_methods": [{"source": f, "method": m} for f, m in self.dropped_methods],
            "deduplicated_bytes": self.deduplicated_bytes,
            "constant_buffer_inputs": list(self.constant_buffer_inputs),
        }

    def summary(self) -> str:
        methods = ", ".join(m.name for m in self.methods)
        count = len(self.inputs)
        written = self.output + ("" if self.ptd_output is None else f" + {self.ptd_output}")
        once = [m.name for m in self.methods if m.same_in]
        return (
            f"{count} program{'s' if count != 1 else ''} -> {written}: "
            f"{self.bytes_before:,} -> {self.bytes_after:,} B; methods {methods}"
            + (
                f" ({len(once)} the same in several inputs, written once: {', '.join(once)})"
                if once
                else ""
            )
            + (
                f"; dropped {', '.join(f'{f}:{m}' for f, m in self.dropped_methods)}"
                if self.dropped_methods
                else ""
            )
            + f"; {self.stored_once:,} B stored once for several inputs, "
            f"{self.dropped:,} B dead not written"
            + (
                ""
                if self.deduplicated_bytes is None
                else f", {self.deduplicated_bytes:,} B stored once within the output (--dedupe)"
            )
            + f", in {self.seconds * 1000:.1f} ms"
            + "".join(
                f"; {path} relied on the deprecated constant_buffer path: its "
                "constants are in the constant segment"
                for path in self.constant_buffer_inputs
            )
        )


def _choose(
    inputs: Sequence[str],
    reads: Sequence[PteProgram],
    renames,
    prefixes,
    drops,
    command: Callable[[list[str]], str],
) -> Choice:
    """`merge_names.choose_methods` over the inputs; where names clash, the message ends with
    `command` of the flags that resolve every clash (checked to resolve them)."""
    originals = [plan_names(read) for read in reads]
    with spans_open() as spans:

        def same(a, b):
            return same_method(reads[a[0]], a[1], reads[b[0]], b[1], spans)

        def choose(more_renames=(), more_drops=()):
            return choose_methods(
                inputs,
                originals,
                renames=[*renames, *more_renames],
                prefixes=prefixes,
                drops=[*drops, *more_drops],
                same=same,
                constant=lambda m: is_constant_method(reads[m[0]], m[1]),
            )

        try:
            return choose()
        except MethodClashes as clashes:
            given = [new for new, _, _ in renames] + [
                prefix + name
                for prefix, path in prefixes
                for name in originals[input_of(path, inputs)]
            ]
            flags = resolving_flags(inputs, originals, clashes.clashes, given)
            pairs = list(zip(flags[::2], flags[1::2], strict=True))
            try:
                choose(
                    [parse_method(v) for f, v in pairs if f == "--method"],
                    [parse_drop(v) for f, v in pairs if f == "--drop"],
                )
            except MethodSetError as error:
                raise InvariantError(
                    f"merge: the flags offered do not resolve the clash: {error}"
                ) from error
            ways = (
                ["keep the first input's value of each constant method"]
                if "--drop" in flags
                else []
            )
            ways += ["name the other methods apart"] if "--method" in flags else []
            raise MethodClashes(
                clashes.clashes, f"{clashes}; to {' and '.join(ways)}: {command(flags)}"
            ) from None


def _read_without(
    read: PteProgram, methods: Sequence[str], files: Sequence[str]
) -> tuple[PteProgram, PteLayout]:
    """`read` with only `methods`' plans, read from a view of its file as `split` prunes it
    (`_view_without`), and the layout of the file itself, to write it with."""
    with ByteSource(read.pte.path) as source:
        view = _view_without(read, methods, source)
        return read_pte_program(view.source(source), files), view.layout


def _check_inputs(inputs: Sequence[str], reads: Sequence[PteProgram]) -> None:
    """Refuses what cannot be merged: other schema versions, data in `.ptd` files not given."""
    versions = {read.program.version for read in reads}
    if len(versions) > 1:
        listed = ", ".join(f"{p} {r.program.version}" for p, r in zip(inputs, reads, strict=True))
        raise MethodSetError(
            f"the programs have different Program.version ({listed}): "
            "export them with one ExecuTorch release"
        )
    for path, read in zip(inputs, reads, strict=True):
        missing = [e for e in read.pte.entries[DataSpace.EXTERNAL].values() if e.offset < 0]
        if missing:
            raise MethodSetError(
                f"{path}: reads {len(missing)} tensor(s) from a .ptd: give the .ptd files it "
                "loads with as --data"
            )


# --- storing once ------------------------------------------------------------------


class _Contents:
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
    """The number `_Contents.key` gave a copy (only an external copy in memory has none)."""
    assert copy.index is not None
    return copy.index


@dataclass
class _Input:
    """One input while merging: what was read, its analysis and layout, its open files.

    `keep_ptd_key` (`analysis.keep_ptd_key`) says which keys of the `.ptd` files it reads
    live: taken before its program is rewritten.
    """

    path: str
    read: PteProgram
    analysis: FileAnalysis
    layout: PteLayout
    fds: Mapping[str, int]
    order: dict[DataSpace, list[int]]
    keep_ptd_key: Callable[[str], bool]

    @property
    def program(self):
        return self.read.program

    @property
    def fd(self) -> int:
        return self.fds[self.path]

    def entries(self, space: DataSpace) -> list[StoredEntry]:
        """The entries of its constant or mutable segment, by index."""
        subsegment = (
            self.program.constantSegment
            if space is DataSpace.CONSTANT
            else (self.program.mutableDataSegments or [None])[0]
        )
        if subsegment is None or not vector_ints(subsegment.offsets):
            return []
        alignment = self.layout.tensor_alignment if space is DataSpace.CONSTANT else 1
        return stored_entries(self.read.pte, subsegment, self.fd, space, alignment)

    def external(self, index: int) -> StoredEntry:
        """External entry `index` (in a `.ptd`), as a constant entry would be copied."""
        entry = self.read.pte.entries[DataSpace.EXTERNAL][index]
        return StoredEntry(
            self.fds[entry.file],
            entry.offset,
            entry.nbytes,
            entry.nbytes,
            True,
            self.layout.tensor_alignment,
        )

    def external_names(self) -> dict[int, str]:
        return {
            t.ref.index: t.name
            for t in self.read.pte.tensors
            if t.ref.space is DataSpace.EXTERNAL and t.name is not None
        }

    def mutable_external(self) -> frozenset[int]:
        """The external entries mutable tensors read (`allocation_info` set: training
        weights, `external_mutable_weights`): the runtime copies their initial bytes into
        the arena from the data map, or, inline, from the mutable data segment; never
        from the constant segment. Taken before the program is rewritten."""
        mutable: set[int] = set()
        constant: set[int] = set()
        for plan, refs in zip(self.program.executionPlan or (), self.read.pte.plans, strict=True):
            for value, ref in refs.data_refs.items():
                if ref.space is DataSpace.EXTERNAL:
                    tensor = GENERATED.value(plan.values[value])[1]
                    (mutable if tensor.allocationInfo is not None else constant).add(ref.index)
        both = mutable & constant
        if both:
            name = self.external_names().get(min(both))
            raise PteFormatError(
                self.path,
                f"external tensor {name!r} is read both as a "
                "mutable and as a constant tensor; merge cannot inline it",
            )
        return frozenset(mutable)


def _merged_layout(layouts: Sequence[PteLayout]) -> PteLayout:
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
    inputs: Sequence[_Input],
    contents: _Contents,
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


def _inline_blobs(inputs: Sequence[_Input]) -> list:
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

    def __init__(self, contents: _Contents, table: SegmentTable, kind: str = "named") -> None:
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


def _program_named_data(inputs: Sequence[_Input], store: _NamedData, inline: bool) -> list:
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


def _merged_pte(
    inputs: Sequence[_Input],
    names: Sequence[Sequence[str]],
    contents: _Contents,
    output: str,
    inline: bool,
) -> tuple[OutputFile, int]:
    """Every byte of the merged `.pte`, and the bytes stored once for several inputs."""
    layout = _merged_layout([item.layout for item in inputs])
    new_index = [new_data_indices(item.order) for item in inputs]
    mutable_external = [item.mutable_external() if inline else frozenset() for item in inputs]
    constants, mutables = _data_entries(inputs, contents, new_index, inline, mutable_external)
    out: list[OutSegment] = []
    program = inputs[0].program
    # Always a constant segment, with its placeholder at least, as the serializer writes
    # it; never `constant_buffer` beside it (the runtime refuses a program using both),
    # nor instead of it (the deprecated path, off in ExecuTorch 1.5's wheels).
    segment, offsets = constant_segment(
        constants or [StoredEntry(inputs[0].fd, 0, 0, 0, True, 1)], layout.tensor_alignment
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

    table, blobs_from = SegmentTable(out), len(out)
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
    named = _program_named_data(inputs, _NamedData(contents, table), inline)

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
    program.executionPlan = plans
    if blobs or program.backendDelegateData is not None:
        program.backendDelegateData = blobs
    if named or program.namedData is not None:
        program.namedData = named
    offsets, data_size = place_segments(
        [(s.size, s.alignment) for s in out], layout.segment_alignment
    )
    if out or program.segments is not None:
        program.segments = [
            PROGRAM.DataSegment(offset=o, size=s.size) for o, s in zip(offsets, out, strict=True)
        ]
    flatbuffer = pack_program(program, layout.tensor_alignment, layout.delegate_alignment)
    prefix, base = program_prefix(flatbuffer, layout, data_size)
    result = OutputFile(output, inputs[0].fd, prefix)
    if data_size:
        result.runs = [(base + o, s.pieces) for o, s in zip(offsets, out, strict=True)]
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


def _merged_ptd(inputs: Sequence[_Input], contents: _Contents, output: str) -> OutputFile | None:
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


def _read_inputs(
    inputs, reads, stack, opened, layouts=()
) -> tuple[list[_Input], dict[int, ByteSource]]:
    """Analyses each input as `prune` does; opens its files (into `opened`), and a
    `ByteSource` of each by its descriptor. A layout given (`layouts`, or None) is the
    input's file's, where `reads` has the input without some methods (`_read_without`)."""
    fds: dict[str, int] = {}
    sources: dict[str, ByteSource] = {}
    items = []
    for path, read, given in itertools.zip_longest(inputs, reads, layouts[: len(inputs)]):
        for file in [path, *(ptd.path for ptd in read.pte.ptd_files)]:
            if file not in fds:
                fds[file] = open_input(file, opened)
                sources[file] = stack.enter_context(ByteSource(file))
        analysis = analyse_file(read.pte, {f: sources[f] for f in fds})
        aliased = find_aliases(analysis.shared)
        layout = given or read_pte_layout(
            read.pte,
            read.program,
            read.program_data,
            aliased,
            shared_segment_alignment(read.pte, aliased),
        )
        order = order_live_data(read.pte.plans, analysis.liveness)
        keep = keep_ptd_key(read.pte, read.program, analysis.liveness, frozenset(analysis.use.dead))
        files = {path: fds[path], **{p.path: fds[p.path] for p in read.pte.ptd_files}}
        items.append(_Input(path, read, analysis, layout, files, order, keep))
    return items, {fds[file]: source for file, source in sources.items()}


def _check_data_keys(items: Sequence[_Input], contents: _Contents) -> None:
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


def _dropped_bytes(items: Sequence[_Input]) -> int:
    """The inputs' dead bytes, but a `.ptd` key one input leaves and another reads."""
    kept = {
        key
        for item in items
        for ptd in item.read.pte.ptd_files
        for key in ptd.named_data
        if item.keep_ptd_key(key)
    }
    return sum(
        d.nbytes
        for item in items
        for d in item.analysis.dead
        if not (d.space == "named_data" and d.name in kept)
    )


def _command(inputs, output, renames, prefixes, drops, data, ptd_out, inline, dedupe):
    """The command line of a merge, as the CLI takes it, with more flags at the end."""

    def line(more: list[str]) -> str:
        words = ["emitter-filter", "merge", *inputs, "-o", output]
        words += [
            w for new, path, method in renames for w in ("--method", f"{new}={path}:{method}")
        ]
        words += [w for prefix, path in prefixes for w in ("--prefix", f"{prefix}={path}")]
        words += [w for path, method in drops for w in ("--drop", f"{path}:{method}")]
        for spec in data:
            spec = f"{os.fspath(spec[0])}={os.fspath(spec[1])}" if isinstance(spec, tuple) else spec
            words += ["--data", os.fspath(spec)]
        words += ["--ptd-out", ptd_out] if ptd_out else []
        words += ["--inline"] if inline else []
        words += ["--dedupe"] if dedupe else []
        return shlex.join([*words, *more])

    return line


def _where_data_goes(inputs, data, data_of) -> str:
    """The message for data files read with neither `--ptd-out` nor `--inline`."""
    if data:
        return "merge: with --data, give --ptd-out OUT.ptd or --inline (one of them)"
    pte, files = next((p, f) for p, f in zip(inputs, data_of, strict=True) if f)
    return (
        f"merge: {pte} reads {files[0]}, the .ptd beside it: give --ptd-out OUT.ptd or "
        "--inline for its data, or --no-data-beside to read it without"
    )


def merge_files(
    inputs: Sequence[str | os.PathLike],
    output: str | os.PathLike,
    *,
    methods: Sequence[str | tuple[str, str, str]] = (),
    prefixes: Sequence[str | tuple[str, str]] = (),
    drops: Sequence[str | tuple[str, str]] = (),
    data: Sequence[str | os.PathLike | tuple[str, str]] = (),
    ptd_out: str | os.PathLike | None = None,
    inline: bool = False,
    dedupe: bool = False,
    progress: ProgressFn | None = None,
    data_beside: bool = True,
    chosen: Callable[[tuple[MergedMethod, ...]], None] | None = None,
) -> MergeReport:
    """Writes the programs of `inputs` as one `.pte` whose methods are all of theirs.

    Methods of several inputs with one name that are the same method (equal plans
    reading equal bytes: exporters' constant methods) are written once; how names
    are chosen is `merge_names`'. FILE below is an input as given, a tail of its
    path that no other input has (`model.pte`, `ft/model.pte`), or `#N`, the Nth
    input counted from 1 (`data_files.input_of`).

    Args:
        inputs: The `.pte` files, in the order their methods take in the output.
            Not modified.
        output: Where to write the merged `.pte`; written atomically, never over
            an input.
        methods: Renames, `NEW=FILE:METHOD` (or its `parse_method` tuple): the
            method METHOD of the input FILE is NEW.
        prefixes: `PREFIX=FILE` (or a (PREFIX, FILE) tuple): every method of FILE not
            kept once is PREFIX + its name (no separator added).
        drops: `FILE:METHOD` (or a (FILE, METHOD) tuple): the method is not written.
        data: The `.ptd` files the inputs load with: `IN.ptd`, which every input may
            read its keys from, or `FILE=IN.ptd` (or a (FILE, IN.ptd) tuple), read only
            by the input FILE: where separate exports name different tensors alike.
            by the input FILE (as `methods` names it): where separate exports name
            different tensors alike. An input given none reads the `.ptd` beside it
            with its stem, unless `data_beside` is False (`data_files.data_files_for`).
            Not modified.
        ptd_out: With `data`: where to write the merged program's one `.ptd`, each
            live key of the inputs' once.
        inline: With `data`, instead: move the external tensors into the constant
            segment and the `.ptd`'s named data into the `.pte`, which then loads
            without a data file.
        dedupe: Also store once what repeats within the output, as `prune --dedupe`
            does (`dedupe.dedupe_output`: named data that repeats a constant, a tied
            embedding lowered to XNNPACK).
        progress: Called with (bytes written, bytes to write) as data is copied.
        chosen: Called with the methods to write (the report's `methods`) before
            anything is written.

    Raises:
        MethodSetError: Differing methods of two inputs have one name (the message
            ends with a command that resolves every such name), a flag names what
            is not there or a method twice or a name another method keeps, the
            programs' versions differ, an input's `.ptd` is not given.
        PteFormatError: A file is malformed, or one named-data key holds two contents.
        OutputFileError: The output would replace an input, or cannot be written.
    """
    started = time.perf_counter()
    input_files = [os.fspath(p) for p in inputs]
    output_path = os.fspath(output)
    ptd_path = None if ptd_out is None else os.fspath(ptd_out)
    if not input_files:
        raise MethodSetError("merge: no programs given")
    renames = [parse_method(m) if isinstance(m, str) else m for m in methods]
    prefixes = [parse_prefix(p) if isinstance(p, str) else p for p in prefixes]
    drops = [parse_drop(d) if isinstance(d, str) else d for d in drops]
    data_of = data_files_for(input_files, data, beside=data_beside)
    if any(data_of) and (ptd_path is None) == (not inline):
        raise MethodSetError(_where_data_goes(input_files, data, data_of))
    data_files = list(dict.fromkeys(p for files in data_of for p in files))
    check_outputs(
        [*input_files, *data_files], [output_path, *([ptd_path] if ptd_path else [])], "merge"
    )
    check_inputs(list(zip(input_files, data_of, strict=True)))
    reads = [
        read_pte_program(path, files) for path, files in zip(input_files, data_of, strict=True)
    ]
    _check_inputs(input_files, reads)
    command = _command(
        input_files, output_path, renames, prefixes, drops, data, ptd_path, inline, dedupe
    )
    choice = _choose(input_files, reads, renames, prefixes, drops, command)
    for path, read, old, new in zip(
        input_files, reads, choice.originals, choice.names, strict=True
    ):
        renamed = {o: n for o, n in zip(old, new, strict=True) if n is not None}
        check_renames(path, read, renamed, "merge --method/--prefix")
    bytes_before = sum(read.pte.file_bytes for read in reads) + sum(
        os.path.getsize(p) for p in data_files
    )
    written_from = [n for n, names in enumerate(choice.names) if any(names)]
    if not written_from:
        raise MethodSetError("merge: every method is dropped: nothing to write")
    merged_methods = _merged_methods(input_files, choice)
    if chosen is not None:
        chosen(merged_methods)  # `--verify`: which input method each is, before writing.
    # Inputs without the methods not written, read as split reads them.
    names: list[list[str]] = []
    layouts: list[PteLayout | None] = []
    kept_reads: list[PteProgram] = []
    for number in written_from:
        read, new = reads[number], choice.names[number]
        names.append([name for name in new if name is not None])
        if None in new:
            kept = [
                m for m, name in zip(choice.originals[number], new, strict=True) if name is not None
            ]
            read, layout = _read_without(read, kept, data_of[number])
            kept_reads.append(read)
            layouts.append(layout)
        else:
            kept_reads.append(read)
            layouts.append(None)
    kept_inputs = [input_files[n] for n in written_from]
    changed = (
        renames or prefixes or data_files or len(kept_inputs) != len(input_files) or any(layouts)
    )
    opened: list[int] = []
    try:
        with contextlib.ExitStack() as stack:
            items, sources = _read_inputs(kept_inputs, kept_reads, stack, opened, layouts)
            contents = _Contents(sources)
            _check_data_keys(items, contents)
            dropped = _dropped_bytes(items)
            live = sum(
                item.analysis.count.live[space]
                for item in items
                for space in ("constant", "named_data", "delegate", "external")
            )
            ptd = None if inline or ptd_path is None else _merged_ptd(items, contents, ptd_path)
            if len(items) == 1 and not changed and not changes_pte(items[0].analysis):
                # One program with nothing to change is its own merge, as it is its own prune.
                merged = verbatim(output_path, items[0].fd, kept_reads[0].pte.file_bytes)
                written = live
            else:
                merged, written = _merged_pte(items, names, contents, output_path, inline)
            if ptd is not None:
                written += sum(len(p) for _, pieces in ptd.runs for p in pieces)
            deduplicated = None
            if dedupe:
                alignment = _merged_layout([item.layout for item in items]).segment_alignment
                merged, deduplicated = dedupe_output(merged, alignment)
            outputs = [merged, *([ptd] if ptd else [])]
            claims = [_claim(input_files, data_of, choice, ptd is not None, inline)]
            prove_outputs(outputs, claims)
            bytes_after = write_outputs(
                outputs, progress, validate=proved(validate_outputs, claims, outputs)
            )
    finally:
        for fd in opened:
            os.close(fd)
    report = MergeReport(
        inputs=tuple(input_files),
        output=output_path,
        ptd_output=ptd_path if ptd else None,
        methods=merged_methods,
        bytes_before=bytes_before,
        bytes_after=bytes_after,
        # What the inputs' live references read, against what the output holds for them.
        stored_once=max(live - written, 0),
        dropped=dropped,
        seconds=time.perf_counter() - started,
        dropped_methods=tuple(
            (input_files[number], method)
            for number, (methods, names) in enumerate(
                zip(choice.originals, choice.names, strict=True)
            )
            for position, (method, name) in enumerate(zip(methods, names, strict=True))
            if name is None and (number, position) not in choice.same_as
        ),
        deduplicated_bytes=None if deduplicated is None else deduplicated.saved_bytes,
        data=tuple(tuple(files) for files in data_of),
        constant_buffer_inputs=tuple(
            path
            for path, read in zip(input_files, reads, strict=True)
            if relies_on_constant_buffer(read.pte)
        ),
    )
    logger.info("%s", report.summary())
    return report


def _claim(inputs, data_of, choice: Choice, ptd_written: bool, inline: bool) -> Claim:
    """What a merge claims of its output: each method kept is its input's method, under its
    new name; the `.ptd` is the one written, or else the inputs' (none where `inline`)."""
    methods = {
        new: (number, old)
        for number, (olds, news) in enumerate(zip(choice.originals, choice.names, strict=True))
        for old, new in zip(olds, news, strict=True)
        if new is not None
    }
    others = () if inline else tuple(os.fspath(p) for files in data_of for p in files)
    return Claim(
        inputs=tuple(
            Side(path, tuple(os.fspath(p) for p in files))
            for path, files in zip(inputs, data_of, strict=True)
        ),
        pte=0,
        ptds=(1,) if ptd_written else others,
        methods=methods,
    )


def _merged_methods(inputs: Sequence[str], choice: Choice) -> tuple[MergedMethod, ...]:
    """Each method written, with the inputs whose same method it stands for."""
    also: dict[tuple[int, int], list[str]] = {}
    for (number, _), kept in choice.same_as.items():
        also.setdefault(kept, []).append(inputs[number])
    return tuple(
        MergedMethod(name, inputs[number], method, tuple(also.get((number, position), ())), number)
        for number, (methods, names) in enumerate(zip(choice.originals, choice.names, strict=True))
        for position, (method, name) in enumerate(zip(methods, names, strict=True))
        if name is not None
    )


# --- split -------------------------------------------------------------------------


def _without_plans(
    read: PteProgram,
    methods: Sequence[str],
    layout: PteLayout,
    renames: Mapping[str, str] | None = None,
    move: bool = False,
) -> ProgramView:
    """A view of the file `read` is (`prune_file`'s `view`), whose program has only
    `methods`' plans (named as `renames` says) and the inline blobs they read, and whose
    segments are the input's bytes where the input has them: `prune` of it is the split.
    With `move`, segment data the program does not end before is moved on
    (`split_moved`); without, that is refused."""
    program = read.program
    plans = [p for p in program.executionPlan or () if (table_text(p.name) or "") in methods]
    for plan in plans:
        name = table_text(plan.name) or ""
        plan.name = (renames or {}).get(name, name)
    program.executionPlan = plans
    inline, where = program.backendDelegateData or [], {}
    kept: list[BackendDelegateInlineDataT] = []
    for plan in plans:
        for delegate in plan.delegates or ():
            if delegate.processed.location == DataLocation.INLINE:
                old = delegate.processed.index
                if old not in where:
                    where[old] = len(kept)
                    kept.append(inline[old])
                delegate.processed.index = where[old]
    if program.backendDelegateData is not None:
        program.backendDelegateData = kept
    flatbuffer = pack_program(program, layout.tensor_alignment, layout.delegate_alignment)
    pte, base = read.pte, read.pte.segment_base_offset

    def view(source: ByteSource) -> ByteSource:
        if not base:
            return ByteSource([flatbuffer], name=source.name)
        # Aligned to the input's segment base itself: a program no larger than the input's
        # puts its segment data where the input's is.
        size = pte.file_bytes - base
        header = (layout.header_padded_length, layout.header_length)
        prefix, at = extended_header_prefix(flatbuffer, header[0], base, size, header[1])
        if at != base and not move:
            raise PteFormatError(
                pte.path,
                "the program without the other methods "
                f"does not end before the segment data at {base}",
            )
        if at != base:
            # On by a multiple of the widest power of two the base is aligned to: every
            # segment keeps the alignment it had in the file.
            prefix, at = extended_header_prefix(
                flatbuffer, header[0], base & -base, size, header[1]
            )
        whole = source.parts[0]
        return ByteSource([prefix.ljust(at, b"\0"), Piece(whole.fd, base, size)], name=source.name)

    return ProgramView(view, layout)


def _view_without(
    read: PteProgram,
    methods: Sequence[str],
    source: ByteSource,
    renames: Mapping[str, str] | None = None,
    move: bool = False,
) -> ProgramView:
    """`_without_plans` with the layout of the file `read` is, `source` open on it: its
    shared data analysed for aliases as `prune` finds them, so the view packs as the
    input did (`split` and `merge`'s inputs with methods left out both read this way)."""
    analysis = analyse_file(read.pte, {read.pte.path: source})
    aliased = find_aliases(analysis.shared)
    layout = read_pte_layout(
        read.pte,
        read.program,
        read.program_data,
        aliased,
        shared_segment_alignment(read.pte, aliased),
    )
    return _without_plans(read, methods, layout, renames, move)


def _split_names(src: str, present: Sequence[str], specs: Sequence[str]) -> dict[str, str]:
    """`NAME` or `NEW=NAME` (renamed as it is cut) of each method kept, with the training
    methods that follow it (`__et_training_*_NAME`, renamed with it): old name -> new."""
    chosen: dict[str, str] = {}
    for spec in specs:
        new, equals, old = spec.partition("=")
        old = old if equals else new
        if not (new and old):
            raise MethodSetError(f"--method {spec!r}: expected NAME or NEW=NAME")
        if old not in present:
            raise MethodSetError(f"{src} has no method {old!r} (it has {', '.join(present)})")
        if new != old:
            check_new_name(f"--method {spec!r}", new)
        if old in chosen:
            raise MethodSetError(
                f"method {old!r} of {src} is named twice: {chosen[old]!r} and {new!r}"
            )
        chosen[old] = new
    for name in present:
        if name.startswith(TRAINING_PREFIX) and name not in chosen:
            owner = max((m for m in chosen if name.endswith("_" + m)), key=len, default=None)
            if owner is not None:
                chosen[name] = name[: -len(owner)] + chosen[owner]
    seen: dict[str, str] = {}
    for old, new in chosen.items():
        if new in seen:
            raise MethodSetError(
                f"{src}: methods {seen[new]!r} and {old!r} would both be named {new!r}"
            )
        seen[new] = old
    return chosen


def split_file(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    methods: Sequence[str],
    *,
    progress: ProgressFn | None = None,
    data: Sequence[str | os.PathLike] = (),
) -> FilePruneReport:
    """Writes the methods `methods` of `src` with only what they read, as `prune` does;
    ExecuTorch's training methods of a method kept (`__et_training_*_METHOD`) are kept too.

    A method given as `NEW=NAME` is renamed as it is cut (its training methods with
    it): `forward=score` makes a file an app that calls `forward` loads as it is.
    `data`: the `.ptd` files `src` loads with (`data_files.program_data`), read to check
    them; their keys are kept, so the output loads with the same files.

    Raises:
        MethodSetError: No method is named, one is not in `src` or is named twice, two
            would have one name, or `src` reads a `.ptd`.
        PteFormatError: The file is malformed.
        OutputFileError: The output would replace the input, or cannot be written.
    """
    src, dst = os.fspath(src), os.fspath(dst)
    if not methods:
        raise MethodSetError(f"{src}: split needs a --method to keep")
    data_files = [os.fspath(p) for p in data]
    check_outputs([src, *data_files], [dst], "split")
    check_inputs([(src, data_files)])
    read = read_pte_program(src, data_files)
    present = plan_names(read)
    chosen = _split_names(src, present, methods)
    check_renames(src, read, chosen, "split --method")
    external = len(read.pte.entries[DataSpace.EXTERNAL])
    if external:
        given = f" ({', '.join(data_files)})" if data_files else ""
        raise MethodSetError(
            f"{src}: reads {external} tensor(s) from a .ptd{given}; split takes a "
            "program whose data is in the .pte (merge --inline makes one)"
        )
    with ByteSource(src) as source:
        view = _view_without(read, [m for m in present if m in chosen], source, chosen, True)
        moved = moves_segments(view.source, source, read.pte.segment_base_offset)
    if not moved:
        view = dataclasses.replace(view, methods={new: old for old, new in chosen.items()})
        return prune_file(src, dst, progress=progress, view=view)
    with moved_copy(src, dst, view.source) as copy:
        # Pruned from the copy, whose offsets are the view's, as the input's layout.
        report = prune_file(copy, dst, progress=progress, view=ProgramView(_same, view.layout))
    return dataclasses.replace(report, path=src, bytes_before=os.stat(src).st_size)


def _same(source: ByteSource) -> ByteSource:
    return source
