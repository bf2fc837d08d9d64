"""`emitter-filter run`: what the script sees, what it returns, and that pruning ends with it."""

from __future__ import annotations

import json
import sys

import pytest

from emitter_filter.cli import main
from emitter_filter.inprocess import hook

SCRIPT = """
import json, sys
import executorch.exir  # pruning is on from ExecuTorch's import on
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


@pytest.mark.parametrize("target", [[], ["-m"], ["-m", ""]], ids=["none", "-m", "-m ''"])
def test_run_without_a_target_is_a_usage_error(capsys, target):
    assert main(["run", *target]) == 2
    assert "give -m MODULE or SCRIPT" in capsys.readouterr().err


def test_a_file_named_run_is_not_the_run_command(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").write_bytes(b"not a program")
    assert main(["audit", "run"]) == 2
    assert "run: " in capsys.readouterr().err
    assert sys.argv  # untouched


def _audited_dead(path) -> int:
    from emitter_filter.ondisk.audit import audit_file

    return audit_file(str(path)).dead_bytes


def test_run_of_a_script_that_never_exports_loads_neither_torch_nor_executorch(tmp_path):
    import subprocess

    script = tmp_path / "hello.py"
    script.write_text(
        "import sys\nprint(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('torch', 'executorch')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "emitter_filter", "run", str(script)], capture_output=True, text=True
    )
    assert (result.returncode, result.stdout) == (0, "[]\n"), result.stderr


@pytest.mark.parametrize("how", ["run --keep", "EMITTER_FILTER_KEEP"])
def test_keep_is_given_to_run_and_to_the_environment_switch(tmp_path, how):
    import os
    import subprocess

    from tests.inprocess.test_startup import DEAD_BYTES, EXPORT_SCRIPT

    script = tmp_path / "export.py"
    script.write_text(EXPORT_SCRIPT)
    out = tmp_path / "model.pte"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("EMITTER_FILTER_")}
    if how == "run --keep":
        argv = [sys.executable, "-m", "emitter_filter", "run", "--keep", "unu*", str(script)]
    else:
        argv = [sys.executable, str(script)]
        environ.update(EMITTER_FILTER_PRUNE="1", EMITTER_FILTER_KEEP=" nothing.*, unu* ")
    result = subprocess.run([*argv, str(out)], capture_output=True, text=True, env=environ)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen["heavy_at_start"] == []  # the hook was armed, ExecuTorch not imported
    assert "dropped 0 constants" in result.stderr, result.stderr
    assert _audited_dead(out) == DEAD_BYTES  # kept: what audit, without --keep, calls dead


def test_run_finds_the_modules_beside_the_script_and_in_the_current_directory(
    tmp_path, monkeypatch, capsys
):
    """As `python export.py` and `python -m helper` do: sys.path[0] is the script's directory or
    the current one, wherever the command is run from."""
    beside = tmp_path / "scripts"
    beside.mkdir()
    (beside / "sibling_of_export.py").write_text("WHERE = 'beside'\n")
    (beside / "export.py").write_text("import sibling_of_export\nprint(sibling_of_export.WHERE)\n")
    (tmp_path / "helper_in_cwd.py").write_text("print('from the current directory')\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in ("sibling_of_export", "helper_in_cwd"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert main(["run", str(beside / "export.py")]) == 0
    monkeypatch.chdir(tmp_path)
    assert main(["run", "-m", "helper_in_cwd"]) == 0
    assert capsys.readouterr().out == "beside\nfrom the current directory\n"
    assert str(beside) not in sys.path and str(tmp_path) not in sys.path  # restored after
