"""Small outputs written whole (a report, a page, a budget), atomically, never onto an input.

Each is written into a temporary file beside its target and renamed over it once
complete, as `output.write_outputs` writes the large ones; several of one command are
all written, or none.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Sequence

from emitter_filter.errors import OutputFileError
from emitter_filter.ondisk.write.stream import open_temp
from emitter_filter.ondisk.write.targets import check_outputs
from emitter_filter.regular_files import output_target

__all__ = ["write_file", "write_files", "write_text"]


def write_text(path: str | os.PathLike, text: str, inputs: Sequence[str] = ()) -> None:
    """Writes a small text output (a report, a page) atomically, never onto an input.

    Refuses to replace anything but a regular file (a directory, a device, a pipe);
    a link to a regular file is written through and stays a link.

    Raises:
        OutputFileError: `path` is an input or not a regular file, or cannot be written.
    """
    write_files([(os.fspath(path), text.encode("utf-8"))], inputs)


def write_files(
    files: Sequence[tuple[str, bytes]], inputs: Sequence[str] = (), operation: str = "writing"
) -> None:
    """Writes several small outputs of one command (a page and its node data, a budget and
    its benchmark sizes): all of them, or none.

    `check_outputs` first refuses any of them; then each is written into a
    temporary file beside its target, and only once all are complete are they
    renamed into place (through a link, onto the file it names).

    Raises:
        OutputFileError: One cannot be written (the message names it); none is left behind.
    """
    check_outputs([os.fspath(i) for i in inputs], [path for path, _ in files], operation)
    temps: list[tuple[str, str, str]] = []
    try:
        for path, data in files:
            target = output_target(path)
            fd, temp = open_temp(target, _new_file_mode(target))
            temps.append((temp, target, path))
            try:
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                finally:
                    os.close(fd)
            except OSError as error:
                raise OutputFileError(f"{path}: cannot write: {error.strerror or error}") from error
        for temp, target, path in temps:
            try:
                os.replace(temp, target)
            except OSError as error:
                raise OutputFileError(f"{path}: cannot write: {error.strerror or error}") from error
    finally:
        for temp, _, _ in temps:
            with contextlib.suppress(FileNotFoundError):  # renamed into place
                os.unlink(temp)


def write_file(path: str, data: bytes) -> None:
    """Writes one small output (a report) atomically, as `write_outputs` writes the large ones.

    A new file gets the permissions `open` would give it; a replaced one keeps its own.

    Raises:
        OutputFileError: It is not a regular file, or cannot be written; nothing is left behind.
    """
    target = output_target(path)
    fd, temp = open_temp(target, _new_file_mode(target))
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.replace(temp, target)
    except BaseException as error:
        os.unlink(temp)
        if isinstance(error, OSError):
            raise OutputFileError(f"{path}: cannot write: {error.strerror}") from error
        raise


def _new_file_mode(target: str) -> int:
    """The permissions a replaced file keeps, or those `open` would give a new one."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
