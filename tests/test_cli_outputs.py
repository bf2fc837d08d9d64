"""Every output of every command goes through one check, made before the first is written.

For each output option and each kind of target: a link to a regular file is
written through and stays a link; anything else that cannot be written (a
directory, a FIFO, a link to a device or to nothing, a missing parent, a parent
that is a file, an empty path, an input, the command's other output) is one
line and exit 2, and then nothing is written: not the command's other output
either, and no temporary file is left. A full disk names the file that failed.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from emitter_filter.cli import main
from tests.files import GOLDEN

pytestmark = pytest.mark.filetools

EXTERNAL = GOLDEN / "external" / "dirty"


def _inputs(tmp_path: Path) -> dict[str, str]:
    """Copies of the golden files, and a budget of the plain one, in `tmp_path/in`."""
    directory = tmp_path / "in"
    directory.mkdir()
    shutil.copyfile(GOLDEN / "plain" / "dirty" / "model.pte", directory / "plain.pte")
    shutil.copyfile(EXTERNAL / "model.pte", directory / "ext.pte")
    shutil.copyfile(EXTERNAL / "_default_external_constant.ptd", directory / "ext.ptd")
    budget = directory / "budget.json"
    assert main(["budget", "write", str(directory / "plain.pte"), "-o", str(budget)]) == 0
    return {
        "plain": str(directory / "plain.pte"),
        "ext": str(directory / "ext.pte"),
        "ptd": str(directory / "ext.ptd"),
        "budget": str(budget),
    }


# Each output option: argv with `{t}` the target under test and `{o}` the command's other
# output (None: it has one output).
OPTIONS: dict[str, tuple[list[str], str | None]] = {
    "explain --html": (["explain", "{plain}", "--html", "{t}", "--node-data", "{o}"], "o.json"),
    "explain --node-data": (
        ["explain", "{plain}", "--node-data", "{t}", "--html", "{o}"],
        "o.html",
    ),
    "budget write -o": (
        ["budget", "write", "{plain}", "-o", "{t}", "--benchmark-json", "{o}"],
        "o.json",
    ),
    "budget write --benchmark-json": (
        ["budget", "write", "{plain}", "-o", "{o}", "--benchmark-json", "{t}"],
        "o.json",
    ),
    "budget check --benchmark-json": (
        ["budget", "check", "{plain}", "--budget", "{budget}", "--benchmark-json", "{t}"],
        None,
    ),
    "prune -o": (["prune", "{ext}", "-o", "{t}", "--data", "{ptd}", "--ptd-out", "{o}"], "odir"),
    "prune --dedupe -o": (["prune", "--dedupe", "{plain}", "-o", "{t}"], None),
    "merge -o": (["merge", "{ext}", "--data", "{ptd}", "-o", "{t}", "--ptd-out", "{o}"], "o.ptd"),
    "merge --ptd-out": (
        ["merge", "{ext}", "--data", "{ptd}", "-o", "{o}", "--ptd-out", "{t}"],
        "o.pte",
    ),
    "split -o": (["split", "{plain}", "--method", "forward", "-o", "{t}"], None),
}


def _link_to_file(tmp: Path) -> str:
    (tmp / "real").write_text("old")
    (tmp / "t").symlink_to(tmp / "real")
    return str(tmp / "t")


def _link_to_nothing(tmp: Path) -> str:
    (tmp / "t").symlink_to(tmp / "nothing")
    return str(tmp / "t")


def _directory(tmp: Path) -> str:
    (tmp / "t").mkdir()
    return str(tmp / "t")


def _fifo(tmp: Path) -> str:
    os.mkfifo(tmp / "t")
    return str(tmp / "t")


def _link_to_device(tmp: Path) -> str:
    (tmp / "t").symlink_to(os.devnull)
    return str(tmp / "t")


def _parent_is_a_file(tmp: Path) -> str:
    (tmp / "file").write_text("")
    return str(tmp / "file" / "t")


# Each refused kind of target: how to make it (in `tmp`) and what it must still be after.
REFUSED: dict[str, tuple[Callable[[Path], str], Callable[[Path], bool]]] = {
    "link to nothing": (_link_to_nothing, lambda tmp: os.path.islink(tmp / "t")),
    "directory": (_directory, lambda tmp: not os.listdir(tmp / "t")),
    "fifo": (_fifo, lambda tmp: stat.S_ISFIFO(os.lstat(tmp / "t").st_mode)),
    "link to a device": (_link_to_device, lambda tmp: os.readlink(tmp / "t") == os.devnull),
    "missing parent": (
        lambda tmp: str(tmp / "no" / "such" / "t"),
        lambda tmp: not (tmp / "no").exists(),
    ),
    "parent is a file": (_parent_is_a_file, lambda tmp: (tmp / "file").read_text() == ""),
    "empty path": (lambda tmp: "", lambda tmp: True),
}


def _argv(option: str, values: dict[str, str]) -> list[str]:
    return [a.format(**values) for a in OPTIONS[option][0]]


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _refused(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("emitter-filter: "), err
    return err


@pytest.mark.parametrize("kind", REFUSED)
@pytest.mark.parametrize("option", OPTIONS)
def test_a_target_that_cannot_be_written_refuses_every_output(tmp_path, capsys, option, kind):
    values = _inputs(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    make, unchanged = REFUSED[kind]
    values["t"] = make(out)
    values["o"] = str(out / (OPTIONS[option][1] or "unused"))
    before = _files(tmp_path)
    _refused(capsys, _argv(option, values))
    assert unchanged(out)
    assert _files(tmp_path) == before  # nor the other output, nor a temporary file


@pytest.mark.parametrize("option", OPTIONS)
def test_a_link_to_a_regular_file_is_written_through_and_stays_a_link(tmp_path, capsys, option):
    values = _inputs(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    values["t"] = _link_to_file(out)
    values["o"] = str(out / (OPTIONS[option][1] or "unused"))
    assert main(_argv(option, values)) == 0, capsys.readouterr().err
    assert os.readlink(out / "t") == str(out / "real")
    assert (out / "real").read_bytes() != b"old"
    assert not [p for p in _files(tmp_path) if p.endswith(".tmp")]


@pytest.mark.parametrize("option", OPTIONS)
def test_an_input_as_the_output_is_refused_and_left_as_it_was(tmp_path, capsys, option):
    values = _inputs(tmp_path)
    source = (
        "{budget}" if "check" in option else "{ext}" if "{ext}" in OPTIONS[option][0] else "{plain}"
    )
    values["t"] = source.format(**values)
    values["o"] = str(tmp_path / (OPTIONS[option][1] or "unused"))
    before = {p: Path(p).read_bytes() for p in values.values() if os.path.isfile(p)}
    err = _refused(capsys, _argv(option, values))
    assert values["t"] in err
    assert {p: Path(p).read_bytes() for p in before} == before
    assert not (tmp_path / (OPTIONS[option][1] or "unused")).exists()


TWO_OUTPUTS = [o for o, (_, other) in OPTIONS.items() if other and other != "odir"]


@pytest.mark.parametrize("through_a_link", [False, True], ids=["same path", "link to it"])
@pytest.mark.parametrize("option", TWO_OUTPUTS)
def test_two_outputs_of_one_command_on_one_file_are_refused(
    tmp_path, capsys, option, through_a_link
):
    values = _inputs(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    values["o"] = str(out / "x")
    if through_a_link:
        (out / "x").write_text("old")
        (out / "t").symlink_to(out / "x")
        values["t"] = str(out / "t")
    else:
        values["t"] = values["o"]
    err = _refused(capsys, _argv(option, values))
    assert "same file" in err
    assert _files(out) == (["t", "x"] if through_a_link else [])
    assert not through_a_link or (out / "x").read_text() == "old"


DIRECTORY_OPTIONS = {
    "prune --ptd-out": (
        ["prune", "{ext}", "-o", "{o}", "--data", "{ptd}", "--ptd-out", "{t}"],
        "ext.ptd",
    ),
    "share --out": (["share", "{plain}", "{ext}", "--out", "{t}"], "plain.pte"),
}


@pytest.mark.parametrize("kind", ["a file in it a directory", "fifo", "parent is a file"])
@pytest.mark.parametrize("option", DIRECTORY_OPTIONS)
def test_a_directory_output_that_cannot_be_written_is_refused(tmp_path, capsys, option, kind):
    values = _inputs(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    argv, inside = DIRECTORY_OPTIONS[option]
    if kind == "a file in it a directory":
        values["t"] = str(out / "dir")
        os.makedirs(out / "dir" / inside)
    else:
        values["t"] = _fifo(out) if kind == "fifo" else _parent_is_a_file(out)
    values["o"] = str(out / "p.pte")
    before = _files(tmp_path)
    _refused(capsys, [a.format(**values) for a in argv])
    assert _files(tmp_path) == before


def test_prune_and_share_create_their_output_directories(tmp_path, capsys):
    values = _inputs(tmp_path)
    deep = tmp_path / "a" / "b"
    assert (
        main(
            [
                "prune",
                values["ext"],
                "-o",
                str(tmp_path / "p.pte"),
                "--data",
                values["ptd"],
                "--ptd-out",
                str(deep / "ptd"),
            ]
        )
        == 0
    )
    assert (deep / "ptd" / "ext.ptd").is_file()
    assert main(["share", values["plain"], values["ext"], "--out", str(deep / "shared")]) == 0
    assert (deep / "shared" / "plain.pte").is_file()
    capsys.readouterr()


def _full_disk_on(name: str):
    """os.write and os.pwrite raising ENOSPC on files whose name contains `name`."""
    real_write, real_pwrite = os.write, os.pwrite

    def full(fd: int) -> bool:
        return name in os.readlink(f"/proc/self/fd/{fd}")

    def write(fd, data):
        if full(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    def pwrite(fd, data, offset):
        if full(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_pwrite(fd, data, offset)

    return write, pwrite


@pytest.mark.parametrize(
    ("option", "failing"),
    [
        ("explain --html", "o.json"),
        ("explain --node-data", "t"),
        ("budget write -o", "o.json"),
        ("budget write --benchmark-json", "o.json"),
        ("merge -o", "o.ptd"),
        ("merge --ptd-out", "o.pte"),
        ("prune -o", "ext.ptd"),
    ],
)
def test_a_full_disk_names_the_file_that_failed_and_writes_nothing(
    tmp_path, capsys, monkeypatch, option, failing
):
    values = _inputs(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    values["t"] = str(out / "t")
    values["o"] = str(out / OPTIONS[option][1])
    write, pwrite = _full_disk_on(f".{failing}.")  # its temporary file: .NAME.XXXX.tmp
    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "pwrite", pwrite)
    # No in-kernel copy: every byte goes through pwrite.
    monkeypatch.delattr(os, "copy_file_range", raising=False)
    err = _refused(capsys, _argv(option, values))
    path = next(
        p
        for p in (values["o"], values["t"], str(out / "odir" / "ext.ptd"))
        if os.path.basename(p) == failing
    )
    assert err.startswith(f"emitter-filter: {path}: cannot write: No space left on device"), err
    assert _files(out) == []
