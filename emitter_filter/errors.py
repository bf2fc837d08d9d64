"""The errors emitter_filter raises; every one derives from `EmitterFilterError`."""

from __future__ import annotations

__all__ = [
    "EmitterFilterError",
    "UnsupportedExecutorchError",
    "ProgramFormatError",
    "OutputFileError",
    "EnvironmentVariableError",
    "InvariantError",
]


class EmitterFilterError(Exception):
    """Base class of every error raised by emitter_filter."""


class UnsupportedExecutorchError(EmitterFilterError, ImportError):
    """The installed executorch is not the version whose internals the hook knows."""


class ProgramFormatError(EmitterFilterError, ValueError):
    """A program or file does not follow the ExecuTorch schema (bad index, bad header)."""


class OutputFileError(EmitterFilterError, ValueError):
    """An output cannot be written as asked: it would replace an input, or is unwritable."""


class EnvironmentVariableError(EmitterFilterError, ValueError):
    """`EMITTER_FILTER_PRUNE` has a value emitter_filter does not accept."""


class InvariantError(EmitterFilterError, AssertionError):
    """emitter_filter broke one of its own invariants: a bug, please report it."""
