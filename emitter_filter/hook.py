"""The hook into `to_executorch`: prune the emitter output just before it is serialized.

`install()` wraps `serialize_for_executorch` where `ExecutorchProgramManager`
looks it up (see `_upstream`). The wrapper prunes the constants
(`emitted.prune_emitter_output`) and the delegates' named data
(`named_data.prune_named_data`), but only when asked to: by
`config.prune_constants`, by an enclosing `pruning()` block in the same thread or
context, or process-wide by `enable()` (what `EMITTER_FILTER_PRUNE=1` calls).
Otherwise it calls the original with the same arguments and changes nothing.

Installing is idempotent, thread-safe and reversible with `uninstall()`.

Observers (`add_observer`) see every program the installed hook serializes,
pruned or not, after ExecuTorch has serialized it: the pytest plugin audits them.
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
    "SerializedProgram",
    "add_observer",
    "remove_observer",
]

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_original = None
_process_wide = False
_pruning_depth: contextvars.ContextVar[int] = contextvars.ContextVar(
    "emitter_filter_pruning_depth", default=0
)


def _pruning_requested(config) -> bool:
    return bool(getattr(config, "prune_constants", False)) or is_enabled()


def _serialize_for_executorch(
    original, emitter_output, config, data_serializer, named_data_store=None
):
    prune_report = None
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
    serialize_started = time.perf_counter()
    serialized = original(emitter_output, config, data_serializer, named_data_store)
    _notify_observers(
        emitter_output, serialized, prune_report, time.perf_counter() - serialize_started
    )
    return serialized


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


@contextlib.contextmanager
def pruning() -> Iterator[None]:
    """Prunes every program serialized inside the block, in this thread or task.

    Example::

        with emitter_filter.pruning():
            manager = edge.to_executorch()   # any config, any third-party code
    """
    install()
    token = _pruning_depth.set(_pruning_depth.get() + 1)
    try:
        yield
    finally:
        _pruning_depth.reset(token)


# --- Observers: see each serialized program, change nothing. --------------------


@dataclasses.dataclass(frozen=True)
class SerializedProgram:
    """One program the hook serialized, as an observer gets it.

    Attributes:
        emitter_output: ExecuTorch's `EmitterOutput`, after pruning if it was pruned.
            Not to be modified.
        pte: The `.pte` file, as ExecuTorch's `Cord` (`bytes(pte)` copies it).
        ptd: The `.ptd` files by the name `write_tensor_data_to_file` gives them
            (without the extension), as `Cord`s.
        prune_report: What pruning dropped; None when the program was not pruned.
        serialize_seconds: Wall time of ExecuTorch's own serializer.
    """

    emitter_output: object
    pte: object
    ptd: dict
    prune_report: object
    serialize_seconds: float


_observers: tuple = ()


def add_observer(callback) -> None:
    """Calls `callback(SerializedProgram)` after each program is serialized; installs the hook.

    The callback runs in the serializing thread, before `to_executorch` returns;
    an exception it raises propagates out of `to_executorch`. Adding a callback
    twice calls it twice.
    """
    global _observers
    install()
    with _lock:
        _observers = (*_observers, callback)


def remove_observer(callback) -> None:
    """Stops calling `callback` (its last registration); the hook stays installed.

    Raises:
        ValueError: `callback` is not registered.
    """
    global _observers
    with _lock:
        if callback not in _observers:
            raise ValueError(f"{callback!r} is not an emitter_filter observer")
        index = len(_observers) - 1 - _observers[::-1].index(callback)
        _observers = _observers[:index] + _observers[index + 1 :]


def _notify_observers(emitter_output, serialized, prune_report, seconds: float) -> None:
    observers = _observers
    if not observers:
        return
    pte, ptd = serialized
    program = SerializedProgram(emitter_output, pte, ptd, prune_report, seconds)
    for callback in observers:
        callback(program)
