"""The examples of the README and of the manual's pages (docs/, in `mkdocs.yml`'s nav order
after the README) run, in order, in one directory, and print what they show.

Python blocks follow `<!-- readme-example: NAME -->` and are followed by a ```text block of
their output; command lines are the `$ ` lines of ```console blocks after
`<!-- readme-console: NAME -->`, each followed by its output (stdout and stderr; stdout only
after `<!-- readme-console: NAME stdout -->`, for commands whose stderr is progress and
ExecuTorch's own log lines). Commands may start with `.venv/bin/`, as the set-up section's do.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def pages() -> list[Path]:
    """The README, then every page of the manual in the order `mkdocs.yml`'s nav lists them."""
    nav = re.findall(r"^\s*- [^:]+: ([\w-]+\.md)$", (ROOT / "mkdocs.yml").read_text(), re.M)
    return [README, *(ROOT / "docs" / name for name in nav)]


BLOCK = re.compile(
    r"<!-- readme-example: (?P<name>[\w-]+) -->\s*```python\n(?P<code>.*?)```.*?```text\n(?P<output>.*?)```"
    r"|<!-- readme-console: (?P<console>[\w-]+)(?P<stdout> stdout)? -->\s*```console\n"
    r"(?P<session>.*?)```",
    re.S,
)
# Wall times (`N ms`) and the filter's share of to_executorch differ from run to run;
# everything else must match.
TIMING = re.compile(r"\d+(\.\d+)?(?= ms\b|% of to_executorch)")


def _normal(text: str) -> str:
    return TIMING.sub("T", text)


def _commands(session: str):
    """(command, expected output) pairs of a console block."""
    pairs: list[tuple[str, list[str]]] = []
    for line in session.splitlines():
        if line.startswith("$ "):
            pairs.append((line[2:], []))
        else:
            pairs[-1][1].append(line)
    return [(command, "".join(f"{line}\n" for line in lines)) for command, lines in pairs]


def test_the_examples_print_what_the_readme_and_the_pages_show(tmp_path):
    blocks = [block for page in pages() for block in BLOCK.finditer(page.read_text())]
    assert blocks, "the README and the pages have no tested examples"
    shutil.copy(README, tmp_path / "README.md")
    bin_dir = str(Path(sys.executable).parent)
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "bin").symlink_to(bin_dir, target_is_directory=True)
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    ran = 0
    for block in blocks:
        if block["code"] is not None:
            steps = [([sys.executable, "-c", block["code"]], block["output"], block["name"])]
        else:
            merge = "" if block["stdout"] else "exec 2>&1; "
            steps = [
                (["bash", "-c", f"{merge}{c}"], out, c) for c, out in _commands(block["session"])
            ]
        for argv, expected, label in steps:
            result = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env)
            assert result.returncode == 0, f"{label}: {result.stderr}"
            assert _normal(result.stdout) == _normal(expected), label
            ran += 1
    assert ran >= 20


def test_the_readmes_set_up_installs_what_its_bench_command_needs():
    # The bench command failed in the README's own venv: its extra was never installed.
    import tomllib

    text = README.read_text()
    install = re.search(r"\.venv/bin/pip install -e '\.\[([\w,]+)\]'", text)
    assert install, "the README has no set-up command"
    assert ".venv/bin/python -m bench --out" in text
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    wanted = set(install.group(1).split(","))
    installed = " ".join(d for extra in wanted for d in extras[extra])
    installed += (
        " ".join(d for d in extras["executorch"])
        if "emitter_filter[executorch]" in installed
        else ""
    )
    sys.path.insert(0, str(ROOT))
    from bench.cli import _SUITE_NEEDS

    missing = [dist for dist in _SUITE_NEEDS.values() if dist not in installed]
    assert missing == [], f"the README's set-up does not install {missing}"


@pytest.mark.slow
def test_the_readmes_bench_command_runs_in_its_set_up(tmp_path):
    """The README's bench command as printed, from the clone, in the set-up's venv (the one
    running the tests): it exits 0 with its results. `.ci/run` runs it; the README gives its time.
    """
    found = re.search(r"`(\.venv/bin/python -m bench --out \S+ --quick)`", README.read_text())
    assert found, "the README has no bench command"
    argv = shlex.split(found.group(1))
    argv[0] = sys.executable
    out = tmp_path / "bench-out"
    argv[argv.index("--out") + 1] = str(out)
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    assert (out / "results.json").is_file()
    assert "pruned" in result.stdout, result.stdout
