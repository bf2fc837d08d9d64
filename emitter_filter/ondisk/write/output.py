"""Write the outputs of `prune_file`: streamed from the inputs, atomically, never onto an input.

An `OutputFile` is described completely before anything is written: the bytes
made here (header and flatbuffer), then pieces of the input files, each at its
offset. `write_outputs` streams the pieces (in the kernel with
`copy_file_range` where the filesystem allows), each output into a temporary
file in its directory that is renamed over the target only once every output
is complete; on any error nothing is left behind and old targets stay as they
were. What is not a regular file is never read nor replaced (`regular_files`).

An output may be laid out on a test not yet made (`OutputFile.confirm`: dedupe's
compare of a repeated blob): the test then runs while a second thread copies,
and if it fails nothing is written (`UnconfirmedOutput`). The `.pte` may be
copied before it is decided (`EarlyCopy`): only what differs is written after.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field

from emitter_filter.errors import OutputFileError, PteFormatError
from emitter_filter.ondisk.read.byte_source import Piece
from emitter_filter.regular_files import open_regular_input, output_target

__all__ = [
    "ProgressFn",
    "OutputCheck",
    "checked_before_replace",
    "OutputFile",
    "UnconfirmedOutput",
    "EarlyCopy",
    "check_outputs",
    "check_writable",
    "open_input",
    "output_directory",
    "write_file",
    "write_files",
    "write_outputs",
    "write_text",
]

# Bytes per copy call: bounds memory on the fallback path and paces progress reports.
# Copies end on multiples of it in the output: a call that starts off a 64 KiB
# boundary of the output ran at 2.2 GB/s instead of 3.1 (Linux 6.18, ext4: a
# 538 MB copy after a 381,056-byte header took 0.24 s, split there 0.17 s).
_COPY_CHUNK = 64 << 20

ProgressFn = Callable[[int, int], None]
#: Called with (file as written, target) of every output once all are written, before
#: any replaces anything; raises to refuse them (`validate.validate_outputs`).
OutputCheck = Callable[[Sequence[tuple[str, str]]], None]

# The check `checked_before_replace` sets: made by every write after `validate`.
_BEFORE_REPLACE: ContextVar[OutputCheck | None] = ContextVar("before_replace", default=None)


@contextlib.contextmanager
def checked_before_replace(check: OutputCheck) -> Iterator[None]:
    """While in it, every `write_outputs` calls `check` with its outputs, written, before
    anything replaces anything (`--verify`: the outputs run in a runtime before they are
    renamed into place; a refusal leaves nothing). The writers need not know of it."""
    token = _BEFORE_REPLACE.set(check)
    try:
        yield
    finally:
        _BEFORE_REPLACE.reset(token)


@dataclass
class OutputFile:
    """One output: `prefix`, then each piece list at its absolute offset, zeros between.

    Attributes:
        path: The target.
        source_fd: The input it replaces, whose permissions it takes.
        prefix: The bytes made for it (header and flatbuffer, padding included).
        runs: (absolute offset, pieces), in increasing offset order; a piece is
            a range of an input or, where a rewrite made them, bytes.
        confirm: Tests its layout takes as true, made while it is written.
    """

    path: str
    source_fd: int
    prefix: bytes
    runs: list[tuple[int, Sequence[Piece | bytes]]] = field(default_factory=list)
    confirm: tuple[Callable[[], bool], ...] = ()

    @property
    def size(self) -> int:
        end = len(self.prefix)
        for offset, pieces in self.runs:
            end = offset + sum(len(p) for p in pieces)
        return end

    def parts(self) -> list[bytes | Piece]:
        """Its bytes in order as a `ByteSource` reads them: the prefix, zeros where runs
        leave a gap, each piece (a `Piece`'s pad as zeros); nothing is read."""
        parts: list[bytes | Piece] = [self.prefix]
        at = len(self.prefix)
        for offset, pieces in self.runs:
            if offset > at:
                parts.append(bytes(offset - at))
            for piece in pieces:
                if isinstance(piece, Piece) and piece.pad:
                    parts += [Piece(piece.fd, piece.offset, piece.nbytes), bytes(piece.pad)]
                else:
                    parts.append(piece)
            at = offset + sum(len(p) for p in pieces)
        return parts


class UnconfirmedOutput(Exception):
    """A test of `OutputFile.confirm` failed: nothing was written."""


class _Writer:
    """Writes an output file descriptor from `position` on, at explicit offsets, copying input
    ranges in the kernel where it can."""

    def __init__(
        self,
        fd: int,
        done: int,
        total: int,
        progress: ProgressFn | None,
        cancel: threading.Event | None = None,
    ) -> None:
        self.fd = fd
        self.position = 0
        self.done = done
        self.total = total
        self.progress = progress
        self.cancel = cancel
        self._kernel_copy = hasattr(os, "copy_file_range")

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.pwrite(self.fd, view, self.position)
            view = view[written:]
            self.position += written

    def zeros(self, count: int) -> None:
        if count:
            self.write(bytes(count))

    def copy(self, src: int, offset: int, count: int) -> None:
        end = offset + count
        while offset < end:
            if self.cancel is not None and self.cancel.is_set():
                raise _Cancelled
            chunk = min(_COPY_CHUNK - self.position % _COPY_CHUNK, end - offset)
            copied = self._copy_chunk(src, offset, chunk)
            if copied == 0:
                raise PteFormatError(
                    _fd_name(src), f"input ended while copying {count} bytes", offset
                )
            offset += copied
            self.position += copied
            self._report()

    def skip(self, count: int) -> None:
        """Moves on over `count` bytes the output holds already (an `EarlyCopy`'s)."""
        self.position += count
        self._report()

    def _report(self) -> None:
        if self.progress is not None:
            self.progress(self.done + self.position, self.total)

    def _copy_chunk(self, src: int, offset: int, count: int) -> int:
        if self._kernel_copy:
            try:
                return os.copy_file_range(src, self.fd, count, offset, self.position)
            except OSError as error:
                # Filesystems without in-kernel copy: fall back to read and write, as cp does.
                if error.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                    raise
                self._kernel_copy = False
        data = os.pread(src, min(count, 1 << 20), offset)
        self.write(data)
        self.position -= len(data)
        return len(data)


def _fd_name(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return f"fd {fd}"


def _write(writer: _Writer, prefix: bytes, operations: list, early: _Copied | None) -> None:
    """Writes `prefix`, then `operations` in order; a range of the `early` copy's input at
    its own offset is not copied again as far as that copy went."""
    writer.write(prefix)
    for operation in operations:
        if isinstance(operation, Piece):
            done = early.holds(operation, writer.position) if early is not None else 0
            if done:
                writer.skip(done)
            if operation.nbytes > done:
                writer.copy(operation.fd, operation.offset + done, operation.nbytes - done)
        elif isinstance(operation, int):
            writer.zeros(operation)
        else:
            writer.write(operation)


@dataclass
class _Copied:
    """How far an `EarlyCopy` went: its input's first `nbytes` bytes are in the output."""

    file: tuple[int, int]
    nbytes: int
    _same_file: dict[int, bool] = field(default_factory=dict)

    def holds(self, piece: Piece, position: int) -> int:
        """How many of `piece`'s first bytes, written at `position`, are there already."""
        if piece.offset != position or position >= self.nbytes:
            return 0
        if piece.fd not in self._same_file:
            stat_ = os.fstat(piece.fd)
            self._same_file[piece.fd] = (stat_.st_dev, stat_.st_ino) == self.file
        return min(piece.nbytes, self.nbytes - position) if self._same_file[piece.fd] else 0


class EarlyCopy:
    """The input `.pte` copied into its output's temporary file, at the same offsets, while
    the output is still being decided.

    A pruned or deduplicated file is mostly its input at the same offsets (the
    program is patched in place, dropped bytes come after the kept ones): a
    thread has the kernel copy the input from its start while this one reads and
    decides. `write_outputs(..., early=)` then stops it where the decided output
    stops reading the input in place (`take`) and writes only the rest; what it
    copied that the output does not keep is written over or cut off. Importing,
    reading and deciding a 652 MB file came before its copy began: `prune` took
    1.47–1.53x `cp`, with the copy begun first 1.22–1.36x.

    A context manager: a copy `write_outputs` did not take is stopped and its
    temporary file removed on exit.
    """

    def __init__(self, src: str, dst: str) -> None:
        self._src = open_regular_input(src)
        try:
            info = os.fstat(self._src)
            self._file = (info.st_dev, info.st_ino)
            self._end = info.st_size
            self.target = output_target(dst)
            fd, self._temp = _open_temp(self.target, stat.S_IMODE(info.st_mode))
            self._fd: int | None = fd  # None once taken or closed
        except BaseException:
            os.close(self._src)
            raise
        self._stop = threading.Event()
        self._copied = 0
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(fd,), name="emitter_filter early copy"
        )
        self._thread.start()

    def _run(self, fd: int) -> None:
        writer = _Writer(fd, 0, 1, None, self._stop)
        try:
            while writer.position < self._end and not self._stop.is_set():
                # One chunk at a time: `take` may move the end meanwhile.
                count = min(_COPY_CHUNK, self._end - writer.position)
                writer.copy(self._src, writer.position, count)
                self._copied = writer.position
        except _Cancelled:
            pass
        except BaseException as error:  # Raised again by `take`.
            self._error = error

    def copies(self, src: str, dst: str) -> bool:
        """Whether this is a copy of `src` for the output `dst`."""
        info = os.stat(src)
        return (info.st_dev, info.st_ino) == self._file and output_target(dst) == self.target

    def stop(self) -> None:
        """Stops after the copy call under way."""
        self._stop.set()

    def take(self, end: int) -> tuple[int, str, _Copied]:
        """Stops the copy at `end` (or where it is, if past it), waits for it, and hands over
        its temporary file: (descriptor, path, how far it went). The caller closes and
        renames or removes the file from then on."""
        self._end = min(self._end, end)
        self._thread.join()
        fd, temp, self._fd = self._fd, self._temp, None
        assert fd is not None, "a copy is taken once"
        os.close(self._src)
        if self._error is not None:
            os.close(fd)
            os.unlink(temp)
            raise self._error
        return fd, temp, _Copied(self._file, self._copied)

    def __enter__(self) -> EarlyCopy:
        return self

    def __exit__(self, *exc_info) -> None:
        if self._fd is None:
            return
        self.stop()
        self._thread.join()
        os.close(self._src)
        os.close(self._fd)
        self._fd = None
        os.unlink(self._temp)

    def input_end(self, prefix: bytes, operations: list) -> int:
        """Where an output (`prefix`, then `operations`) stops reading this copy's input at
        the same offsets: the end of its last such range (0 if none)."""
        end, position = 0, len(prefix)
        copied = _Copied(self._file, self._end)
        for operation in operations:
            size = operation if isinstance(operation, int) else len(operation)
            if isinstance(operation, Piece) and copied.holds(operation, position):
                end = position + operation.nbytes
            position += size
        return end


def _operations(output: OutputFile):
    """After the prefix, the output as writes: a `Piece` (no pad) to copy, an int of zeros
    (bytes that are all zeros too: a dedupe's padding), or bytes."""
    at = len(output.prefix)
    for offset, pieces in output.runs:
        yield offset - at
        for piece in pieces:
            if isinstance(piece, Piece):
                yield Piece(piece.fd, piece.offset, piece.nbytes)
                yield piece.pad
            else:
                yield piece if piece.strip(b"\0") else len(piece)
        at = offset + sum(len(p) for p in pieces)


# The longest run of zeros between two copies that is read from the input to see
# whether the two can be one copy.
_GAP_READ = 1 << 16


def _coalesced(operations):
    """`operations` with each copy, zeros, copy of one input's consecutive ranges made one
    copy where the input holds zeros between them too: a kernel copy call costs ~40 us,
    and a file of 500 segments was written in 500 calls (10% slower than one)."""
    pending: Piece | None = None
    zeros = 0
    for operation in operations:
        if isinstance(operation, int):
            if pending is None:
                if operation:
                    yield operation
            else:
                zeros += operation
            continue
        if (
            isinstance(operation, Piece)
            and pending is not None
            and operation.fd == pending.fd
            and operation.offset == pending.offset + pending.nbytes + zeros
            and _zeros_between(pending, zeros)
        ):
            pending = Piece(pending.fd, pending.offset, pending.nbytes + zeros + operation.nbytes)
            zeros = 0
            continue
        if pending is not None:
            yield pending
            if zeros:
                yield zeros
        pending, zeros = (operation, 0) if isinstance(operation, Piece) else (None, 0)
        if pending is None:
            yield operation
    if pending is not None:
        yield pending
        if zeros:
            yield zeros


def _zeros_between(piece: Piece, count: int) -> bool:
    """Whether the `count` input bytes after `piece` are zeros (what the output has there)."""
    if not count:
        return True
    if count > _GAP_READ:
        return False
    return os.pread(piece.fd, count, piece.offset + piece.nbytes) == bytes(count)


def _open_temp(dst: str, mode: int) -> tuple[int, str]:
    directory = os.path.dirname(os.path.abspath(dst))
    try:
        fd, temp = tempfile.mkstemp(
            dir=directory, prefix=f".{os.path.basename(dst)}.", suffix=".tmp"
        )
        os.fchmod(fd, mode)
    except OSError as error:
        raise OutputFileError(f"{dst}: cannot write: {error.strerror}") from error
    return fd, temp


def check_writable(path: str) -> None:
    """Refuses early an output `write_file` could not write: a non-file, or an unwritable directory.

    Creates (and removes) a temporary file beside it, the one test that root and
    read-only mounts answer truthfully.

    Raises:
        OutputFileError: It is not a regular file, or its directory takes no new file.
    """
    fd, temp = _open_temp(output_target(path), 0o600)
    os.close(fd)
    os.unlink(temp)


def write_file(path: str, data: bytes) -> None:
    """Writes one small output (a report) atomically, as `write_outputs` writes the large ones.

    A new file gets the permissions `open` would give it; a replaced one keeps its own.

    Raises:
        OutputFileError: It is not a regular file, or cannot be written; nothing is left behind.
    """
    target = output_target(path)
    fd, temp = _open_temp(target, _new_file_mode(target))
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.replace(temp, target)
    except BaseException as error:
        os.unlink(temp)
        if isinstance(error, OSError):
            raise OutputFileError(f"{path}: cannot write: {error.strerror}") from error
        raise


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


def write_outputs(
    outputs: Sequence[OutputFile],
    progress: ProgressFn | None = None,
    early: EarlyCopy | None = None,
    *,
    validate: OutputCheck | None = None,
) -> int:
    """Writes every output, then renames them into place, the first one last.

    The first output is the `.pte`: a new `.pte` must never sit beside stale
    `.ptd` files; `early` is a copy of its input begun already, which it takes.
    Returns the bytes written.

    Every writer passes `validate` (`validate.validate_outputs`, which sits above this
    module in the import graph): the outputs, all written, are checked before anything
    replaces anything, so nothing ExecuTorch's runtime would refuse is left behind.

    Raises:
        OutputFileError: An output cannot be written; none is left behind.
        InvalidOutputError: `validate` refused them (a program ExecuTorch's runtime
            would not load); none is left behind.
        UnconfirmedOutput: A test of an output's `confirm` failed; none is left behind.
    """
    total = max(sum(o.size for o in outputs), 1)
    # [fd or None once closed, temporary path, final path], one per output.
    temps: list[list] = []
    try:
        tests = [test for output in outputs for test in output.confirm]
        if tests:
            written = _write_confirmed(outputs, temps, total, progress, tests, early)
        else:
            written = _write_temps(outputs, temps, total, progress, early)
        for entry in temps:
            os.close(entry[0])
            entry[0] = None
        if validate is not None:
            validate([(temp, final) for _, temp, final in temps])
        before_replace = _BEFORE_REPLACE.get()
        if before_replace is not None:
            before_replace([(temp, final) for _, temp, final in temps])
        for index in [*range(1, len(temps)), 0]:
            _, temp, final = temps[index]
            try:
                os.replace(temp, final)
            except OSError as error:
                raise OutputFileError(f"{final}: cannot write: {error.strerror}") from error
        temps.clear()
    except OSError as error:
        target = outputs[0].path if outputs else "?"
        raise OutputFileError(f"{target}: {error.strerror or error}") from error
    finally:
        for fd, temp, _ in temps:
            if fd is not None:
                os.close(fd)
            try:
                os.unlink(temp)
            except FileNotFoundError:
                pass  # Renamed into place before a later output failed.
    return written


def _write_temps(
    outputs: Sequence[OutputFile],
    temps: list[list],
    total: int,
    progress: ProgressFn | None,
    early: EarlyCopy | None = None,
    cancel: threading.Event | None = None,
) -> int:
    """Writes each output into a new temporary file beside its target, listed in `temps`
    (the first into `early`'s, where given)."""
    written = 0
    for number, output in enumerate(outputs):
        target = output_target(output.path)
        operations = list(_coalesced(_operations(output)))
        copied = None
        if number == 0 and early is not None:
            if early.target != target:
                raise ValueError(f"the early copy given is one for {early.target}, not {target}")
            fd, temp, copied = early.take(early.input_end(output.prefix, operations))
        else:
            fd, temp = _open_temp(target, stat.S_IMODE(os.fstat(output.source_fd).st_mode))
        temps.append([fd, temp, target])
        writer = _Writer(fd, written, total, progress, cancel)
        try:
            _write(writer, output.prefix, operations, copied)
            if copied is not None:
                os.ftruncate(fd, writer.position)  # What it copied past the output's end.
        except OSError as error:
            # A full disk, a quota: name the output that failed, not the first one.
            raise OutputFileError(
                f"{output.path}: cannot write: {error.strerror or error}"
            ) from error
        written += writer.position
    return written


class _Cancelled(Exception):
    """The write stopped between two copies: a test of `OutputFile.confirm` failed."""


def _write_confirmed(
    outputs: Sequence[OutputFile],
    temps: list[list],
    total: int,
    progress: ProgressFn | None,
    tests: Sequence[Callable[[], bool]],
    early: EarlyCopy | None,
) -> int:
    """`_write_temps` in a second thread while `tests` run in this one.

    The kernel copies while the tests read (a compare of two 113 MB copies took
    0.03 s of a 0.35 s `prune --dedupe` before the copy began). A failed test
    stops the copy at its next chunk.
    """
    cancel = threading.Event()
    result: list = []

    def write() -> None:
        try:
            result.append(_write_temps(outputs, temps, total, progress, early, cancel))
        except BaseException as error:  # Raised again in the calling thread.
            result.append(error)

    writer = threading.Thread(target=write, name="emitter_filter output")
    writer.start()

    def stop() -> None:
        cancel.set()
        if early is not None:
            early.stop()

    try:
        confirmed = all(test() for test in tests)
        if not confirmed:
            stop()
        writer.join()
    except BaseException:  # Ctrl-C, or SIGTERM (`cli`), in a test or while waiting.
        stop()
        writer.join()  # Its descriptors are closed only once it has stopped.
        raise
    if not confirmed:
        raise UnconfirmedOutput(outputs[0].path)
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0]


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
            fd, temp = _open_temp(target, _new_file_mode(target))
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


def _new_file_mode(target: str) -> int:
    """The permissions a replaced file keeps, or those `open` would give a new one."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
