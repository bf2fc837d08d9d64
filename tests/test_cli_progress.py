"""The progress line of a long copy: on a terminal only, never for a small file, and gone
when the copy is done (a prune of 1 KB left `emitter-filter: 0/0 MiB` behind)."""

from __future__ import annotations

import io

import pytest

from emitter_filter.cli import common

pytestmark = pytest.mark.filetools


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _on_a_terminal(monkeypatch) -> _Terminal:
    """stderr a terminal (set in the test: pytest's capture sets it again after setup)."""
    stream = _Terminal()
    monkeypatch.setattr("sys.stderr", stream)
    return stream


def test_a_small_file_gets_no_progress_line(monkeypatch):
    terminal = _on_a_terminal(monkeypatch)
    show = common._progress_printer()
    for done in (0, 512, 1024):
        show(done, 1024)
    assert terminal.getvalue() == ""


def test_a_large_files_progress_line_is_cleared_when_the_copy_is_done(monkeypatch):
    terminal = _on_a_terminal(monkeypatch)
    total = 2 * common._PROGRESS_MIN_BYTES
    show = common._progress_printer()
    show(total // 2, total)
    assert terminal.getvalue().endswith(f"{total // 2 >> 20:,}/{total >> 20:,} MiB")
    show(total, total)
    assert terminal.getvalue().endswith("\r\x1b[K")  # back to the start of an empty line
    assert "\n" not in terminal.getvalue()


def test_no_progress_line_where_no_person_watches(monkeypatch):
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert common._progress_printer() is None
