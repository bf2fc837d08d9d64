"""The examples of the README and of the manual's pages (docs/, in `mkdocs.yml`'s nav order
after the README) run, in order, and print what they show: one test per page, each page in a
directory of its own that starts with the files of the pages it needs (`NEEDS`), and each
page run once in a test run however many pages need it, so xdist spreads them over its workers.

Python blocks follow `<!-- readme-example: NAME -->` and are followed by a ```text block of
their output; command lines are the `$ ` lines of ```console blocks after
`<!-- readme-console: NAME -->`, each followed by its output (stdout and stderr; stdout only
after `<!-- readme-console: NAME stdout -->`, for commands whose stderr is progress and
ExecuTorch's own log lines). Commands may start with `.venv/bin/`, as the set-up section's do.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.shared_build import build_once

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


#: Pages whose examples read files the examples of earlier pages wrote: each page runs in
#: a directory of its own, holding a copy of what the pages it needs left in theirs.
NEEDS = {
    "files.md": ("in-process.md",),
    "gates.md": ("in-process.md",),
    "explain.md": ("in-process.md", "dedupe.md"),
}


def _steps(page: Path) -> list[tuple[list[str], str, str]]:
    """(argv, expected stdout, label) of every example and command of `page`, in order."""
    steps = []
    for block in BLOCK.finditer(page.read_text()):
        if block["code"] is not None:
            steps.append(([sys.executable, "-c", block["code"]], block["output"], block["name"]))
        else:
            merge = "" if block["stdout"] else "exec 2>&1; "
            steps += [
                (["bash", "-c", f"{merge}{c}"], out, c) for c, out in _commands(block["session"])
            ]
    return steps


WALKED = [page for page in pages() if _steps(page)]


def _walk(page: Path, directory: Path, needed: list[Path]) -> list[tuple[str, int, str, str]]:
    """Runs `page`'s steps in `directory` until one fails: (label, exit, stderr, stdout) each."""
    for files in needed:
        shutil.copytree(files, directory, dirs_exist_ok=True)
    shutil.copy(README, directory / "README.md")
    bin_dir = str(Path(sys.executable).parent)
    venv = directory / ".venv"
    venv.mkdir()
    (venv / "bin").symlink_to(bin_dir, target_is_directory=True)
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    results = []
    try:
        for argv, expected, label in _steps(page):
            result = subprocess.run(argv, capture_output=True, text=True, cwd=directory, env=env)
            results.append((label, result.returncode, result.stderr, result.stdout))
            if result.returncode != 0 or _normal(result.stdout) != _normal(expected):
                break
    finally:
        shutil.rmtree(venv)  # a copy of the directory must not copy the interpreter's
    return results


@pytest.fixture(scope="session")
def walked(tmp_path_factory):
    """`walked(name)`: a page's directory once its examples ran, and their results.

    Every page runs once in the whole test run (`build_once`), however many pages need
    its files and however many xdist workers ask.
    """

    @functools.cache
    def walk(name: str) -> tuple[Path, list[tuple[str, int, str, str]]]:
        page = next(page for page in WALKED if page.name == name)
        needed = [walk(other)[0] for other in NEEDS.get(name, ())]
        return build_once(
            tmp_path_factory,
            f"readme-{page.stem}",
            lambda directory: _walk(page, directory, needed),
        )

    return walk


@pytest.mark.parametrize("page", WALKED, ids=lambda page: page.name)
def test_the_examples_print_what_the_readme_and_the_pages_show(page, walked):
    _, results = walked(page.name)
    steps = _steps(page)
    for (_, expected, label), (_, returncode, stderr, stdout) in zip(steps, results, strict=False):
        assert returncode == 0, f"{label}: {stderr}"
        assert _normal(stdout) == _normal(expected), label
    assert len(results) == len(steps)


def test_the_readme_and_the_pages_have_tested_examples():
    assert sum(len(_steps(page)) for page in WALKED) >= 20
    assert set(NEEDS) | {name for names in NEEDS.values() for name in names} <= {
        page.name for page in WALKED
    }


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
