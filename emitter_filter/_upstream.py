"""The one module that touches ExecuTorch's private internals.

The hook wraps `executorch.exir.program._program.serialize_for_executorch`, which
`ExecutorchProgramManager.__init__` calls eagerly with the emitter output, the
config and the delegates' named data, and `emit_program`, called just before it,
to see the `ExportedProgram`s that name the constants. The names are bound into
`_program` by `from ... import`, so patching `exir._serialize._serialize` would
do nothing.

These internals move between releases, so the supported range is pinned and
checked where they are first used (installing the hook, importing
`emitter_filter.inprocess.config`), not at package import: `audit` and `prune` need no
ExecuTorch at all. An executorch outside the range is an error, never a silent
no-op; `EMITTER_FILTER_ALLOW_UNTESTED_EXECUTORCH=1` turns it into a warning for
releases nobody has tested yet (a nightly, the next minor), while the checks
below that the wrapped function still has the shape we call it with, and the
filter's own invariant checks, still raise before anything is changed.
"""

from __future__ import annotations

import functools
import logging
import os
import re

from emitter_filter.errors import UnsupportedExecutorchError

__all__ = [
    "SUPPORTED_EXECUTORCH",
    "TESTED_EXECUTORCH",
    "ENV_ALLOW_UNTESTED",
    "install_hint",
    "check_executorch_version",
    "installed_executorch_version",
    "program_module",
    "cord",
    "cord_pieces",
    "file_backed_path",
    "cord_of",
    "emitter_output_of",
]

logger = logging.getLogger(__name__)

#: The executorch releases whose internals the hook knows, as a pip requirement range.
SUPPORTED_EXECUTORCH = ">=1.4.0,<1.6"
# The same range as release tuples: lowest supported, first unsupported.
_LOWEST, _BEYOND = (1, 4, 0), (1, 6, 0)
#: The releases this project's CI runs its whole suite on.
TESTED_EXECUTORCH = ("1.4.1", "1.5.1")
#: Set to 1 to use an executorch outside `SUPPORTED_EXECUTORCH` with a warning.
ENV_ALLOW_UNTESTED = "EMITTER_FILTER_ALLOW_UNTESTED_EXECUTORCH"
# torch from PyPI is the CUDA build on Linux (about 20 packages); the CPU build's index.
_CPU_TORCH = "--extra-index-url https://download.pytorch.org/whl/cpu"
# serialize_for_executorch's parameters, in the order the hook passes them on.
_SERIALIZE_PARAMETERS = ("emitter_output", "config", "data_serializer", "named_data_store")

_warned: set[str] = set()


@functools.lru_cache(maxsize=1)
def installed_executorch_version() -> str | None:
    """The installed executorch distribution's version, without a local tag like `+cpu`.

    Looked up once per process: `install()` checks it on every `pruning()` block.
    `importlib.metadata` is imported here, not at the top: it costs tens of
    milliseconds, and `import emitter_filter` (which the start-up hook does with
    `EMITTER_FILTER_PRUNE=1` in every process) should not pay them.
    """
    import importlib.metadata

    try:
        return importlib.metadata.version("executorch").split("+", 1)[0]
    except importlib.metadata.PackageNotFoundError:
        return None


def install_hint() -> str:
    """What to run when executorch is missing, from where emitter_filter is installed.

    emitter_filter is on no package index, so `pip install 'emitter_filter[executorch]'`
    finds nothing. From a checkout (an editable install): the README's command, with
    the constraints file of the newest tested release, as absolute paths. Elsewhere:
    executorch itself, in the supported range. Both say how to get the CPU build of
    torch, since an unconstrained torch is the CUDA one.
    """
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    constraints = os.path.join(checkout, "constraints", f"executorch-{TESTED_EXECUTORCH[-1]}.txt")
    cpu = f"for the CPU build of torch add {_CPU_TORCH}"
    if os.path.isfile(constraints) and os.path.isfile(os.path.join(checkout, "pyproject.toml")):
        return f"pip install -e '{checkout}[executorch]' -c {constraints} ({cpu})"
    return f"pip install 'executorch{SUPPORTED_EXECUTORCH}' torch ({cpu})"


def _release(version: str) -> tuple[int, int, int] | None:
    """(major, minor, micro) of a version string; a pre-release counts as its release."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    if match is None:
        return None
    major, minor, micro = match.groups()
    return int(major), int(minor), int(micro or 0)


def _untested_allowed() -> bool:
    return os.environ.get(ENV_ALLOW_UNTESTED, "").strip().lower() in ("1", "true", "yes", "on")


def check_executorch_version(version: str | None = None) -> None:
    """Raises `UnsupportedExecutorchError` unless executorch is in `SUPPORTED_EXECUTORCH`.

    With `EMITTER_FILTER_ALLOW_UNTESTED_EXECUTORCH=1`, a version outside the range
    only logs a warning (once per version); a missing executorch is an error always.

    Args:
        version: The version to check; defaults to the installed one.
    """
    found = installed_executorch_version() if version is None else version
    if found is None:
        raise UnsupportedExecutorchError(
            "emitter_filter's in-process hook needs executorch "
            f"{SUPPORTED_EXECUTORCH}, which is not installed: {install_hint()} "
            "(emitter-filter audit and prune need no executorch)"
        )
    release = _release(found)
    if release is not None and _LOWEST <= release < _BEYOND:
        return
    message = (
        f"emitter_filter supports executorch {SUPPORTED_EXECUTORCH} "
        f"(tested: {', '.join(TESTED_EXECUTORCH)}), found {found}"
    )
    if not _untested_allowed():
        raise UnsupportedExecutorchError(
            f"{message}: its serializer internals may differ; install a supported "
            f"release ({install_hint()}), or set {ENV_ALLOW_UNTESTED}=1 to try this one"
        )
    if found not in _warned:
        _warned.add(found)
        logger.warning("%s; going on because %s is set", message, ENV_ALLOW_UNTESTED)


def program_module():
    """`executorch.exir.program._program`, whose `serialize_for_executorch` and `emit_program` are wrapped.

    Raises:
        UnsupportedExecutorchError: executorch is missing or outside the supported
            range, or the function is not there with the parameters the hook passes.
    """
    check_executorch_version()
    from executorch.exir.program import _program

    # The hook wraps both: emit_program only to see the ExportedPrograms it emits.
    for name in ("serialize_for_executorch", "emit_program"):
        if not callable(getattr(_program, name, None)):
            raise UnsupportedExecutorchError(
                f"executorch.exir.program._program.{name} is missing; "
                f"emitter_filter supports executorch {SUPPORTED_EXECUTORCH}"
            )
    serialize = _program.serialize_for_executorch
    import inspect

    # The original, not our wrapper (whose signature is the partial's).
    original = getattr(serialize, "__emitter_filter_original__", serialize)
    parameters = tuple(inspect.signature(original).parameters)
    if parameters != _SERIALIZE_PARAMETERS:
        raise UnsupportedExecutorchError(
            f"executorch.exir.program._program.serialize_for_executorch takes {parameters}, "
            f"not {_SERIALIZE_PARAMETERS}; emitter_filter supports executorch "
            f"{SUPPORTED_EXECUTORCH}"
        )
    return _program


def cord(data: bytes):
    """ExecuTorch's `Cord` around `data`: what `serialize_for_executorch` returns a `.pte` as."""
    from executorch.exir._serialize._cord import Cord

    return Cord(data)


def cord_pieces(data) -> list | None:
    """The buffers a `Cord` holds, in order: `bytes`, or (1.5) `FileBackedData` kept on
    disk (`file_backed_path`). None when `data` is not a `Cord` of those."""
    buffers = getattr(data, "_buffers", None)
    if buffers is None or not all(
        isinstance(b, bytes) or file_backed_path(b) is not None for b in buffers
    ):
        return None
    return list(buffers)


def file_backed_path(buffer) -> str | None:
    """The file a `FileBackedData` (executorch 1.5) keeps its bytes in; None for anything else."""
    try:
        from executorch.exir._serialize._cord import FileBackedData
    except ImportError:  # executorch 1.4: a Cord holds bytes only.
        return None
    if not isinstance(buffer, FileBackedData):
        return None
    path = getattr(buffer, "_path", None)
    return path if isinstance(path, str) else None


def cord_of(pieces):
    """ExecuTorch's `Cord` of `pieces` (`bytes` or `FileBackedData`), appended without a copy."""
    from executorch.exir._serialize._cord import Cord

    result = Cord()
    for piece in pieces:
        result.append(piece)
    return result


def emitter_output_of(manager):
    """The `EmitterOutput` an `ExecutorchProgramManager` keeps (a private attribute)."""
    try:
        return manager._emitter_output
    except AttributeError:
        raise TypeError(
            f"expected an ExecutorchProgramManager, got {type(manager).__name__}"
        ) from None
