"""`ExecutorchBackendConfig` with the filter's fields: `prune_constants`, its options, `dedupe_constants`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from emitter_filter import _upstream

# Before ExecuTorch is imported: a missing or unsupported executorch gets our one-line error.
_upstream.check_executorch_version()

from executorch.exir import (  # noqa: E402
    ExecutorchBackendConfig as _UpstreamExecutorchBackendConfig,
)

from emitter_filter.inprocess import hook  # noqa: E402
from emitter_filter.program.reachability import keep_patterns  # noqa: E402

__all__ = ["ExecutorchBackendConfig"]


@dataclass
class ExecutorchBackendConfig(_UpstreamExecutorchBackendConfig):
    """ExecuTorch's `ExecutorchBackendConfig`, plus `prune_constants`, its options and `dedupe_constants`.

    A drop-in replacement: every upstream field works as before, and
    `to_executorch` returns an ordinary `ExecutorchProgramManager`.

    Attributes:
        prune_constants: Write only the constants that the emitted program can
            reach: dead weights, buffers, mutable initial data and external
            (`.ptd`) constants are dropped from every output. Setting it installs
            the hook into `to_executorch` (see `emitter_filter.inprocess.hook`).
        keep_constants: `fnmatch` patterns of fully qualified names (`"unused"`,
            `"metadata.*"`): a constant whose parameter, buffer or lifted-constant
            name matches one is kept although no instruction reads it, for a
            runtime that reads it by name (`Method.get_attribute`). Anything but
            a sequence of str raises `TypeError` at once.
        prune_strict: Raise `ProgramFormatError` where the filter cannot prove a
            program safe to prune, instead of writing it unpruned with a warning
            (also `EMITTER_FILTER_STRICT=1`).
        dedupe_constants: Store once the named data that repeats a constant (a
            tied embedding lowered to XNNPACK): its segment points into the
            constant segment (`emitter_filter.ondisk.dedupe`). Applied to the `.pte`
            bytes, after pruning when both are on; `.ptd` files are left alone.
    """

    prune_constants: bool = False
    keep_constants: Sequence[str] = ()
    prune_strict: bool = False
    dedupe_constants: bool = False

    def __setattr__(self, name: str, value) -> None:
        # Covers both the constructor and a later `config.prune_constants = True`.
        if name in ("prune_constants", "dedupe_constants") and value:
            hook.install()
        if name == "keep_constants":
            keep_patterns(value)  # raises TypeError naming the argument
        super().__setattr__(name, value)
