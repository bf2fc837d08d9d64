"""The hook into `to_executorch`: prune the emitter output just before it is serialized.

`install()` wraps `serialize_for_executorch` where `ExecutorchProgramManager`
looks it up (see `_upstream`). The wrapper prunes the constants
(`emitted.prune_emitter_output`) and the delegates' named data
(`named_data.prune_named_data`), but only when asked to: by
`config.prune_constants`, by an enclosing `pruning()` block in the same thread or
context, or process-wide by `enable()` (what `EMITTER_FILTER_PRUNE=1` calls).
Otherwise it calls the original with the same arguments and changes nothing.
Independently, `config.dedupe_constants`, `pruning(dedupe_constants=True)` or
`enable_dedupe()` (what `EMITTER_FILTER_DEDUPE=1` calls) pass the `.pte` bytes the
original returns through `dedupe.dedupe_pte`, after pruning when both are on.

Installing is idempotent, thread-safe and reversible with `uninstall()`.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Iterator

from emitter_filter import _upstream

__all__ = [
    "install",
    "uninstall",
    "installed",
    "pruning",
    "enable",
    "disable",
    "is_enabled",
    "enable_dedupe",
    "disable_dedupe",
]

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_original = None
_process_wide = False
_pruning_depth: contextvars.ContextVar[int] = contextvars.ContextVar(
    "emitter_filter_pruning_depth", default=0
)
_dedupe_process_wide = False
_dedupe_depth: contextvars.ContextVar[int] = contextvars.ContextVar(
    "emitter_filter_dedupe_depth", default=0
)


def _pruning_requested(config) -> bool:
    return bool(getattr(config, "prune_constants", False)) or is_enabled()


def _dedupe_requested(config) -> bool:
    return (
        bool(getattr(config, "dedupe_constants", False))
        or _dedupe_process_wide
        or _dedupe_depth.get() > 0
    )


def _serialize_for_executorch(
    original, emitter_output, config, data_serializer, named_data_store=None
):
    if _pruning_requested(config):
        from emitter_filter.emitted import prune_emitter_output
        from emitter_filter.named_data import prune_named_data
        from emitter_filter.reports import record_report

        started = time.perf_counter()
        prune_report = prune_emitter_output(emitter_output)
        # After the constants, so that the duplicates reported are the bytes written.
        named_data_store, named_data_report = prune_named_data(emitter_output, named_data_store)
        prune_report = dataclasses.replace(
            prune_report,
            named_data=named_data_report,
            seconds=time.perf_counter() - started,
        )
        record_report(emitter_output, prune_report)
        # Passed as an object: the summary (and its duplicate search) is only built if logged.
        logger.info("emitter_filter: %s", prune_report)
    serialized = original(emitter_output, config, data_serializer, named_data_store)
    if _dedupe_requested(config):
        serialized = _dedupe_serialized(emitter_output, serialized)
    return serialized


def _dedupe_serialized(emitter_output, serialized):
    """Deduplicates the serialized `.pte` (`.ptd` files are left alone) and records the report."""
    from executorch.exir._serialize._cord import Cord

    from emitter_filter.dedupe import dedupe_pte
    from emitter_filter.reports import record_dedupe_report

    started = time.perf_counter()
    pte, ptd_files = serialized
    data = bytes(pte)
    deduplicated, dedupe_report = dedupe_pte(data)
    # The join into one bytes object is part of the cost of deduplicating.
    dedupe_report = dataclasses.replace(dedupe_report, seconds=time.perf_counter() - started)
    record_dedupe_report(emitter_output, dedupe_report)
    logger.info("emitter_filter: %s", dedupe_report)
    return (pte if deduplicated is data else Cord(deduplicated)), ptd_files


def install() -> None:
    """Wraps ExecuTorch's `serialize_for_executorch`; a no-op when already installed.

    Raises:
        UnsupportedExecutorchError: executorch is not the supported version.
    """
    global _original
    module = _upstream.program_module()
    with _lock:
        if _original is not None:
            return
        original = module.serialize_for_executorch
        wrapper = functools.wraps(original)(
            functools.partial(_serialize_for_executorch, original)
        )
        wrapper.__emitter_filter_original__ = original
        module.serialize_for_executorch = wrapper
        _original = original
    logger.debug("installed the emitter_filter hook")


def uninstall() -> None:
    """Restores ExecuTorch's own `serialize_for_executorch`; a no-op when not installed."""
    global _original
    with _lock:
        if _original is None:
            return
        _upstream.program_module().serialize_for_executorch = _original
        _original = None
    logger.debug("uninstalled the emitter_filter hook")


def installed() -> bool:
    """Whether the hook is in place."""
    return _original is not None


def enable() -> None:
    """Prunes every program serialized from now on, in every thread."""
    global _process_wide
    install()
    _process_wide = True


def disable() -> None:
    """Stops what `enable()` started; `pruning()` blocks and configs still prune."""
    global _process_wide
    _process_wide = False


def is_enabled() -> bool:
    """Whether programs serialized now, in this context, are pruned regardless of config."""
    return _process_wide or _pruning_depth.get() > 0


def enable_dedupe() -> None:
    """Deduplicates every program serialized from now on, in every thread (pruned or not)."""
    global _dedupe_process_wide
    install()
    _dedupe_process_wide = True


def disable_dedupe() -> None:
    """Stops what `enable_dedupe()` started."""
    global _dedupe_process_wide
    _dedupe_process_wide = False


@contextlib.contextmanager
def pruning(*, dedupe_constants: bool = False) -> Iterator[None]:
    """Prunes every program serialized inside the block, in this thread or task.

    Args:
        dedupe_constants: Also store named data that repeats a constant once
            (`ExecutorchBackendConfig.dedupe_constants`).

    Example::

        with emitter_filter.pruning():
            manager = edge.to_executorch()   # any config, any third-party code
    """
    install()
    token = _pruning_depth.set(_pruning_depth.get() + 1)
    dedupe_token = _dedupe_depth.set(_dedupe_depth.get() + 1) if dedupe_constants else None
    try:
        yield
    finally:
        if dedupe_token is not None:
            _dedupe_depth.reset(dedupe_token)
        _pruning_depth.reset(token)
