"""The pre-commit hook of `.pre-commit-hooks.yaml`: its entry, run as pre-commit runs it.

pre-commit appends the staged files its `files` pattern selects to `entry`; the
test does the same with the `emitter-filter` script installed next to this
interpreter, on a clean and a dirty program. The hook's environment is the
flatbuffers-only install, so these tests need no torch (`filetools`).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from emitter_filter.ondisk.audit import audit_file

yaml = pytest.importorskip("yaml")

pytestmark = pytest.mark.filetools

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def hook_definition() -> dict:
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    return next(hook for hook in hooks if hook["id"] == "emitter-filter-audit")


@pytest.fixture(scope="module")
def staged(tmp_path_factory, built) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("staged")
    files = {"clean": directory / "clean.pte", "dirty": directory / "dirty.pte"}
    files["clean"].write_bytes(built["clean"].pte.read_bytes())
    files["dirty"].write_bytes(built["plain"].pte.read_bytes())
    (directory / "notes.txt").write_text("not a program")
    return files


def _run_entry(definition: dict, files: list[Path]) -> subprocess.CompletedProcess:
    """What pre-commit runs: the entry's words, the script resolved in this venv, then the files."""
    command, *arguments = shlex.split(definition["entry"])
    script = Path(sys.executable).with_name(command)
    selected = [str(f) for f in files if re.search(definition["files"], f.name)]
    return subprocess.run(
        [str(script), *arguments, *selected], capture_output=True, text=True, check=False
    )


def test_hook_is_a_python_hook_on_pte_files(hook_definition):
    assert hook_definition["id"] == "emitter-filter-audit"
    assert hook_definition["language"] == "python"
    assert re.search(hook_definition["files"], "models/a.pte")
    assert not re.search(hook_definition["files"], "models/a.pte.txt")


def test_hook_passes_clean_programs(hook_definition, staged):
    completed = _run_entry(
        hook_definition, [staged["clean"], staged["clean"].with_name("notes.txt")]
    )
    assert completed.returncode == 0, completed.stderr
    assert "0 dead" in completed.stdout


def test_hook_fails_when_one_staged_program_carries_dead_bytes(hook_definition, staged):
    dead = audit_file(staged["dirty"]).dead_bytes
    assert dead > 0
    completed = _run_entry(hook_definition, [staged["clean"], staged["dirty"]])
    assert completed.returncode == 1
    assert completed.stderr.splitlines() == [
        f"emitter-filter: {staged['dirty']}: {dead:,} dead bytes > --max-dead-bytes 0"
    ]
    # Both files are reported, in the order given.
    assert completed.stdout.index(str(staged["clean"])) < completed.stdout.index(
        str(staged["dirty"])
    )


def test_hook_fails_an_invalid_program_in_one_line(hook_definition, tmp_path):
    from tests.layouts import build_program

    placeholder = tmp_path / "p.pte"
    placeholder.write_bytes(build_program(dead=False, where="placeholder").pte)
    completed = _run_entry(hook_definition, [placeholder])
    assert completed.returncode == 2
    (line,) = completed.stderr.splitlines()
    assert line.startswith(f"emitter-filter: {placeholder}: invalid: relies on the constant_buffer")


def test_require_data_hook_fails_a_program_staged_without_its_ptd(tmp_path, built):
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    definition = next(h for h in hooks if h["id"] == "emitter-filter-require-data")
    # Exported with external_constants=True: its weights are in the .ptd.
    pte = tmp_path / "model.pte"
    pte.write_bytes(built["external"].pte.read_bytes())
    completed = _run_entry(definition, [pte])
    assert completed.returncode == 1
    (line,) = completed.stderr.splitlines()
    assert line.startswith(f"emitter-filter: {pte}: --require-data: external data in none of")
    (ptd,) = built["external"].ptds
    (tmp_path / "model.ptd").write_bytes(ptd.read_bytes())
    completed = _run_entry(definition, [pte])
    assert completed.returncode == 0, completed.stderr
