"""Bytes streamed into an output file: in the kernel where it can, and begun early.

`Writer` writes at explicit offsets, copying input ranges with `copy_file_range` where
the filesystem allows (read and write otherwise, as cp does), a chunk at a time so that
progress is reported and a cancel is seen between two copies. `EarlyCopy` has a thread
copy the input `.pte` into its output's temporary file while the output is still being
decided; `write_operations` then writes only what that copy does not hold already.
`output.write_outputs` is what a command calls.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from emitter_filter.errors import OutputFileError, PteFormatError
from emitter_filter.ondisk.read.byte_source import Piece
from emitter_filter.regular_files import open_regular_input, output_target

__all__ = ["ProgressFn", "Writer", "write_operations", "EarlyCopy", "open_temp"]

#: Called with (bytes written, bytes to write) as data is copied.
ProgressFn = Callable[[int, int], None]

# Bytes per copy call: bounds memory on the fallback path and paces progress reports.
# Copies end on multiples of it in the output: a call that starts off a 64 KiB
# boundary of the output ran at 2.2 GB/s instead of 3.1 (Linux 6.18, ext4: a
# 538 MB copy after a 381,056-byte header took 0.24 s, split there 0.17 s).
_COPY_CHUNK = 64 << 20


class Writer:
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


class _Cancelled(Exception):
    """The write stopped between two copies: a test of `OutputFile.confirm` failed."""


def _fd_name(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return f"fd {fd}"


def write_operations(
    writer: Writer, prefix: bytes, operations: list, early: _Copied | None
) -> None:
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
            fd, self._temp = open_temp(self.target, stat.S_IMODE(info.st_mode))
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
        writer = Writer(fd, 0, 1, None, self._stop)
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


def open_temp(dst: str, mode: int) -> tuple[int, str]:
    directory = os.path.dirname(os.path.abspath(dst))
    try:
        fd, temp = tempfile.mkstemp(
            dir=directory, prefix=f".{os.path.basename(dst)}.", suffix=".tmp"
        )
        os.fchmod(fd, mode)
    except OSError as error:
        raise OutputFileError(f"{dst}: cannot write: {error.strerror}") from error
    return fd, temp
