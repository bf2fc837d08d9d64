"""`prune_moved`: `split` of a program whose kept methods pack longer than the input's program.

`split` prunes a view of its input (`merge._without_plans`): the program without the
other methods, then the input's segment data where the input has it, so that every
offset `prune` copies from is the input file's own. A program the input's writer
packed to end at its segment base (ExecuTorch's training programs, `dnf_v5` among
them), or one given a longer name, packs a few bytes longer than that and cannot end
before the segment data: the view then moves the segment data on, as `merge` places
it, and since `prune` copies by offsets in the file it opens, the view is written out
first, beside the output, and pruned from there (one more copy of the file's bytes).
"""

from __future__ import annotations

import dataclasses
import os
import tempfile

from emitter_filter.errors import OutputFileError, PteFormatError
from emitter_filter.ondisk.prune import FilePruneReport, ProgramView, prune_file
from emitter_filter.ondisk.read.byte_source import ByteSource, Piece
from emitter_filter.ondisk.write.output import ProgressFn

__all__ = ["moves_segments", "prune_moved"]

_CHUNK = 1 << 20


def moves_segments(view: ProgramView, source: ByteSource, base: int) -> bool:
    """Whether `view` of the file `source` is puts its segment data elsewhere than at
    `base`, the input's segment base offset."""
    return base != 0 and len(view.source(source).parts[0]) != base


def prune_moved(
    src: str, dst: str, view: ProgramView, progress: ProgressFn | None = None
) -> FilePruneReport:
    """`prune_file(src, dst, view=view)` for a view that moves the segment data.

    Raises:
        OutputFileError: The view cannot be written beside `dst`.
        PteFormatError: The file is malformed.
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
            for part in view.source(source).parts:
                if isinstance(part, Piece):
                    _copy(src, part, out)
                else:
                    out.write(part)
        report = prune_file(
            temp, dst, progress=progress, view=ProgramView(lambda moved: moved, view.layout)
        )
    finally:
        os.unlink(temp)
    return dataclasses.replace(report, path=src, bytes_before=os.stat(src).st_size)


def _copy(src: str, piece: Piece, out) -> None:
    """`piece` of `src` into `out`, a chunk at a time."""
    end = piece.offset + piece.nbytes
    for at in range(piece.offset, end, _CHUNK):
        data = os.pread(piece.fd, min(_CHUNK, end - at), at)
        if len(data) != min(_CHUNK, end - at):
            raise PteFormatError(src, "the file changed while it was read", at)
        out.write(data)
