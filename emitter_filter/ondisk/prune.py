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
   rewritten (`prune_rewrite`: values compacted in order and renumbered by
   `plan_indices`, data entries renumbered in first-reference order by
   `reachability.order_live_data`, the rule `prune_emitted.py` uses in memory) and
   packed with that layout; a `.ptd` with something dead is rebuilt the same way
   (`flat_tensor_writer`).
3. Write: `output.write_outputs` streams the kept bytes from the inputs
   into temporary files beside the outputs, renamed over them once complete.
   The `.pte`'s is begun before step 1 as a copy of the input (`stream.EarlyCopy`):
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

from emitter_filter.errors import OutputFileError
from emitter_filter.ondisk.analyse.analysis import FileAnalysis, analyse_file
from emitter_filter.ondisk.analyse.dead_bytes import keep_ptd_key
from emitter_filter.ondisk.analyse.proof import Claim, Side, prove_outputs, proved
from emitter_filter.ondisk.analyse.stored_ranges import find_aliases, find_shared_ranges
from emitter_filter.ondisk.analyse.validate import check_inputs, validate_outputs
from emitter_filter.ondisk.prune_report import FilePruneReport
from emitter_filter.ondisk.read.byte_source import ByteSource
from emitter_filter.ondisk.read.file_model import PteFile
from emitter_filter.ondisk.read.layout import PteLayout, read_pte_layout
from emitter_filter.ondisk.read.read_pte import PteProgram, read_pte_program
from emitter_filter.ondisk.read.segment_layout import read_segment_layout, shared_segment_alignment
from emitter_filter.ondisk.read.state_file import state_file
from emitter_filter.ondisk.write.output import OutputFile, ProgressFn, write_outputs
from emitter_filter.ondisk.write.prune_rewrite import pruned_ptd, pruned_pte, verbatim
from emitter_filter.ondisk.write.stream import EarlyCopy
from emitter_filter.ondisk.write.targets import check_outputs, open_input, output_directory
from emitter_filter.program.state_names import StateFile

# Besides `prune_file`, `share` and `merge` build on its view and its tests of a file (and on
# the rewrite's parts, `prune_rewrite`).
__all__ = [
    "ProgramView",
    "prune_file",
    "changes_pte",
    "relies_on_constant_buffer",
    "read_layout",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProgramView:
    """A file to prune in place of the input's, and the layout to write it with.

    `split.split_file` prunes the program without some plans: `source` makes that
    file from the input's (each segment where the input has it), `layout` is the
    input's (the view's own offsets, a smaller program before the same segment
    base, would read as another).
    """

    source: Callable[[ByteSource], ByteSource]
    layout: PteLayout
    #: Each method's name in the input, by its name in the view (a split's renames).
    methods: Mapping[str, str] | None = None


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
            written = pruned_ptd(path, output, ptd_fd, keep_key, segment_alignment)
        if written is not None:
            outputs.append(written)
            ptd_written[path] = output
    return outputs, ptd_written


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
