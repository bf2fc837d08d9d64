"""The public API is what we mean it to be: `emitter_filter.__all__` exactly, and every public
module lists in its `__all__` each name it defines without a leading `_`."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest
from executorch.exir import ExecutorchBackendConfig as UpstreamConfig

import emitter_filter

PACKAGE = Path(emitter_filter.__file__).parent

PUBLIC_API = {
    # in process
    "ExecutorchBackendConfig",
    "pruning",
    "report",
    "PruneReport",
    "DroppedConstant",
    "ConstantName",
    "install",
    "uninstall",
    # files on disk
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
    # errors
    "EmitterFilterError",
    "UnsupportedExecutorchError",
    "ProgramFormatError",
    "PteFormatError",
    "OutputFileError",
    "InvalidOutputError",
    "EnvironmentVariableError",
    "InvariantError",
    "ReportNotFoundError",
    "MethodSetError",
    "VerifyError",
    # the environment and the supported executorch
    "SUPPORTED_EXECUTORCH",
    "ENV_PRUNE",
    "ENV_DEDUPE",
    "ENV_STRICT",
    "__version__",
}

# Hooks pytest finds by name, which must not start with `_`.
_PYTEST_HOOKS = ("pytest_",)

# Modules other work is renaming now (issue 18, b); each marked fails once it is fixed
# (strict xfail), so that its mark is removed then.
_BEING_RENAMED: set[str] = set()

# Modules that import what only the program that loads them installs: module to that import.
_NEEDS = {"emitter_filter.model_explorer_provider.main": "model_explorer"}


def test_the_package_exports_exactly_the_public_api():
    assert set(emitter_filter.__all__) == PUBLIC_API
    assert len(emitter_filter.__all__) == len(PUBLIC_API), "a name listed twice"
    assert sorted(dir(emitter_filter)) == sorted(PUBLIC_API)
    for name in emitter_filter.__all__:
        assert getattr(emitter_filter, name) is not None, name
    assert issubclass(emitter_filter.ExecutorchBackendConfig, UpstreamConfig)


def _public_modules() -> list[str]:
    """Every module of the package whose dotted path has no `_` part, the package's own first."""
    found = ["emitter_filter"]
    for info in pkgutil.walk_packages([str(PACKAGE)], "emitter_filter."):
        if not any(part.startswith("_") for part in info.name.split(".")[1:]):
            found.append(info.name)
    return found


def _defined_names(module_name: str) -> set[str]:
    """The names a module's source binds at top level (definitions, not imports)."""
    module = importlib.import_module(module_name)
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return {
        n
        for n in names
        if not n.startswith("_") and not n.startswith(_PYTEST_HOOKS) and n != "logger"
    }


@pytest.mark.parametrize(
    "module_name",
    [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason="being renamed"))
        if name in _BEING_RENAMED
        else name
        for name in _public_modules()
    ],
)
def test_every_public_name_of_a_public_module_is_in_its_all(module_name):
    if module_name in _NEEDS:  # an integration another program imports, in its own venv
        pytest.importorskip(_NEEDS[module_name])
    module = importlib.import_module(module_name)
    defined = _defined_names(module_name)
    listed = set(getattr(module, "__all__", ()))
    assert defined - listed == set(), f"{module_name}: defined, not in __all__ (prefix with _?)"
    assert all(hasattr(module, name) or name in getattr(module, "_LAZY", {}) for name in listed)


def test_the_module_list_is_not_empty_and_skips_private_modules():
    modules = _public_modules()
    assert "emitter_filter.inprocess.hook" in modules and "emitter_filter.ondisk.audit" in modules
    assert not [m for m in modules if "._" in m]
