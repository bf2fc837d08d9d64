"""Several programs, one copy of their common bytes: `share_files` writes them into one `.ptd`.

    A.pte [program | constant: P W H1 | named: k]    out/A.pte [program' | constant: P H1]
    B.pte [program | constant: P W H2 | named: k] -> out/B.pte [program' | constant: P H2]
                                                     out/shared.ptd [W as key(W) | k]

1. Read every input (`read_pte_program`, `read_ptd_flat_tensor`) and the layout
   each `.pte` was written with (`layout.read_pte_layout`, before anything changes).
2. Find the contents stored in two or more files (`share_find.find_shared`).
3. Decide every output byte: a program with nothing shared is its own output,
   byte for byte. Otherwise each tensor reading a moved constant becomes
   `EXTERNAL` with its key (`extra_tensor_info`, as `external_constants=True`
   writes it), the moved named data leave `Program.named_data` (keys unchanged:
   delegate blobs name them), and prune's rewrite (`prune_rewrite.pruned_pte`, every
   value kept) lays the program out again as ExecuTorch's serializer does.
   The shared `.ptd` holds every input `.ptd` entry, then each shared content
   once, as `FlatTensorSerializer` writes a `.ptd` (`ptd_writer`, `layout`).
4. Write: `output.write_outputs` streams the bytes from the inputs into
   temporary files beside the outputs, renamed over them once all are complete.

A set with nothing in common comes out byte for byte (each input `.ptd` under
its own name); so does `share` run again on its own output. The runtime loads
each program with the shared `.ptd` as its data file: external constants are
found by key and checked against its tensor layout, delegate named data are
looked up in the `.ptd`, then in the `.pte`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import tempfile
import time
from collections.abc import Sequence

from emitter_filter.errors import OutputFileError
from emitter_filter.ondisk.analyse.proof import Claim, Side, prove_outputs, proved
from emitter_filter.ondisk.analyse.share_find import (
    DEFAULT_MIN_BYTES,
    ProgramSet,
    SharedSet,
    find_set_shared,
    read_set,
)
from emitter_filter.ondisk.analyse.stored_blobs import TensorLayoutKey
from emitter_filter.ondisk.analyse.stored_ranges import find_aliases, find_shared_ranges
from emitter_filter.ondisk.analyse.validate import check_inputs, validate_outputs
from emitter_filter.ondisk.dedupe import dedupe_output
from emitter_filter.ondisk.prune import prune_file, relies_on_constant_buffer
from emitter_filter.ondisk.read.byte_source import Piece
from emitter_filter.ondisk.read.data_files import data_files_for, unique_tails
from emitter_filter.ondisk.read.file_headers import DEFAULT_SEGMENT_ALIGNMENT
from emitter_filter.ondisk.read.file_model import DataEntry
from emitter_filter.ondisk.read.layout import PteLayout, read_pte_layout
from emitter_filter.ondisk.read.read_pte import PteProgram
from emitter_filter.ondisk.read.segment_layout import (
    PtdLayout,
    infer_ptd_layout,
    place_segments,
    ptd_prefix,
    ptd_segment_alignments,
    shared_segment_alignment,
)
from emitter_filter.ondisk.share_program import every_value, externalize, keep_own
from emitter_filter.ondisk.share_report import ShareReport, build_report
from emitter_filter.ondisk.write.output import OutputFile, ProgressFn, write_outputs
from emitter_filter.ondisk.write.prune_rewrite import OutSegment, StoredEntry, pruned_pte, verbatim
from emitter_filter.ondisk.write.ptd_writer import pack_flat_tensor
from emitter_filter.ondisk.write.targets import check_outputs, open_input, output_directory
from emitter_filter.program.fbs_schemas import FLAT_TENSOR
from emitter_filter.program.flatbuffer_tables import Table
from emitter_filter.program.generated_fields import table_text, vector_ints

__all__ = ["DEFAULT_MIN_BYTES", "share_files"]

logger = logging.getLogger(__name__)


def share_files(
    ptes: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    *,
    ptd_paths: Sequence[str | os.PathLike] = (),
    ptd_name: str = "shared.ptd",
    min_bytes: int = DEFAULT_MIN_BYTES,
    prune: bool = False,
    dedupe: bool = False,
    progress: ProgressFn | None = None,
    data_beside: bool = True,
) -> ShareReport:
    """Writes the programs into `out_dir` with the bytes they have in common in one `.ptd`.

    Args:
        ptes: The programs. Not modified.
        out_dir: Where to write each program (under its own name) and the
            shared `.ptd`; created if missing. Every output is written
            atomically; on any error none is left.
        ptd_paths: The `.ptd` files the programs load with, as `merge_files`
            takes them: `IN.ptd`, read by every program, or `FILE=IN.ptd` (or a
            (FILE, IN.ptd) tuple), read by the program FILE only. None given:
            each program reads the `.ptd` beside it with its stem, if any, unless
            `data_beside` is False (`data_files.data_files_for`). Not modified. Their entries go into the shared `.ptd`, each key once; a
            key whose bytes differ between programs stays with each program
            that reads it, in its `.pte` under that key.
        ptd_name: The shared `.ptd`'s file name.
        min_bytes: Contents shorter than this stay where they are.
        prune: First prune each program as `prune_file` does (into a temporary
            directory beside `out_dir`), then share the pruned programs. Not
            with `ptd_paths`: a `.ptd` several programs read cannot be pruned
            for one of them.
        dedupe: Also store a content repeated within one program once, as
            `prune_file(dedupe=True)` does (named data that repeats a constant).
        progress: Called with (bytes written, bytes to write).

    Returns:
        What was written.

    Raises:
        PteFormatError: A file is malformed, or one key holds different bytes
            in two files one program loads with.
        MethodSetError: A `FILE=` names none of the programs.
        OutputFileError: An output would replace an input, or cannot be written.
    """
    started = time.perf_counter()
    pte_files = [os.fspath(p) for p in ptes]
    out_path = os.fspath(out_dir)
    _check_inputs(pte_files, out_path, ptd_name)
    if prune:
        return _prune_then_share(
            pte_files,
            out_path,
            list(ptd_paths),
            started,
            data_beside,
            ptd_name=ptd_name,
            min_bytes=min_bytes,
            progress=progress,
            dedupe=dedupe,
        )
    # Where each program's data and each output are; nothing may overwrite an input.
    data_of = data_files_for(pte_files, ptd_paths, beside=data_beside)
    ptd_files = list(dict.fromkeys(p for files in data_of for p in files))
    pte_outputs, shared_output, copy_outputs = _output_paths(
        pte_files, ptd_files, out_path, ptd_name
    )
    check_inputs(list(zip(pte_files, data_of, strict=True)))

    # 1. Read every input, and the layout each program was written with.
    programs = _with_layouts(read_set(pte_files, ptd_files, data_of))
    assert programs.layouts is not None and programs.ptd_alignments is not None  # set just now
    ptds = [(*ptd, own) for ptd, own in zip(programs.ptds, programs.ptd_alignments, strict=True)]
    # 2. Find the contents stored in two or more files.
    found = find_set_shared(programs, min_bytes)
    opened: list[int] = []
    try:
        fds = {p: open_input(p, opened) for p in [*pte_files, *ptd_files]}
        # 3. Decide every output byte.
        outputs, ptd_outputs = _outputs(
            programs, ptds, found, fds, pte_outputs, shared_output, copy_outputs
        )
        deduplicated = _dedupe(outputs, programs.layouts) if dedupe else 0
        sizes = [o.size for o in outputs]
        # 4. Write, once proven and validated.
        claims = _claims(pte_files, data_of, ptd_files, bool(found.shared))
        prove_outputs(outputs, claims)
        with contextlib.ExitStack() as made:
            for directory in dict.fromkeys(os.path.dirname(o.path) for o in outputs):
                made.enter_context(output_directory(directory or out_path))
            bytes_after = write_outputs(
                outputs, progress, validate=proved(validate_outputs, claims, outputs)
            )
    finally:
        for fd in opened:
            os.close(fd)
    report = build_report(
        programs.reads,
        ptds,
        found,
        pte_outputs,
        ptd_outputs,
        sizes,
        bytes_after,
        started,
        data_of,
    )
    logger.info("%s", report.summary())
    return dataclasses.replace(report, deduplicated_bytes=deduplicated) if dedupe else report


def _check_inputs(ptes: Sequence[str], out_dir: str, ptd_name: str) -> None:
    if not ptes:
        raise OutputFileError("share: no programs given")
    if not ptd_name or os.path.basename(ptd_name) != ptd_name:
        raise OutputFileError(f"{ptd_name!r}: the shared .ptd's name must be a file name")
    absolute = [os.path.abspath(p) for p in ptes]
    for path, where in zip(ptes, absolute, strict=True):
        if absolute.count(where) > 1:
            raise OutputFileError(f"{path}: given twice; share writes each program once")
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise OutputFileError(f"{out_dir}: not a directory")


def _prune_then_share(ptes, out_dir, ptd_paths, started, data_beside, **options) -> ShareReport:
    """`prune_file` of each program into a temporary directory (the `.ptd` beside it pruned
    beside its output, with its stem), then `share_files` of those."""
    if ptd_paths:
        raise OutputFileError(
            f"{out_dir}: prune with .ptd files: a .ptd several programs read cannot be "
            "pruned for one; prune each program with its own .ptd first, then share"
        )
    parent = os.path.dirname(os.path.abspath(out_dir))
    try:
        temp = tempfile.TemporaryDirectory(dir=parent, prefix=".emitter-filter-")
    except OSError as error:
        raise OutputFileError(f"{out_dir}: cannot write: {error.strerror}") from error
    with temp:
        pruned = [os.path.join(temp.name, tail) for tail in unique_tails(ptes)]
        data_of = data_files_for(ptes, (), beside=data_beside)
        for source, target, files in zip(ptes, pruned, data_of, strict=True):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            prune_file(
                source,
                target,
                files,
                ptd_outputs=[os.path.splitext(target)[0] + ".ptd" for _ in files],
            )
        report = share_files(pruned, out_dir, **options)
    return dataclasses.replace(
        report,
        programs=tuple(
            dataclasses.replace(
                p, path=source, data=tuple(files), bytes_before=os.path.getsize(source)
            )
            for p, source, files in zip(report.programs, ptes, data_of, strict=True)
        ),
        ptd_inputs=tuple(f for files in data_of for f in files),
        bytes_before=sum(os.path.getsize(p) for p in ptes)
        + sum(os.path.getsize(f) for files in data_of for f in files),
        seconds=time.perf_counter() - started,
    )


def _output_paths(
    pte_files: list[str], ptd_files: list[str], out_path: str, ptd_name: str
) -> tuple[list[str], str, list[str]]:
    """(each program's output, the shared `.ptd`, each input `.ptd`'s copy), none of them
    an input, whichever of the shared `.ptd` or the copies is written."""
    # Each under its name, or the shortest tail of its path that tells it apart
    # (`a/model.pte`, `b/model.pte`: every optimum-executorch export is `model.pte`).
    pte_outputs = [os.path.join(out_path, tail) for tail in unique_tails(pte_files)]
    shared_output = os.path.join(out_path, ptd_name)
    copy_outputs = [os.path.join(out_path, tail) for tail in unique_tails(ptd_files)]
    check_outputs([*pte_files, *ptd_files], [*pte_outputs, shared_output], "share", [out_path])
    check_outputs([*pte_files, *ptd_files], [*pte_outputs, *copy_outputs], "share", [out_path])
    return pte_outputs, shared_output, copy_outputs


def _with_layouts(programs: ProgramSet) -> ProgramSet:
    """The set with each input's layout, read back as `prune` reads it, before anything changes."""
    layouts = []
    for read in programs.reads:
        aliased = find_aliases(find_shared_ranges(read.pte))
        layouts.append(
            read_pte_layout(
                read.pte,
                read.program,
                read.program_data,
                aliased,
                shared_segment_alignment(read.pte, aliased),
            )
        )
    own = tuple(
        infer_ptd_layout(ptd_segment_alignments(ptd), None, len(ptd.segments)).segment_alignments
        for ptd, _ in programs.ptds
    )
    return dataclasses.replace(programs, layouts=tuple(layouts), ptd_alignments=own)


def _outputs(programs, ptds, found, fds, pte_outputs, shared_output, copy_outputs):
    """Every output, decided: (outputs, the `.ptd` files among them)."""
    alignments = {ptd.path: own for ptd, _, own in ptds}
    outputs = [
        _shared_pte(n, read, layout, found, fds, alignments, output)
        for n, (read, layout, output) in enumerate(
            zip(programs.reads, programs.layouts, pte_outputs, strict=True)
        )
    ]
    if not found.shared:
        outputs += [
            verbatim(o, fds[ptd.path], ptd.file_bytes)
            for (ptd, _, _), o in zip(ptds, copy_outputs, strict=True)
        ]
        return outputs, copy_outputs
    alignment = max(
        [DEFAULT_SEGMENT_ALIGNMENT, *(layout.segment_alignment for layout in programs.layouts)]
    )
    outputs.append(
        _shared_ptd(found, ptds, _ptd_blobs_by_place(found), fds, shared_output, alignment)
    )
    return outputs, [shared_output]


def _shared_pte(
    number: int,
    read: PteProgram,
    layout: PteLayout,
    found: SharedSet,
    fds: dict[str, int],
    alignments: dict[str, Sequence[int]],
    output: str,
) -> OutputFile:
    """The program's output: itself when nothing of it moves, else rewritten."""
    fd = fds[read.pte.path]
    keys = {i: k for (p, i), k in found.constant_keys.items() if p == number}
    moved_keys = found.moved_keys.get(number, frozenset())
    own = found.own_keys.get(number, frozenset())
    if not keys and not moved_keys and not own and not relies_on_constant_buffer(read.pte):
        return verbatim(output, fd, read.pte.file_bytes)
    plans, constants, mutables, named = keep_own(
        read, externalize(read, keys), own, fds, alignments
    )
    return pruned_pte(
        dataclasses.replace(read.pte, plans=plans),
        read.program,
        every_value(plans),
        moved_keys,
        layout,
        fd,
        output,
        extra_constants=_copied(constants, fds, layout),
        extra_mutables=_copied(mutables, fds, layout),
        extra_named=named,
    )


def _copied(
    entries: Sequence[DataEntry], fds: dict[str, int], layout: PteLayout
) -> list[StoredEntry]:
    """The `.ptd` entries a program keeps (`keep_own`), each copied whole into its `.pte`."""
    return [
        StoredEntry(fds[e.file], e.offset, e.nbytes, e.nbytes, True, layout.tensor_alignment)
        for e in entries
    ]


def _ptd_blobs_by_place(found: SharedSet) -> dict:
    """Every `.ptd` segment that is a copy of some grouped content, by (file, segment)."""
    return {(b.file, b.index): b for b in found.content_of if b.kind == "external"}


def _tensor_layout(layout: TensorLayoutKey) -> Table:
    return FLAT_TENSOR.TensorLayout(
        scalarType=layout.scalar_type, sizes=list(layout.sizes), dimOrder=list(layout.dim_order)
    )


def _named(key: str, segment: int, layout: TensorLayoutKey | None = None) -> Table:
    return FLAT_TENSOR.NamedData(
        key=key,
        segmentIndex=segment,
        tensorLayout=None if layout is None else _tensor_layout(layout),
    )


class _PtdBuilder:
    """The shared `.ptd`'s entries and segments, each content stored once."""

    def __init__(self, found: SharedSet) -> None:
        self.found = found
        self.segments: list[OutSegment] = []
        self.named: list[Table] = []
        self.keys: set[str] = set()
        self._segment_of: dict[object, int] = {}

    def segment(self, blob, alignment: int, piece: Piece) -> int:
        """The segment holding `blob`'s content, added (aligned to `alignment`) if new."""
        content = self.found.content_of.get(blob, blob)
        if content not in self._segment_of:
            self._segment_of[content] = len(self.segments)
            self.segments.append(OutSegment(alignment, [piece]))
        return self._segment_of[content]

    def add(self, key: str, segment: int, layout: TensorLayoutKey | None = None) -> None:
        if key not in self.keys:
            self.keys.add(key)
            self.named.append(_named(key, segment, layout))


def _shared_ptd(
    found: SharedSet, ptds, blobs_by_place, fds: dict[str, int], output: str, alignment: int
) -> OutputFile:
    """The shared `.ptd`: every input `.ptd` entry, then each shared content once."""
    builder = _PtdBuilder(found)
    for ptd, flat_tensor, own in ptds:
        for entry in flat_tensor.namedData or ():
            key = table_text(entry.key) or ""
            if key in found.clashing or key in builder.keys:
                continue  # Each program keeps its own bytes of that key; or in already.
            segment = ptd.segments[entry.segmentIndex]
            blob = blobs_by_place.get((ptd.path, entry.segmentIndex), (ptd.path, segment.index))
            piece = Piece(fds[ptd.path], segment.offset, segment.size)
            index = builder.segment(blob, own[entry.segmentIndex], piece)
            layout = entry.tensorLayout
            builder.add(
                key,
                index,
                None
                if layout is None
                else TensorLayoutKey(
                    int(layout.scalarType),
                    tuple(vector_ints(layout.sizes)),
                    tuple(vector_ints(layout.dimOrder)),
                ),
            )
    for content in found.shared:
        first = content.copies[0]
        piece = Piece(fds[first.file], first.offset, content.nbytes)
        index = builder.segment(first, content.alignment, piece)
        for blob in content.copies:
            for key in blob.keys:
                builder.add(key, index)
            if blob.kind == "constant" and blob.program is not None:  # a `.pte`'s constant
                for layout, key in found.constant_keys.get((blob.program, blob.index), {}).items():
                    builder.add(key, index, layout)
    offsets, data_size = place_segments(
        [(s.size, s.alignment) for s in builder.segments], alignment
    )
    flat_tensor = FLAT_TENSOR.FlatTensor(
        segments=[
            FLAT_TENSOR.DataSegment(offset=o, size=s.size)
            for o, s in zip(offsets, builder.segments, strict=True)
        ],
        namedData=builder.named,
    )
    prefix, base = ptd_prefix(pack_flat_tensor(flat_tensor), PtdLayout(alignment, ()), data_size)
    first_fd = next(iter(fds.values()))
    return OutputFile(
        output,
        first_fd,
        prefix,
        [(base + o, s.pieces) for o, s in zip(offsets, builder.segments, strict=True)],
    )


def _dedupe(outputs: list[OutputFile], layouts: Sequence[PteLayout]) -> int:
    """`dedupe.dedupe_output` of each program's output, as `prune --dedupe` writes it;
    the bytes it saves."""
    saved = 0
    for number, layout in enumerate(layouts):
        outputs[number], report = dedupe_output(outputs[number], layout.segment_alignment)
        saved += report.saved_bytes
    return saved


def _claims(pte_files, data_of, ptd_files, shared: bool) -> list[Claim]:
    """What a share claims of each program it writes: its methods are its input's, read
    with the shared `.ptd` (written after the programs), or else with copies of its own."""
    claims = []
    for number, (pte, files) in enumerate(zip(pte_files, data_of, strict=True)):
        first = len(pte_files)
        ptds = (first,) if shared else tuple(first + ptd_files.index(p) for p in files)
        claims.append(Claim(inputs=(Side(pte, tuple(files)),), pte=number, ptds=ptds))
    return claims
