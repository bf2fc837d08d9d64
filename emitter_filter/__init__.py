"""Write only the constants an ExecuTorch program can reach into its `.pte` and `.ptd` files.

Three ways to turn pruning on:

- `to_executorch(emitter_filter.ExecutorchBackendConfig(prune_constants=True))`;
- `with emitter_filter.pruning(): ...` around code you cannot edit;
- `EMITTER_FILTER_PRUNE=1` in the environment, for any Python process, whether or
  not it imports emitter_filter (a start-up hook installed with the package, see
  `_startup`), or `python -m emitter_filter run ...` for one script.

`dedupe_constants=True` (also `pruning(dedupe_constants=True)` and
`EMITTER_FILTER_DEDUPE=1`) also stores once the named data that repeats a
constant, such as a tied embedding lowered to XNNPACK.

`emitter_filter.report(manager)` tells what was dropped. For files already on
disk, `emitter_filter.audit_file(path)` tells what is dead and
`emitter_filter.prune_file(src, dst)` writes the file without it, neither
importing ExecuTorch's exporter; `share_files` stores what several programs have
in common once in a `.ptd`, `merge_files` writes them as one multi-method `.pte`
and `split_file` cuts one back to some of its methods.

Importing this package is cheap and needs only `flatbuffers`: ExecuTorch's
exporter (seconds to import) loads only when a name that needs it is first used,
and that is where its version is checked (`SUPPORTED_EXECUTORCH`).
"""

from __future__ import annotations

import importlib

from emitter_filter._upstream import SUPPORTED_EXECUTORCH
from emitter_filter.environment import ENV_DEDUPE, ENV_PRUNE, ENV_STRICT
from emitter_filter.errors import (
    EmitterFilterError,
    EnvironmentVariableError,
    InvalidOutputError,
    InvariantError,
    MethodSetError,
    OutputFileError,
    ProgramFormatError,
    PteFormatError,
    ReportNotFoundError,
    UnsupportedExecutorchError,
    VerifyError,
)
from emitter_filter.inprocess.startup import apply_environment as _apply_environment

__version__ = "0.1.0"

__all__ = [
    "ExecutorchBackendConfig",
    "pruning",
    "report",
    "PruneReport",
    "DroppedConstant",
    "ConstantName",
    "audit_file",
    "AuditReport",
    "prune_file",
    "FilePruneReport",
    "dedupe_file",
    "DedupeReport",
    "share_files",
    "ShareReport",
    "merge_files",
    "split_file",
    "MergeReport",
    "install",
    "uninstall",
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
    "SUPPORTED_EXECUTORCH",
    "ENV_PRUNE",
    "ENV_STRICT",
    "ENV_DEDUPE",
    "__version__",
]

# Public names loaded on first use: most import ExecuTorch's exporter.
_LAZY = {
    "audit_file": "emitter_filter.ondisk.audit",
    "AuditReport": "emitter_filter.ondisk.analyse.audit_report",
    "prune_file": "emitter_filter.ondisk.prune",
    "FilePruneReport": "emitter_filter.ondisk.prune_report",
    "dedupe_file": "emitter_filter.ondisk.dedupe",
    "DedupeReport": "emitter_filter.ondisk.dedupe",
    "share_files": "emitter_filter.ondisk.share",
    "ShareReport": "emitter_filter.ondisk.share_report",
    "merge_files": "emitter_filter.ondisk.merge",
    "split_file": "emitter_filter.ondisk.split",
    "MergeReport": "emitter_filter.ondisk.merge_report",
    "ExecutorchBackendConfig": "emitter_filter.inprocess.config",
    "pruning": "emitter_filter.inprocess.hook",
    "install": "emitter_filter.inprocess.hook",
    "uninstall": "emitter_filter.inprocess.hook",
    "report": "emitter_filter.inprocess.reports",
    "PruneReport": "emitter_filter.inprocess.reports",
    "DroppedConstant": "emitter_filter.program.names",
    "ConstantName": "emitter_filter.program.names",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'emitter_filter' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


_apply_environment()
