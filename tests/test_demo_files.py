"""`emitter-filter demo --files-only`: the shipped example program, written without torch."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from importlib.resources import files

import pytest

from tests.files import GOLDEN

pytestmark = pytest.mark.filetools


def test_the_shipped_example_is_the_golden_dirty_program():
    shipped = files("emitter_filter.examples").joinpath("model.pte").read_bytes()
    assert shipped == (GOLDEN / "plain" / "dirty" / "model.pte").read_bytes()


def test_demo_files_only_writes_it_without_torch_and_audit_finds_its_dead_bytes(tmp_path):
    code = textwrap.dedent(
        f"""
        import sys
        from emitter_filter import cli
        assert cli.main(["demo", "--files-only", "--out", {str(tmp_path / "ex")!r}]) == 0
        assert cli.main(["audit", {str(tmp_path / "ex" / "model.pte")!r},
                         "--max-dead-bytes", "0"]) == 1
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "executorch"))
        assert not loaded, loaded
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"wrote {tmp_path / 'ex' / 'model.pte'} (1,876 bytes; 148 of")
