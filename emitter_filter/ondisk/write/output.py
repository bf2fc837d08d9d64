"""Write the outputs of `prune_file`: streamed from the inputs, atomically, never onto an input.

An `OutputFile` is described completely before anything is written: the bytes
made here (header and flatbuffer), then pieces of the input files, each at its
offset. `write_outputs` streams the pieces (`stream`: in the kernel with
`copy_file_range` where the filesystem allows), each output into a temporary
file in its directory that is renamed over the target only once every output
is complete; on any error nothing is left behind and old targets stay as they
were. What is not a regular file is never read nor replaced (`regular_files`);
the targets were checked before (`targets.check_outputs`).

An output may be laid out on a test not yet made (`OutputFile.confirm`: dedupe's
compare of a repeated blob): the test then runs while a second thread copies,
and if it fails nothing is written (`UnconfirmedOutput`). The `.pte` may be
copied before it is decided (`stream.EarlyCopy`): only what differs is written after.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field

from emitter_filter.errors import OutputFileError
from emitter_filter.ondisk.read.byte_source import Piece
from emitter_filter.ondisk.write.stream import (
    EarlyCopy,
    ProgressFn,
    Writer,
    open_temp,
    write_operations,
)
from emitter_filter.regular_files import output_target

# `ProgressFn` is the stream's: every writer passes it through here.
__all__ = [
    "ProgressFn",
    "OutputCheck",
    "checked_before_replace",
    "OutputFile",
    "UnconfirmedOutput",
    "write_outputs",
]

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
            fd, temp = open_temp(target, stat.S_IMODE(os.fstat(output.source_fd).st_mode))
        temps.append([fd, temp, target])
        writer = Writer(fd, written, total, progress, cancel)
        try:
            write_operations(writer, output.prefix, operations, copied)
            if copied is not None:
                os.ftruncate(fd, writer.position)  # What it copied past the output's end.
        except OSError as error:
            # A full disk, a quota: name the output that failed, not the first one.
            raise OutputFileError(
                f"{output.path}: cannot write: {error.strerror or error}"
            ) from error
        written += writer.position
    return written


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
