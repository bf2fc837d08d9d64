"""The one module that touches ExecuTorch's private internals.

The hook wraps `executorch.exir.program._program.serialize_for_executorch`, which
`ExecutorchProgramManager.__init__` calls eagerly with the emitter output, the
config and the delegates' named data. The name is bound into `_program` by
`from ... import`, so patching `exir._serialize._serialize` would do nothing.

These internals move between releases, so the supported version is pinned and
checked: an unknown version is an error, never a silent no-op.
"""

from __future__ import annotations

import importlib.metadata

from emitter_filter.errors import UnsupportedExecutorchError

SUPPORTED_EXECUTORCH = "1.5.1"


def installed_executorch_version() -> str | None:
    """The installed executorch distribution's version, without a local tag like `+cpu`."""
    try:
        return importlib.metadata.version("executorch").split("+", 1)[0]
    except importlib.metadata.PackageNotFoundError:
        return None


def check_executorch_version(version: str | None = None) -> None:
    """Raises `UnsupportedExecutorchError` unless executorch is the supported version.

    Args:
        version: The version to check; defaults to the installed one.
    """
    found = installed_executorch_version() if version is None else version
    if found != SUPPORTED_EXECUTORCH:
        raise UnsupportedExecutorchError(
            f"emitter_filter supports executorch=={SUPPORTED_EXECUTORCH} only, "
            f"found {found or 'no executorch'}: its serializer internals differ; "
            f"install executorch=={SUPPORTED_EXECUTORCH}"
        )


def program_module():
    """`executorch.exir.program._program`, the module whose `serialize_for_executorch` is wrapped."""
    check_executorch_version()
    from executorch.exir.program import _program

    if not callable(getattr(_program, "serialize_for_executorch", None)):
        raise UnsupportedExecutorchError(
            "executorch.exir.program._program.serialize_for_executorch is missing; "
            f"emitter_filter supports executorch=={SUPPORTED_EXECUTORCH} only"
        )
    return _program


def emitter_output_of(manager):
    """The `EmitterOutput` an `ExecutorchProgramManager` keeps (a private attribute)."""
    try:
        return manager._emitter_output
    except AttributeError:
        raise TypeError(
            f"expected an ExecutorchProgramManager, got {type(manager).__name__}"
        ) from None
