"""`emitter-filter run`: what the script sees, what it returns, and that pruning ends with it."""

from __future__ import annotations

import json
import sys

import pytest

from emitter_filter.cli import main
from emitter_filter.inprocess import hook

SCRIPT = """
import json, sys
from emitter_filter.inprocess import hook
print(json.dumps({"argv": sys.argv, "pruning": hook.is_enabled()}))
sys.exit(int(sys.argv[-1]))
"""


@pytest.fixture
def script(tmp_path, monkeypatch):
    path = tmp_path / "export_me.py"
    path.write_text(SCRIPT)
    monkeypatch.syspath_prepend(str(tmp_path))
    return path


@pytest.mark.parametrize("how", ["script", "module"])
def test_run_passes_every_argument_and_returns_the_script_exit_code(how, script, capsys):
    target = [str(script)] if how == "script" else ["-m", "export_me"]
    code = main(["run", *target, "-v", "--out", "x.pte", "3"])
    seen = json.loads(capsys.readouterr().out)
    assert code == 3
    assert seen["argv"][1:] == ["-v", "--out", "x.pte", "3"]
    assert seen["pruning"] is True
    assert not hook.is_enabled(), "pruning must end with the script"


def test_run_without_a_target_is_a_usage_error(capsys):
    assert main(["run"]) == 2
    assert "give -m MODULE or SCRIPT" in capsys.readouterr().err


def test_a_file_named_run_is_not_the_run_command(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").write_bytes(b"not a program")
    assert main(["audit", "run"]) == 2
    assert "run: " in capsys.readouterr().err
    assert sys.argv  # untouched
