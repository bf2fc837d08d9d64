"""Several programs, one `.pte` of several methods: `emitter-filter merge`.

ExecuTorch's runtime loads any method of a program by name, and every method
reads the one constant segment, `segments` table and `named_data`. `merge_files`
writes the programs of separately exported `.pte` files as one:

    a.pte  [header | program: forward            | constant: P W1 W2 | delegate: D ]
    b.pte  [header | program: forward            | constant: P W1 W3 | delegate: D ]
    out    [header | program: head_a, head_b     | constant: P W1 W2 W3 | delegate: D ]

1. Read each input (`_read_programs`) and analyse it as `prune` does
   (`merge_inputs.read_inputs`, by `analysis.analyse_file`): only what a method can
   reach is written, so the output audits clean.
2. Choose and name the methods (`_choose`, by `merge_names`: as in their inputs, or
   as `--method`, `--prefix` and `--drop` say; a method equal to one of an earlier
   input with its name written once), refusing differing methods of one name, all at
   once with the command that resolves them, before anything is opened for writing.
   An input with methods left out is read without them, as `split` reads a file
   (`_kept_inputs`).
3. Store once, in first-reference order over the inputs in the order given:
   constant entries with equal bytes (tensors of any layout read an entry as raw
   bytes, as the emitter's own sharing within a program does), delegate segments
   with equal bytes, inline delegate blobs with equal bytes, named data with an
   equal key and equal bytes (an equal key with other bytes is refused: the
   runtime resolves a key once). Equal bytes are found as `share` finds them
   (`merge_program.Contents`, by `duplicates.group_duplicates`): nothing whose size
   no other has is read. Mutable data stays per input: merging does not make
   methods share state.
4. Renumber each plan's values (`plan_indices.remap_plan_values`), data indices
   (`remap_data_indices`, one map per input) and delegates, and pack with the
   inputs' largest alignments, as `prune` packs (`merge_program.merged_pte`); with
   `dedupe`, store once what repeats within the output, as `prune --dedupe` does
   (`dedupe.dedupe_output`); prove the output reads what its inputs read, and
   stream every segment from its input (`_write`, by `output.write_outputs`).

Inputs with `.ptd` files (`data`): each reads its keys from the `.ptd` files it is
given (a key two of them give with other bytes refused,
`merge_program.check_data_keys`); the output has one `.ptd` with every live key once
(`merge_program.merged_ptd`), or, with `inline`, none: external tensors become
constant entries (mutable ones, training weights, mutable entries), the `.ptd`'s
named data the program's own.

The output always has a constant segment, never `constant_buffer`: an input on that
deprecated path (`prune.relies_on_constant_buffer`) comes out in the layout the
runtime accepts, and the report names it. `split` is the other way (`split.py`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from emitter_filter.errors import MethodSetError
from emitter_filter.ondisk.analyse.proof import Claim, Side, prove_outputs, proved
from emitter_filter.ondisk.analyse.validate import check_inputs, validate_outputs
from emitter_filter.ondisk.dedupe import dedupe_output
from emitter_filter.ondisk.merge_inputs import MergeInput, dropped_bytes, read_inputs
from emitter_filter.ondisk.merge_names import Choice, choose_names
from emitter_filter.ondisk.merge_program import (
    Contents,
    check_data_keys,
    merged_layout,
    merged_ptd,
    merged_pte,
)
from emitter_filter.ondisk.merge_report import (
    MergedMethod,
    MergeReport,
    dropped_methods,
    merged_methods,
)
from emitter_filter.ondisk.method_names import parse_drop, parse_method, parse_prefix
from emitter_filter.ondisk.prune import changes_pte, relies_on_constant_buffer
from emitter_filter.ondisk.read.byte_source import ByteSource
from emitter_filter.ondisk.read.data_files import data_files_for
from emitter_filter.ondisk.read.layout import PteLayout
from emitter_filter.ondisk.read.method_bound import check_renames
from emitter_filter.ondisk.read.read_pte import PteProgram, read_pte_program
from emitter_filter.ondisk.without_methods import view_without
from emitter_filter.ondisk.write.output import OutputFile, ProgressFn, write_outputs
from emitter_filter.ondisk.write.prune_rewrite import verbatim
from emitter_filter.ondisk.write.targets import check_outputs
from emitter_filter.program.reachability import DataSpace

__all__ = ["merge_files"]

logger = logging.getLogger(__name__)


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
    request = _request(
        inputs, output, methods, prefixes, drops, data, ptd_out, inline, dedupe, data_beside
    )
    reads = _read_programs(request)
    choice = _choose(request, reads)
    written_methods = merged_methods(request.inputs, choice)
    if chosen is not None:
        chosen(written_methods)  # `--verify`: which input method each is, before writing.
    written = _write(request, _kept_inputs(request, reads, choice), choice, progress)
    report = MergeReport(
        inputs=tuple(request.inputs),
        output=request.output,
        ptd_output=request.ptd_out if written.ptd else None,
        methods=written_methods,
        bytes_before=sum(read.pte.file_bytes for read in reads)
        + sum(os.path.getsize(p) for p in request.data_files),
        bytes_after=written.bytes_after,
        stored_once=written.stored_once,
        dropped=written.dropped,
        seconds=time.perf_counter() - started,
        dropped_methods=dropped_methods(request.inputs, choice),
        deduplicated_bytes=written.deduplicated,
        data=tuple(tuple(files) for files in request.data_of),
        constant_buffer_inputs=tuple(
            path
            for path, read in zip(request.inputs, reads, strict=True)
            if relies_on_constant_buffer(read.pte)
        ),
    )
    logger.info("%s", report.summary())
    return report


# --- 1. what was asked, and the programs read ---------------------------------------


@dataclass(frozen=True)
class _Request:
    """A merge as asked: the paths as text, the flags parsed, the `.ptd` files each
    input reads (`data_of`; `data` as given, for the command line)."""

    inputs: list[str]
    output: str
    ptd_out: str | None
    renames: list[tuple[str, str, str]]
    prefixes: list[tuple[str, str]]
    drops: list[tuple[str, str]]
    data: Sequence[str | os.PathLike | tuple[str, str]]
    data_of: list[list[str]]
    inline: bool
    dedupe: bool

    @property
    def data_files(self) -> list[str]:
        """Every `.ptd` file an input reads, once."""
        return list(dict.fromkeys(p for files in self.data_of for p in files))

    def command(self, more: list[str]) -> str:
        """The command line of this merge, as the CLI takes it, with `more` flags at the end."""
        words = ["emitter-filter", "merge", *self.inputs, "-o", self.output]
        words += [
            w for new, path, method in self.renames for w in ("--method", f"{new}={path}:{method}")
        ]
        words += [w for prefix, path in self.prefixes for w in ("--prefix", f"{prefix}={path}")]
        words += [w for path, method in self.drops for w in ("--drop", f"{path}:{method}")]
        for spec in self.data:
            spec = f"{os.fspath(spec[0])}={os.fspath(spec[1])}" if isinstance(spec, tuple) else spec
            words += ["--data", os.fspath(spec)]
        words += ["--ptd-out", self.ptd_out] if self.ptd_out else []
        words += ["--inline"] if self.inline else []
        words += ["--dedupe"] if self.dedupe else []
        return shlex.join([*words, *more])


def _request(
    inputs, output, methods, prefixes, drops, data, ptd_out, inline, dedupe, data_beside
) -> _Request:
    """`merge_files`' arguments, checked and parsed (the flags as `method_names` reads
    them), with the `.ptd` files each input reads (`data_files.data_files_for`)."""
    input_files = [os.fspath(p) for p in inputs]
    ptd_path = None if ptd_out is None else os.fspath(ptd_out)
    if not input_files:
        raise MethodSetError("merge: no programs given")
    renames = [parse_method(m) if isinstance(m, str) else m for m in methods]
    prefix_pairs = [parse_prefix(p) if isinstance(p, str) else p for p in prefixes]
    drop_pairs = [parse_drop(d) if isinstance(d, str) else d for d in drops]
    data_of = data_files_for(input_files, data, beside=data_beside)
    if any(data_of) and (ptd_path is None) == (not inline):
        raise MethodSetError(_where_data_goes(input_files, data, data_of))
    return _Request(
        input_files,
        os.fspath(output),
        ptd_path,
        renames,
        prefix_pairs,
        drop_pairs,
        data,
        data_of,
        inline,
        dedupe,
    )


def _where_data_goes(inputs, data, data_of) -> str:
    """The message for data files read with neither `--ptd-out` nor `--inline`."""
    if data:
        return "merge: with --data, give --ptd-out OUT.ptd or --inline (one of them)"
    pte, files = next((p, f) for p, f in zip(inputs, data_of, strict=True) if f)
    return (
        f"merge: {pte} reads {files[0]}, the .ptd beside it: give --ptd-out OUT.ptd or "
        "--inline for its data, or --no-data-beside to read it without"
    )


def _read_programs(request: _Request) -> list[PteProgram]:
    """Each input read with its `.ptd` files, once every output is known not to replace
    an input and every input is valid; refuses what cannot be merged (`_check_inputs`)."""
    outputs = [request.output, *([request.ptd_out] if request.ptd_out else [])]
    check_outputs([*request.inputs, *request.data_files], outputs, "merge")
    check_inputs(list(zip(request.inputs, request.data_of, strict=True)))
    reads = [
        read_pte_program(path, files)
        for path, files in zip(request.inputs, request.data_of, strict=True)
    ]
    _check_inputs(request.inputs, reads)
    return reads


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


# --- 2. the methods written, and the inputs they are written from -------------------


def _choose(request: _Request, reads: Sequence[PteProgram]) -> Choice:
    """The methods' names in the output (`merge_names.choose_names`), each rename checked
    not to break what a method's name binds (`method_bound.check_renames`)."""
    choice = choose_names(
        request.inputs, reads, request.renames, request.prefixes, request.drops, request.command
    )
    for path, read, old, new in zip(
        request.inputs, reads, choice.originals, choice.names, strict=True
    ):
        renamed = {o: n for o, n in zip(old, new, strict=True) if n is not None}
        check_renames(path, read, renamed, "merge --method/--prefix")
    if not any(any(names) for names in choice.names):
        raise MethodSetError("merge: every method is dropped: nothing to write")
    return choice


@dataclass(frozen=True)
class _Kept:
    """The inputs a method is written from, each read without the methods not written.

    `layouts`: the layout of the input's file where it was read without some methods
    (the view's own would read as another), else None; `names`: its plans' names in
    the output.
    """

    inputs: list[str]
    reads: list[PteProgram]
    layouts: list[PteLayout | None]
    names: list[list[str]]


def _kept_inputs(request: _Request, reads: Sequence[PteProgram], choice: Choice) -> _Kept:
    """The inputs with a method written, each without the methods not written, read as
    `split` reads them (`_read_without`)."""
    kept = _Kept([], [], [], [])
    for number, (read, new) in enumerate(zip(reads, choice.names, strict=True)):
        if not any(new):
            continue
        layout = None
        if None in new:
            olds = choice.originals[number]
            methods = [m for m, name in zip(olds, new, strict=True) if name is not None]
            read, layout = _read_without(read, methods, request.data_of[number])
        kept.inputs.append(request.inputs[number])
        kept.reads.append(read)
        kept.layouts.append(layout)
        kept.names.append([name for name in new if name is not None])
    return kept


def _read_without(
    read: PteProgram, methods: Sequence[str], files: Sequence[str]
) -> tuple[PteProgram, PteLayout]:
    """`read` with only `methods`' plans, read from a view of its file as `split` prunes it
    (`split.view_without`), and the layout of the file itself, to write it with."""
    with ByteSource(read.pte.path) as source:
        view, layout = view_without(read, methods, source)
        return read_pte_program(view(source), files), layout


# --- 3 and 4. stored once, renumbered, proved and written ---------------------------


@dataclass(frozen=True)
class _Written:
    """What `_write` wrote, for the report (`MergeReport`'s fields of those names)."""

    bytes_after: int
    stored_once: int
    dropped: int
    ptd: bool
    deduplicated: int | None


def _write(request: _Request, kept: _Kept, choice: Choice, progress: ProgressFn | None) -> _Written:
    """Decides every byte of the outputs, proves each method reads what its input's read
    (`proof.prove_outputs`), and writes them, all or none (`output.write_outputs`)."""
    opened: list[int] = []
    try:
        with contextlib.ExitStack() as stack:
            items, sources = read_inputs(kept.inputs, kept.reads, stack, opened, kept.layouts)
            contents = Contents(sources)
            check_data_keys(items, contents)
            dropped = dropped_bytes(items)
            live = sum(
                item.analysis.count.live[space]
                for item in items
                for space in ("constant", "named_data", "delegate", "external")
            )
            ptd = None
            if not request.inline and request.ptd_out is not None:
                ptd = merged_ptd(items, contents, request.ptd_out)
            merged, written = _merged(request, kept, items, contents, live)
            if ptd is not None:
                written += sum(len(p) for _, pieces in ptd.runs for p in pieces)
            deduplicated = None
            if request.dedupe:
                alignment = merged_layout([item.layout for item in items]).segment_alignment
                merged, deduplicated = dedupe_output(merged, alignment)
            outputs = [merged, *([ptd] if ptd else [])]
            claims = [_claim(request, choice, ptd is not None)]
            prove_outputs(outputs, claims)
            bytes_after = write_outputs(
                outputs, progress, validate=proved(validate_outputs, claims, outputs)
            )
    finally:
        for fd in opened:
            os.close(fd)
    return _Written(
        bytes_after=bytes_after,
        # What the inputs' live references read, against what the output holds for them.
        stored_once=max(live - written, 0),
        dropped=dropped,
        ptd=ptd is not None,
        deduplicated=None if deduplicated is None else deduplicated.saved_bytes,
    )


def _merged(
    request: _Request, kept: _Kept, items: Sequence[MergeInput], contents: Contents, live: int
) -> tuple[OutputFile, int]:
    """The merged `.pte`, and the bytes it holds of what the inputs' live references read."""
    changed = (
        request.renames
        or request.prefixes
        or request.data_files
        or len(kept.inputs) != len(request.inputs)
        or any(kept.layouts)
    )
    if len(items) == 1 and not changed and not changes_pte(items[0].analysis):
        # One program with nothing to change is its own merge, as it is its own prune.
        return verbatim(request.output, items[0].fd, kept.reads[0].pte.file_bytes), live
    return merged_pte(items, kept.names, contents, request.output, request.inline)


def _claim(request: _Request, choice: Choice, ptd_written: bool) -> Claim:
    """What a merge claims of its output: each method kept is its input's method, under its
    new name; the `.ptd` is the one written, or else the inputs' (none where `inline`)."""
    methods = {
        new: (number, old)
        for number, (olds, news) in enumerate(zip(choice.originals, choice.names, strict=True))
        for old, new in zip(olds, news, strict=True)
        if new is not None
    }
    data_of = request.data_of
    others = () if request.inline else tuple(os.fspath(p) for files in data_of for p in files)
    return Claim(
        inputs=tuple(
            Side(path, tuple(os.fspath(p) for p in files))
            for path, files in zip(request.inputs, data_of, strict=True)
        ),
        pte=0,
        ptds=(1,) if ptd_written else others,
        methods=methods,
    )
