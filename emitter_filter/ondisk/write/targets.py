"""The files a command touches, checked before any byte is written.

Every output of a command is refused or accepted at once (`check_outputs`): never an
input, never two outputs on one file, never what is not a regular file, never a directory
that takes no new file. Inputs are opened read-only (`open_input`); the directories a
command creates for its outputs are removed again if it fails (`output_directory`).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Sequence

from emitter_filter.errors import OutputFileError
from emitter_filter.ondisk.write.stream import open_temp
from emitter_filter.regular_files import open_regular_input, output_target

__all__ = ["check_outputs", "check_writable", "open_input", "output_directory"]


def check_outputs(
    inputs: Sequence[str],
    outputs: Sequence[str],
    operation: str = "prune",
    created: Sequence[str] = (),
) -> None:
    """The one check of every output of a command, made for all of them before the first is
    written, so that they are all refused or all written.

    Refuses an empty path, an output that is an input, two outputs on one file
    (a link and the file it names included), a target that is not a regular
    file or a link that names nothing (`regular_files.output_target`: a link to
    a file is written through), and a directory that is missing or takes no new
    file (tested by creating and removing a temporary file in it, the one test
    that root and read-only mounts answer truthfully). `created` are the
    directories the command creates (`output_directory`): an output inside one
    is tested at its nearest existing ancestor. `operation` names what writes
    them (`prune`, `dedupe`) in the message.

    Raises:
        OutputFileError: One output cannot be written; the message names it.
    """
    created = [os.path.abspath(c) for c in created]
    targets: dict[str, str] = {}
    directories: dict[str, str] = {}
    for output in outputs:
        target = output_target(output)
        for source in inputs:
            if _same_file(source, output):
                raise OutputFileError(
                    f"{output}: is the input {source}; {operation} never overwrites its input"
                )
        key = os.path.realpath(target)
        if key in targets:
            raise OutputFileError(
                f"{output}: also given as {targets[key]}; two outputs of one command "
                "would be written to the same file"
            )
        targets[key] = output
        directory = _check_directory(output, os.path.dirname(os.path.abspath(target)), created)
        directories.setdefault(directory, output)
    for directory, output in directories.items():
        try:
            fd, temp = tempfile.mkstemp(
                dir=directory, prefix=".emitter-filter-check.", suffix=".tmp"
            )
        except OSError as error:
            raise OutputFileError(f"{output}: cannot write: {error.strerror}") from error
        os.close(fd)
        os.unlink(temp)


def _same_file(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _existing_ancestor(directory: str) -> str:
    """`directory`, or its nearest ancestor that exists."""
    while not os.path.lexists(directory) and os.path.dirname(directory) != directory:
        directory = os.path.dirname(directory)
    return directory


def _check_directory(path: str, directory: str, created: Sequence[str]) -> str:
    """Refuses an output whose directory is missing (unless under one of `created`, which the
    command makes) or is not a directory; returns the directory a new file would go in."""
    existing = _existing_ancestor(directory)
    if not os.path.isdir(existing):
        raise OutputFileError(f"{path}: cannot write: {existing} is not a directory")
    if existing != directory and not any(
        directory == c or directory.startswith(c.rstrip(os.sep) + os.sep) for c in created
    ):
        raise OutputFileError(
            f"{path}: cannot write: the directory {os.path.dirname(path)} does not exist"
        )
    return existing


def check_writable(path: str) -> None:
    """Refuses early an output `write_file` could not write: a non-file, or an unwritable directory.

    Creates (and removes) a temporary file beside it, the one test that root and
    read-only mounts answer truthfully.

    Raises:
        OutputFileError: It is not a regular file, or its directory takes no new file.
    """
    fd, temp = open_temp(output_target(path), 0o600)
    os.close(fd)
    os.unlink(temp)


@contextlib.contextmanager
def output_directory(path: str | os.PathLike) -> Iterator[None]:
    """Creates the directory `path` and its missing parents for outputs written inside it.

    If the block raises, the directories created here are removed again (those still
    empty), so that a failed write leaves nothing behind, as `write_outputs` does.

    Raises:
        OutputFileError: A directory cannot be created.
    """
    missing = []
    directory = os.path.abspath(path)
    while not os.path.lexists(directory):
        missing.append(directory)
        directory = os.path.dirname(directory)
    created = []
    try:
        for directory in reversed(missing):
            try:
                os.mkdir(directory)
            except OSError as error:
                raise OutputFileError(
                    f"{os.fspath(path)}: cannot create the directory: {error.strerror}"
                ) from error
            created.append(directory)
        yield
    except BaseException:
        for directory in reversed(created):
            with contextlib.suppress(OSError):  # not empty: something else wrote there
                os.rmdir(directory)
        raise


def open_input(path: str, opened: list[int]) -> int:
    """Opens an input read-only (it is never written) and records it for closing."""
    fd = open_regular_input(path)
    opened.append(fd)
    return fd
