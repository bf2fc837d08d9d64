"""A wheel of this tree installed into a fresh environment, as a user's install would be.

Shared by the slow start-up test (`tests/inprocess/test_startup.py`) and the start-up
benchmark (`bench/startup.py`): a wheel built from a copy of the tree, and a virtual
environment without pip that sees the running interpreter's torch and ExecuTorch
through a .pth, as an environment that has them installed would.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["REPO", "build_wheel", "dependency_site_packages", "make_venv", "install_wheel"]

REPO = Path(__file__).resolve().parents[1]
# Not part of the source: environments, build outputs, caches.
_NOT_SOURCE = shutil.ignore_patterns(
    ".git",
    ".venv*",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".pytest_cache",
    ".benchmarks",
    "bench-out",
)
# What emitter_filter imports at run time, besides the standard library.
_DEPENDENCIES = ("torch", "executorch", "flatbuffers")


def build_wheel(out_dir: Path, source: Path = REPO) -> Path:
    """Builds the wheel of a copy of `source` into `out_dir`, as `pip wheel` does; returns it.

    The copy keeps `build/` and `*.egg-info` out of the source tree, and lets builds
    run side by side.
    """
    tree = out_dir / "source"
    shutil.copytree(source, tree, ignore=_NOT_SOURCE)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out_dir), str(tree)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    (wheel,) = out_dir.glob("emitter_filter-*.whl")
    return wheel


def dependency_site_packages() -> list[str]:
    """The directories the running interpreter finds torch, ExecuTorch and flatbuffers in.

    Found without importing them: `find_spec` of a top-level name runs no code.
    """
    directories = []
    for name in _DEPENDENCIES:
        spec = importlib.util.find_spec(name)
        if spec is None:
            raise RuntimeError(f"{name} is not importable from {sys.executable}")
        # executorch is a namespace package: a directory, no __init__.py.
        package_dir = list(spec.submodule_search_locations or [os.path.dirname(spec.origin)])[0]
        directories.append(os.path.dirname(package_dir))
    return list(dict.fromkeys(directories))


def make_venv(path: Path, extra_site_packages: list[str]) -> Path:
    """Makes a virtual environment without pip that also sees `extra_site_packages`; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    site_packages = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # Sorted before emitter_filter_startup.pth, as a pip-installed torch would be there already.
    Path(site_packages, "_dependencies.pth").write_text(
        "".join(f"{d}\n" for d in extra_site_packages)
    )
    return python


def install_wheel(python: Path, wheel: Path) -> None:
    """Installs `wheel` (not editable, no dependencies) into the environment of `python`."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "-q",
            str(wheel),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
