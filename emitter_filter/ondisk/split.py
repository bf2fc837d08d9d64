"""`emitter-filter split`: the chosen methods of a `.pte`, with only what they read.

`split_file` is `prune` of the program without the other plans: their instructions
were the only readers of what they alone read.

1. Name the methods kept: `NAME`, or `NEW=NAME` to rename one as it is cut, each with
   the training methods that follow it (`_split_names`).
2. View the file without the other plans (`without_methods.view_without`): the
   program with only the kept plans and the inline blobs they read, then the input's
   segment data where the input has it, so that every offset `prune` copies from is
   the input file's own.
3. Prune the view (`prune.prune_file`): that is the split.

A program the input's writer packed to end at its segment base (ExecuTorch's training
programs, `dnf_v5` among them), or one given a longer name, packs a few bytes longer
than that and cannot end before the segment data: the view then moves the segment
data on, as `merge` places it, and since `prune` copies by offsets in the file it
opens, the view is written out first, beside the output, and pruned from there
(`_moved_copy`: one more copy of the file's bytes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from collections.abc import Iterator, Sequence

from emitter_filter.errors import MethodSetError, OutputFileError, PteFormatError
from emitter_filter.ondisk.analyse.validate import check_inputs
from emitter_filter.ondisk.method_names import TRAINING_PREFIX, check_new_name, plan_names
from emitter_filter.ondisk.prune import ProgramView, prune_file
from emitter_filter.ondisk.prune_report import FilePruneReport
from emitter_filter.ondisk.read.byte_source import ByteSource, Piece
from emitter_filter.ondisk.read.method_bound import check_renames
from emitter_filter.ondisk.read.read_pte import read_pte_program
from emitter_filter.ondisk.without_methods import ViewOf, view_without
from emitter_filter.ondisk.write.output import ProgressFn
from emitter_filter.ondisk.write.targets import check_outputs
from emitter_filter.program.reachability import DataSpace

__all__ = ["split_file"]


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
        view, layout = view_without(read, [m for m in present if m in chosen], source, chosen, True)
        moved = _moves_segments(view, source, read.pte.segment_base_offset)
    if not moved:
        methods_in = {new: old for old, new in chosen.items()}
        return prune_file(src, dst, progress=progress, view=ProgramView(view, layout, methods_in))
    with _moved_copy(src, dst, view) as copy:
        # Pruned from the copy, whose offsets are the view's, as the input's layout.
        report = prune_file(copy, dst, progress=progress, view=ProgramView(_same, layout))
    return dataclasses.replace(report, path=src, bytes_before=os.stat(src).st_size)


def _same(source: ByteSource) -> ByteSource:
    return source


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


# --- when the segment data moves ------------------------------------------------

_CHUNK = 1 << 20


def _moves_segments(view: ViewOf, source: ByteSource, base: int) -> bool:
    """Whether the view of the file `source` is puts its segment data elsewhere than at
    `base`, the input's segment base offset."""
    return base != 0 and len(view(source).parts[0]) != base


@contextlib.contextmanager
def _moved_copy(src: str, dst: str, view: ViewOf) -> Iterator[str]:
    """The view of `src` written to a temporary file beside `dst`, removed on exit.

    Raises:
        OutputFileError: It cannot be written beside `dst`.
        PteFormatError: `src` changed while it was read.
    """
    try:
        fd, temp = tempfile.mkstemp(
            dir=os.path.dirname(os.path.abspath(dst)),
            prefix=f".{os.path.basename(dst)}.",
            suffix=".split",
        )
    except OSError as error:
        raise OutputFileError(f"{dst}: cannot write: {error.strerror}") from error
    try:
        with os.fdopen(fd, "wb") as out, ByteSource(src) as source:
            for part in view(source).parts:
                if isinstance(part, Piece):
                    _copy(src, part, out)
                else:
                    out.write(part)
        yield temp
    finally:
        os.unlink(temp)


def _copy(src: str, piece: Piece, out) -> None:
    """`piece` of `src` into `out`, a chunk at a time."""
    end = piece.offset + piece.nbytes
    for at in range(piece.offset, end, _CHUNK):
        data = os.pread(piece.fd, min(_CHUNK, end - at), at)
        if len(data) != min(_CHUNK, end - at):
            raise PteFormatError(src, "the file changed while it was read", at)
        out.write(data)
