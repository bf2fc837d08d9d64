"""The errors emitter_filter raises; every one derives from `EmitterFilterError`.

Besides these, a public function given an argument of the wrong type or value
raises `TypeError` or `ValueError`, as its docstring says.
"""

from __future__ import annotations

__all__ = [
    "EmitterFilterError",
    "UnsupportedExecutorchError",
    "ProgramFormatError",
    "OutputFileError",
    "InvalidOutputError",
    "EnvironmentVariableError",
    "MethodSetError",
    "InvariantError",
    "PteFormatError",
    "ReportNotFoundError",
    "VerifyError",
]


class EmitterFilterError(Exception):
    """Base class of every error raised by emitter_filter."""


class UnsupportedExecutorchError(EmitterFilterError, ImportError):
    """The installed executorch is not the version whose internals the hook knows."""


class ProgramFormatError(EmitterFilterError, ValueError):
    """A program or file does not follow the ExecuTorch schema (bad index, bad header)."""


class OutputFileError(EmitterFilterError, ValueError):
    """An output cannot be written as asked: it would replace an input, or is unwritable."""


class InvalidOutputError(OutputFileError):
    """An output would be a file ExecuTorch's runtime refuses to load (`ondisk.analyse.validate`):
    nothing was written. The message names the output and the runtime's reason."""


class MethodSetError(EmitterFilterError, ValueError):
    """Programs cannot be merged or shared, or a file split, as asked: a method name two
    inputs use, a method or file that is not there, programs of different schema versions."""


class EnvironmentVariableError(EmitterFilterError, ValueError):
    """A variable of ours has a value emitter_filter does not accept (see `environment.env_flag`).

    Raised where the value decides what happens (`EMITTER_FILTER_STRICT` in a pruned
    export); a refused `EMITTER_FILTER_PRUNE` or `EMITTER_FILTER_DEDUPE` only warns.
    """


class InvariantError(EmitterFilterError):
    """emitter_filter broke one of its own invariants: a bug, please report it.

    Not an `AssertionError`, so that a caller's `except AssertionError` (a test
    helper's, say) cannot swallow a bug of ours.
    """


class PteFormatError(ProgramFormatError):
    """A `.pte` or `.ptd` file is malformed; the message names the file and the offset."""

    def __init__(self, path: str, message: str, offset: int | None = None) -> None:
        where = f"{path}: " if offset is None else f"{path}: offset {offset}: "
        super().__init__(where + message)
        self.path = path
        self.offset = offset


class ReportNotFoundError(EmitterFilterError, LookupError):
    """`report(manager)` was given a program serialized without pruning or deduplication."""


class VerifyError(EmitterFilterError, ValueError):
    """`--verify` cannot compare two programs: no runtime imports, the one that does cannot
    load what a file needs (a `.ptd`, a custom op), the old program does not run, or
    `--inputs` does not fit the methods. A difference found is no error: it is the report's."""
