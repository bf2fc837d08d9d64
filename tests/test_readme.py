"""The README's examples run, and print what the README says they print."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"

# <!-- readme-example: NAME --> then a ```python block, then a ```text block of its output.
EXAMPLE = re.compile(
    r"<!-- readme-example: (?P<name>[\w-]+) -->\s*```python\n(?P<code>.*?)```"
    r".*?```text\n(?P<output>.*?)```",
    re.S,
)
# Wall times differ from run to run; everything else must match.
TIMING = re.compile(r"in \d+(\.\d+)? ms")


def _examples():
    return [pytest.param(m["code"], m["output"], id=m["name"]) for m in EXAMPLE.finditer(README.read_text())]


def test_the_readme_has_examples():
    assert _examples()


@pytest.mark.parametrize("code, output", _examples())
def test_readme_example_prints_what_the_readme_shows(code, output, tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert result.returncode == 0, result.stderr
    assert TIMING.sub("in T ms", result.stdout) == TIMING.sub("in T ms", output)
