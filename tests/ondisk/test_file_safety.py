"""The file tools read and write regular files only, and leave no temporary file behind.

- An output target that is not a regular file (a FIFO, a directory, a link to
  a character device) is refused with exit 2 and left as it was.
- An input that is not a regular file (a directory, a FIFO), `--ptd` and
  `--names` ones included, is one line and exit 2, without blocking.
- SIGTERM during `prune` (and `prune --dedupe`) removes every temporary file
  and directory, as Ctrl-C does.

The input is the golden `plain` program (no torch needed).
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from emitter_filter.cli import main
from tests.files import GOLDEN

pytestmark = pytest.mark.filetools

MODES = {"prune": ["prune"], "dedupe": ["prune", "--dedupe"]}
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def good(tmp_path) -> Path:
    path = tmp_path / "in" / "good.pte"
    path.parent.mkdir()
    shutil.copyfile(GOLDEN / "plain" / "dirty" / "model.pte", path)
    return path


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = main([*map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def _entries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.mark.parametrize("mode", MODES)
def test_a_fifo_as_output_is_refused_and_stays_a_fifo(good, tmp_path, capsys, mode):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    code, out, err = _run(capsys, *MODES[mode], good, "-o", fifo)
    assert code == 2
    assert err.splitlines() == [
        f"emitter-filter: {fifo}: cannot write: a FIFO, not a regular file; "
        "it is never replaced (remove it or choose another output)"
    ]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert _entries(tmp_path) == ["in", "out.fifo"]  # no temporary file or directory left


@pytest.mark.parametrize("mode", MODES)
def test_a_link_to_a_character_device_is_refused_and_stays_a_link(good, tmp_path, capsys, mode):
    # The link, not the device, is what a wrong rename would replace: the device is safe.
    link = tmp_path / "null.pte"
    link.symlink_to(os.devnull)
    code, out, err = _run(capsys, *MODES[mode], good, "-o", link)
    assert code == 2
    assert "a character device, not a regular file" in err
    assert os.readlink(link) == os.devnull
    assert _entries(tmp_path) == ["in", "null.pte"]


@pytest.mark.parametrize("mode", MODES)
def test_a_directory_as_output_is_refused_and_left_empty(good, tmp_path, capsys, mode):
    directory = tmp_path / "out"
    directory.mkdir()
    code, out, err = _run(capsys, *MODES[mode], good, "-o", directory)
    assert code == 2
    assert err.splitlines() == [
        f"emitter-filter: {directory}: cannot write: a directory, not a regular file; "
        "it is never replaced (remove it or choose another output)"
    ]
    assert _entries(directory) == [] and _entries(tmp_path) == ["in", "out"]


def test_a_link_to_a_regular_file_is_written_through_and_stays_a_link(good, tmp_path, capsys):
    real = tmp_path / "real.pte"
    real.write_bytes(b"old")
    link = tmp_path / "link.pte"
    link.symlink_to(real)
    assert _run(capsys, "prune", good, "-o", link)[0] == 0
    assert os.readlink(link) == str(real)
    assert main(["audit", str(real), "--max-dead-bytes", "0"]) == 0
    assert _entries(tmp_path) == ["in", "link.pte", "real.pte"]


def test_a_link_to_nothing_is_refused(good, tmp_path, capsys):
    link = tmp_path / "dangling.pte"
    link.symlink_to(tmp_path / "missing.pte")
    code, out, err = _run(capsys, "prune", good, "-o", link)
    assert code == 2
    assert "which does not exist" in err
    assert _entries(tmp_path) == ["dangling.pte", "in"]


INPUT_COMMANDS = {
    "audit": lambda src, out: ["audit", src],
    "prune": lambda src, out: ["prune", src, "-o", out],
    "dedupe": lambda src, out: ["prune", "--dedupe", src, "-o", out],
    "ptd": lambda src, out: ["audit", GOLDEN / "external" / "dirty" / "model.pte", "--data", src],
    "names": lambda src, out: ["audit", GOLDEN / "plain" / "dirty" / "model.pte", "--names", src],
}


@pytest.mark.parametrize("command", INPUT_COMMANDS)
def test_a_directory_as_input_is_one_line_and_exit_2(tmp_path, capsys, command):
    directory = tmp_path / "model.pte"
    directory.mkdir()
    code, out, err = _run(capsys, *INPUT_COMMANDS[command](directory, tmp_path / "out.pte"))
    assert code == 2
    assert err.splitlines() == [
        f"emitter-filter: {directory}: cannot read: a directory, not a regular file"
    ]
    assert _entries(tmp_path) == ["model.pte"]


@pytest.mark.parametrize("command", INPUT_COMMANDS)
def test_a_fifo_as_input_is_refused_without_blocking(tmp_path, command):
    fifo = tmp_path / "model.pte"
    os.mkfifo(fifo)
    argv = INPUT_COMMANDS[command](fifo, tmp_path / "out.pte")
    # A subprocess, so that a read that blocks fails the test instead of hanging it.
    result = subprocess.run(
        [sys.executable, "-m", "emitter_filter", *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=20,
        cwd=REPO,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"emitter-filter: {fifo}: cannot read: a FIFO, not a regular file"
    ]
    assert _entries(tmp_path) == ["model.pte"]


# Runs the command line with its Nth output write blocked, and says so in a marker file.
BLOCKED_WRITE = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from emitter_filter import cli
    from emitter_filter.ondisk.write import output

    marker, blocked = Path(sys.argv[1]), int(sys.argv[2])
    write, calls = output.write_operations, []

    def slow_write(writer, *args):
        calls.append(writer.fd)
        if len(calls) == blocked:
            writer.write(b"partial")
            marker.write_text("writing")
            time.sleep(120)
        return write(writer, *args)

    output.write_operations = slow_write
    sys.exit(cli.main(sys.argv[3:]))
""")


@pytest.mark.parametrize(
    ("mode", "blocked"),
    [("prune", 1), ("dedupe", 1)],
    ids=["prune", "prune-dedupe"],
)
def test_sigterm_while_writing_leaves_no_temporary_file(good, tmp_path, mode, blocked):
    out = tmp_path / "out"
    out.mkdir()
    marker = tmp_path / "writing"
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            BLOCKED_WRITE,
            str(marker),
            str(blocked),
            *MODES[mode],
            str(good),
            "-o",
            str(out / "model.pte"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the write never started"
            time.sleep(0.05)
        assert _entries(out) != []  # the temporary file (or directory) being written
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert _entries(out) == []
    assert process.returncode == 128 + signal.SIGTERM
    assert err.splitlines() == ["emitter-filter: terminated (SIGTERM); temporary files removed"]
