"""The file tools read and write regular files only; this module says so once.

Shared: the on-disk side opens `.pte`/`.ptd` files with it, `state_names` the `--names` file.

- An input that is not a regular file (a directory, a FIFO, a device, a socket)
  is refused with one line before a byte is read: it is opened without blocking
  (a FIFO with no writer would block `open` forever) and checked on the open
  descriptor, so what is checked is what is read.
- An output target that exists and is not a regular file is refused, never
  replaced: the atomic rename `output.write_outputs` ends with would put a
  regular file in place of a FIFO or of `/dev/null`. A symbolic link is followed
  (the file it names is written, as `cp` writes through it), so that a link
  stays a link; one that names nothing is refused, as `cp` refuses it.
"""

from __future__ import annotations

import os
import stat

from emitter_filter.errors import OutputFileError, PteFormatError

__all__ = ["open_regular_input", "output_target"]

# What is not a regular file, in the words `ls -l` and `find -type` use.
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((kind for test, kind in _KINDS if test(mode)), "not a file")


def open_regular_input(path: str) -> int:
    """Opens `path` read-only and returns its descriptor, if it is a regular file.

    Raises:
        PteFormatError: It cannot be opened, or is not a regular file.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise PteFormatError(path, f"cannot open: {error.strerror}") from error
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise PteFormatError(path, f"cannot read: {_kind(mode)}, not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def output_target(path: str) -> str:
    """The file writing to `path` renames onto: `path`, or the file its link names.

    Raises:
        OutputFileError: `path` is empty, exists and is not a regular file, or is a
            link that names nothing.
    """
    if not path:
        raise OutputFileError("an output path is empty: give a file name")
    target = os.path.realpath(path) if os.path.islink(path) else path
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        if target != path:
            raise OutputFileError(
                f"{path}: cannot write: a symbolic link to {target}, which does not exist"
            ) from None
        return path
    except OSError as error:
        raise OutputFileError(f"{path}: cannot write: {error.strerror}") from error
    if not stat.S_ISREG(mode):
        raise OutputFileError(
            f"{path}: cannot write: {_kind(mode)}, not a regular file; "
            "it is never replaced (remove it or choose another output)"
        )
    return target
