"""`moved_copy`: `split` of a program whose kept methods pack longer than the input's program.

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

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator

from emitter_filter.errors import OutputFileError, PteFormatError
from emitter_filter.ondisk.read.byte_source import ByteSource, Piece

__all__ = ["moves_segments", "moved_copy"]

_CHUNK = 1 << 20

#: A `ProgramView`'s `source`: the view's bytes, from a source open on the input.
_ViewOf = Callable[[ByteSource], ByteSource]


def moves_segments(view: _ViewOf, source: ByteSource, base: int) -> bool:
    """Whether the view of the file `source` is puts its segment data elsewhere than at
    `base`, the input's segment base offset."""
    return base != 0 and len(view(source).parts[0]) != base


@contextlib.contextmanager
def moved_copy(src: str, dst: str, view: _ViewOf) -> Iterator[str]:
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
