"""Every OSError reaching a command is one line and exit 2, and leaves nothing behind.

An OSError is injected at each write path of each command: the rename that puts an
output in place (`os.replace`: `prune`, `prune --dedupe`, `share`, `merge`, `split`, `explain --html`,
`budget write`, `--benchmark-json`), the directory `share --out` creates
(`os.mkdir`), the script `run` reads; and a read (`os.pread`) of the commands
that only read. Exit 1 means "over the limit" to CI,
so a crash there would read as a budget failure.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from emitter_filter import cli
from tests.files import GOLDEN

pytestmark = pytest.mark.filetools


def _refuse(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _refuse_directory(name, *_args, **_kwargs):
    raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), name)


def _inputs(tmp_path: Path) -> dict[str, str]:
    inputs = tmp_path / "in"
    inputs.mkdir()
    for case in ("plain", "clean", "external"):
        for file in (GOLDEN / case / "dirty").iterdir():
            shutil.copyfile(file, inputs / f"{case}{file.suffix}")
    budget = tmp_path / "in" / "budget.json"
    assert cli.main(["budget", "write", str(inputs / "plain.pte"), "-o", str(budget)]) == 0
    return {
        "pte": str(inputs / "plain.pte"),
        "other": str(inputs / "clean.pte"),
        "ext": str(inputs / "external.pte"),
        "ptd": str(inputs / "external.ptd"),
        "budget": str(budget),
        "out": str(tmp_path / "out"),
    }


# (id, the function replaced, the arguments with {names} of `_inputs`)
CASES = [
    ("prune", "replace", ["prune", "{pte}", "-o", "{out}/p.pte"]),
    ("prune --dedupe", "replace", ["prune", "--dedupe", "{pte}", "-o", "{out}/p.pte"]),
    (
        "prune --ptd-out",
        "replace",
        ["prune", "{ext}", "-o", "{out}/p.pte", "--data", "{ptd}", "--ptd-out", "{out}"],
    ),
    (
        "prune --ptd-out it creates",
        "replace",
        ["prune", "{ext}", "-o", "{out}/p.pte", "--data", "{ptd}", "--ptd-out", "{out}/new/d"],
    ),
    ("share --out cannot be created", "mkdir", ["share", "{pte}", "{other}", "--out", "{out}/s"]),
    ("share", "replace", ["share", "{pte}", "{other}", "--out", "{out}/s"]),
    ("share --prune", "replace", ["share", "--prune", "{pte}", "{other}", "--out", "{out}/s"]),
    (
        "merge",
        "replace",
        ["merge", "{pte}", "{other}", "-o", "{out}/m.pte", "--method", "o=clean.pte:forward"],
    ),
    ("split", "replace", ["split", "{pte}", "--method", "forward", "-o", "{out}/s.pte"]),
    ("explain --html", "replace", ["explain", "{pte}", "--html", "{out}/page.html"]),
    ("budget write", "replace", ["budget", "write", "{pte}", "-o", "{out}/b.json"]),
    (
        "budget check --benchmark-json",
        "replace",
        ["budget", "check", "{pte}", "--budget", "{budget}", "--benchmark-json", "{out}/bj.json"],
    ),
    (
        "budget write --benchmark-json",
        "replace",
        ["budget", "write", "{pte}", "-o", "{out}/b.json", "--benchmark-json", "{out}/bj.json"],
    ),
    ("run: the script cannot be read", None, ["run", "{out}/missing.py"]),
    # The commands that only read: a read that fails (EIO, a file on a broken disk).
    ("audit: a read fails", "pread", ["audit", "{pte}"]),
    ("diff: a read fails", "pread", ["diff", "{pte}", "{other}"]),
    ("explain: a read fails", "pread", ["explain", "{pte}"]),
]


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize(("refused", "argv"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_an_os_error_is_one_line_exit_2_and_nothing_left_behind(
    refused, argv, tmp_path, capsys, monkeypatch
):
    names = _inputs(tmp_path)
    os.makedirs(names["out"])
    before = _tree(tmp_path)
    if argv[0] == "run":
        pytest.importorskip("executorch")
    capsys.readouterr()
    if refused == "replace":
        monkeypatch.setattr(os, "replace", _refuse)
    elif refused == "pread":
        monkeypatch.setattr(os, "pread", _refuse)
    elif refused == "mkdir":
        monkeypatch.setattr(os, "mkdir", _refuse_directory)
    code = cli.main([a.format(**names) for a in argv])
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE, err
    assert err.count("\n") == 1 and err.startswith("emitter-filter"), err
    assert "Traceback" not in err
    assert _tree(tmp_path) == before
