"""`EMITTER_FILTER_PRUNE=1` in any Python process: the start-up hook and the lazy switch.

Before: `EMITTER_FILTER_PRUNE=1 optimum-cli export executorch ...` writes the
unpruned file, because nothing in that process imports emitter_filter.
After: `emitter_filter_startup.pth`, installed at the root of site-packages with
the package, runs at every interpreter start-up (as coverage's
`COVERAGE_PROCESS_START` hook does). With the variables unset, or set to a
value meaning off (`0`, `false`, `no`, `off`, empty), it costs two `os.environ`
look-ups and imports nothing. Otherwise it imports emitter_filter, whose import
calls `apply_environment()`, and reports a failed import as one line on stderr
instead of breaking the process (see the .pth file).

`apply_environment()` does not import ExecuTorch (seconds): it arms a finder on
`sys.meta_path` that answers for `EXPORTER_MODULE` only. When that module is
imported, the finder lets the real loader run it, then enables pruning
(`hook.enable()`) and leaves `sys.meta_path`. If the module is imported already,
pruning is enabled at once. Either way every program serialized afterwards is
pruned, and logs its INFO line, shown on stderr if the process configured no
logging, as with `emitter-filter run`. An executorch the hook does not support,
or a variable's value `env_flag` refuses, is a warning there, not a failed
import of the exporter or of emitter_filter.

In a virtual environment, CPython 3.11's `site` runs the .pth files of
site-packages twice (`site.venv()` and `site.main()` both add it): the .pth marks
`sys` on its first run and skips the second, so that a failed import (a package
removed with its .pth left behind) warns once.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping

from emitter_filter.environment import ENV_DEDUPE, ENV_KEEP, ENV_PRUNE, env_flag, env_patterns
from emitter_filter.errors import EmitterFilterError, EnvironmentVariableError

__all__ = [
    "PTH_NAME",
    "EXPORTER_MODULE",
    "prune_requested",
    "dedupe_requested",
    "apply_environment",
    "prune_from_exporter_import",
    "on_exporter_import",
    "installed_pth_files",
]

#: The start-up hook's file name; sorted after setuptools' `__editable__.*.pth`, which
#: must run first in an editable install for emitter_filter to be importable.
PTH_NAME = "emitter_filter_startup.pth"
#: The module whose import turns pruning on: the one `_upstream.program_module()` imports.
EXPORTER_MODULE = "executorch.exir.program._program"


logger = logging.getLogger(__name__)

_lock = threading.Lock()
_trigger: _ImportTrigger | None = None
# What the exporter's import turns on: (prune, dedupe); `apply_environment` sets it.
_requested: tuple[bool, ...] = (True, False)
# The patterns `EMITTER_FILTER_KEEP` gives pruning; `apply_environment` sets them.
_keep: tuple[str, ...] = ()
# The warnings the exporter's import logs: one per variable whose value was refused.
_refused: tuple[str, ...] = ()
# Each variable `apply_environment` reads, and what a refused value of it leaves off.
_VARIABLES = ((ENV_PRUNE, "pruning"), (ENV_DEDUPE, "deduplicating"))


def prune_requested(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether `EMITTER_FILTER_PRUNE` asks for pruning (see `env_flag`)."""
    return env_flag(ENV_PRUNE, environ)


def dedupe_requested(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether `EMITTER_FILTER_DEDUPE` asks for deduplication (see `env_flag`)."""
    return env_flag(ENV_DEDUPE, environ)


def apply_environment(environ: Mapping[str, str] = os.environ) -> None:
    """What `import emitter_filter` does with the variables: prune (or deduplicate) from the
    exporter's import on.

    Never raises: each variable counts on its own, and a value `env_flag` refuses
    leaves only its own mode off. The refusal is one WARNING logged when the process
    imports the exporter, where the variable concerns it; a process that never
    exports (`emitter-filter audit`, say) is not told about it (`emitter-filter env`
    explains a value).
    """
    global _requested, _refused, _keep
    requested, refused = [], []
    for name, mode in _VARIABLES:
        try:
            requested.append(env_flag(name, environ))
        except EnvironmentVariableError as error:
            requested.append(False)
            refused.append(f"{error}; not {mode}")
    if any(requested) or refused:
        _requested, _refused = tuple(requested), tuple(refused)
        _keep = env_patterns(ENV_KEEP, environ)
        prune_from_exporter_import()


def prune_from_exporter_import() -> None:
    """Enables pruning once `EXPORTER_MODULE` is imported, at once if it is; idempotent.

    Imports nothing of ExecuTorch. Thread-safe: an import racing with this call is
    caught either by the finder or by the check after it is in place.
    """
    global _trigger
    with _lock:
        if _trigger is None and EXPORTER_MODULE not in sys.modules:
            _trigger = _ImportTrigger(EXPORTER_MODULE, _enable_pruning)
            sys.meta_path.insert(0, _trigger)
        armed = _trigger
    if EXPORTER_MODULE in sys.modules:
        if armed is not None:
            armed.remove()
        _enable_pruning()


def on_exporter_import(callback: Callable[[], None]) -> Callable[[], None]:
    """Calls `callback` once `EXPORTER_MODULE` is imported (at once if it is), without
    importing anything of ExecuTorch (`emitter-filter run`: a script that never exports
    never loads torch). Returns what disarms it, a no-op once it has fired.
    """
    if EXPORTER_MODULE in sys.modules:
        callback()
        return lambda: None
    trigger = _ImportTrigger(EXPORTER_MODULE, callback)
    sys.meta_path.insert(0, trigger)
    if EXPORTER_MODULE in sys.modules and trigger in sys.meta_path:  # imported meanwhile
        trigger.fire()
    return trigger.remove


def _enable_pruning() -> None:
    from emitter_filter.inprocess import hook

    _show_prune_lines()
    for warning in _refused:
        logger.warning("emitter_filter: %s", warning)
    prune, dedupe = _requested
    if prune:
        hook.enable(_keep)
    if dedupe:
        hook.enable_dedupe()


def _show_prune_lines() -> None:
    """Lets each prune's INFO line be seen, as `emitter-filter run` does.

    The process asked for pruning through its environment, often in an exporter that
    configures no logging, where Python would drop an INFO line. So the
    `emitter_filter` logger goes to INFO, unless it was given a level, and writes to
    stderr the records no handler of the process receives; where the process
    configured logging, its own handlers get the line instead.
    """
    logger = logging.getLogger("emitter_filter")
    with _lock:
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)
        if not any(isinstance(h, _StderrUnlessHandled) for h in logger.handlers):
            logger.addHandler(_StderrUnlessHandled())


class _StderrUnlessHandled(logging.StreamHandler):
    """Writes a record to the current `sys.stderr` when no other handler would receive it."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self):
        return sys.stderr

    def emit(self, record: logging.LogRecord) -> None:
        if not _other_handlers(logging.getLogger(record.name), self):
            super().emit(record)


def _other_handlers(logger: logging.Logger | None, handler: logging.Handler) -> bool:
    """Whether a record of `logger` reaches a handler other than `handler` (`callHandlers`)."""
    while logger is not None:
        if any(h is not handler for h in logger.handlers):
            return True
        if not logger.propagate:
            return False
        logger = logger.parent
    return False


class _ImportTrigger:
    """A `sys.meta_path` finder that calls `callback` right after module `name` has run.

    It finds nothing itself: it asks the other finders for the spec and wraps the
    spec's loader. Any other name goes on to the next finder at the cost of one
    string comparison.
    """

    def __init__(self, name: str, callback: Callable[[], None]) -> None:
        self.name = name
        self._callback = callback
        self._searching = False

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name or self._searching:
            return None
        self._searching = True
        try:
            spec = next(
                filter(
                    None,
                    (
                        finder.find_spec(fullname, path, target)
                        for finder in list(sys.meta_path)
                        if finder is not self and hasattr(finder, "find_spec")
                    ),
                ),
                None,
            )
        finally:
            self._searching = False
        if spec is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _CallbackLoader(spec.loader, self)
        return spec

    def fire(self) -> None:
        """Leaves `sys.meta_path`, then calls the callback: the module has run.

        An `EmitterFilterError` (an executorch the hook does not know) is logged, not
        raised: the module has run, and failing its import now would leave the
        exporter half imported in a process that never asked emitter_filter for more.
        """
        self.remove()
        try:
            self._callback()
        except EmitterFilterError as error:
            logger.warning("emitter_filter: %s; not pruning", error)

    def remove(self) -> None:
        """Leaves `sys.meta_path` and unarms the switch; a no-op when done already."""
        global _trigger
        with _lock:
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            if _trigger is self:
                _trigger = None


class _CallbackLoader:
    """Runs the module with its own loader, then fires the trigger (not if the module raised)."""

    def __init__(self, loader, trigger: _ImportTrigger) -> None:
        self._loader = loader
        self._trigger = trigger

    def create_module(self, spec):
        # None: the import system's default module, as for a loader without the method.
        create = getattr(self._loader, "create_module", None)
        return None if create is None else create(spec)

    def exec_module(self, module) -> None:
        # The module keeps its real loader, so that inspect, linecache and reload see it.
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        self._trigger.fire()


def installed_pth_files() -> tuple[str, ...]:
    """The start-up hook files in this interpreter's site directories, where .pth files run."""
    import site

    directories = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        directories.append(site.getusersitepackages())
    paths = (os.path.join(d, PTH_NAME) for d in dict.fromkeys(directories))
    return tuple(p for p in paths if os.path.isfile(p))
