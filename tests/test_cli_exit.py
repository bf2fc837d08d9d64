"""`emitter-filter` (`cli.console_main`) freezes what is left before the interpreter exits,
except after `run`, whose script's objects are finalized as Python would."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _frozen_after(tmp_path, *argv: str) -> bool:
    script = (
        "import gc, sys\n"
        "from emitter_filter.cli import console_main\n"
        f"sys.argv = ['emitter-filter', *{list(argv)!r}]\n"
        "console_main()\n"
        "print(gc.get_freeze_count() > 0)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    return result.stdout.strip().splitlines()[-1] == "True"


@pytest.mark.parametrize("argv", [["env"], ["-v", "env"], ["prune", "--help"]])
def test_file_commands_freeze_before_exit(tmp_path, argv):
    assert _frozen_after(tmp_path, *argv)


def test_run_leaves_the_collector_alone(tmp_path):
    # After an option too: the command is the first argument that is not one.
    (tmp_path / "script.py").write_text("print('ran')\n")
    assert not _frozen_after(tmp_path, "-v", "run", "script.py")
