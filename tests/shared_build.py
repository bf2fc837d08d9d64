"""Build a session fixture's files once per test run, however many pytest-xdist workers ask.

Each xdist worker is its own process with its own session fixtures: an export in a
session fixture ran once per worker. `build_once` runs it in the first worker that
asks, under a file lock in the directory all workers of the run share
(`tmp_path_factory.getbasetemp().parent`, the pattern of pytest-xdist's docs), and
the other workers wait for it and read what it wrote. Without xdist it just builds.

    @pytest.fixture(scope="session")
    def exported(tmp_path_factory):
        directory, report = build_once(tmp_path_factory, "exported", export_into)

`build(directory)` writes its files into `directory` and returns a picklable value;
each worker gets its own copy of the directory (tests may write beside the files),
and every `Path` under the build's directory inside the value points into that copy.
"""

from __future__ import annotations

import io
import os
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path, PurePath
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

_DONE = "done"


class _Pickler(pickle.Pickler):
    """Stores paths under `root` relative to it, so that they can point into a copy."""

    def __init__(self, file, root: Path) -> None:
        super().__init__(file)
        self.root = root

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, PurePath) and obj.is_relative_to(self.root):
            return ("path", obj.relative_to(self.root).as_posix())
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, root: Path) -> None:
        super().__init__(file)
        self.root = root

    def persistent_load(self, pid: Any) -> Any:
        kind, relative = pid
        assert kind == "path", pid
        return self.root / relative


def build_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], T]
) -> tuple[Path, T]:
    """`build(directory)` once per run: this worker's copy of the directory, and the value."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        directory = tmp_path_factory.mktemp(name)
        return directory, build(directory)
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp().parent / f"shared-{name}"
    files, value_path = shared / "files", shared / "value.pickle"
    with FileLock(f"{shared}.lock"):
        if not (shared / _DONE).exists():
            shutil.rmtree(shared, ignore_errors=True)
            files.mkdir(parents=True)
            buffer = io.BytesIO()
            _Pickler(buffer, files).dump(build(files))
            value_path.write_bytes(buffer.getvalue())
            (shared / _DONE).touch()
    directory = tmp_path_factory.mktemp(name)
    shutil.copytree(files, directory, dirs_exist_ok=True)
    return directory, _Unpickler(io.BytesIO(value_path.read_bytes()), directory).load()
