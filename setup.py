"""Puts emitter_filter_startup.pth at the root of site-packages, from wheels and `pip install -e`.

The project's metadata is in pyproject.toml; this file only adds two build commands.
Python runs .pth files found in site-packages at start-up (the hook is described in
emitter_filter/inprocess/startup.py); an installer puts there what is at the root of a wheel,
and setuptools has no setting for a file at the root of a wheel:

- `build_py` copies the .pth into the build directory's root, which is the root of a
  regular wheel (pytest-cov shipped its .pth this way);
- `editable_wheel` (PEP 660, `pip install -e`) writes only setuptools' own finder
  into the editable wheel and ignores the build directory, so the .pth is added to
  the wheel it built, with its RECORD line, so that `pip uninstall` removes it too.
"""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH = "emitter_filter_startup.pth"


class BuildPyWithStartupPth(build_py):
    def run(self) -> None:
        super().run()
        self.copy_file(PTH, os.path.join(self.build_lib, PTH))

    def get_outputs(self, include_bytecode=True) -> list[str]:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]

    def get_source_files(self) -> list[str]:
        # What sdist includes: the .pth must be in it for a wheel built from it.
        return [*super().get_source_files(), PTH]


class EditableWheelWithStartupPth(editable_wheel):
    def run(self) -> None:
        super().run()
        wheels = list(Path(self.dist_dir).glob("*-0.editable-*.whl"))
        if len(wheels) != 1:
            raise RuntimeError(f"{self.dist_dir}: expected one editable wheel, found {wheels}")
        _add_to_wheel(wheels[0], PTH, Path(PTH).read_bytes())


def _add_to_wheel(wheel: Path, name: str, data: bytes) -> None:
    """Rewrites `wheel` with `name` at its root and a RECORD line for it (RECORD stays last)."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    with zipfile.ZipFile(wheel) as source:
        entries = [(info, source.read(info)) for info in source.infolist()]
    (record,) = [e for e in entries if e[0].filename.endswith(".dist-info/RECORD")]
    entries.remove(record)
    record_info, record_data = record
    record_data += f"{name},sha256={digest},{len(data)}\n".encode()
    rewritten = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(rewritten, "w", zipfile.ZIP_DEFLATED) as target:
        for info, content in entries:
            target.writestr(info, content)
        target.writestr(name, data)
        target.writestr(record_info, record_data)
    rewritten.replace(wheel)


setup(cmdclass={"build_py": BuildPyWithStartupPth, "editable_wheel": EditableWheelWithStartupPth})
