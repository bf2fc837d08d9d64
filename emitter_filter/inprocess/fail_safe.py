"""The hook's one fail-safe, the same for every mode (see `hook`'s docstring).

A transform that cannot be proven safe (`ProgramFormatError`: the emitted program is
inconsistent; `InvalidOutputError`: the structural proof refuses what it made) leaves the
program as it was before that transform: strict mode (`prune_strict=True` or
`EMITTER_FILTER_STRICT=1`) raises instead, otherwise one WARNING names the modes skipped.
"""

from __future__ import annotations

import logging
import time

from emitter_filter.environment import ENV_STRICT, env_flag

__all__ = ["strict", "fail_safe", "skipped_report"]

# The hook's logger: the warning reads as the hook's, as it did before this module.
logger = logging.getLogger("emitter_filter.inprocess.hook")


def strict(config) -> bool:
    """Whether a transform that cannot be proven raises instead of being skipped."""
    return bool(getattr(config, "prune_strict", False)) or env_flag(ENV_STRICT)


def fail_safe(config, error, modes: str, written: str) -> None:
    """Strict mode raises `error`, otherwise one WARNING.

    Called where a transform was stopped before it changed anything, or undone, so that
    the program can be written as `written` says.
    """
    if strict(config):
        raise error
    logger.warning(
        "emitter_filter: not %s this program, written %s: %s (the filter cannot prove "
        "the program safe to transform; set %s=1 or prune_strict=True to raise instead)",
        modes,
        written,
        error,
        ENV_STRICT,
    )


def skipped_report(emitter_output, reason: str, started: float, dedupe: bool):
    """The `PruneReport` of a program written unpruned, for `reason`."""
    from emitter_filter.inprocess.prune_emitted import space_nbytes
    from emitter_filter.inprocess.reports import PruneReport

    nbytes = space_nbytes(emitter_output)
    return PruneReport(
        bytes_before=nbytes,
        bytes_after=nbytes,
        found=(),
        dropped_values=0,
        seconds=time.perf_counter() - started,
        skipped=reason,
        dedupe_skipped=reason if dedupe else None,
    )
