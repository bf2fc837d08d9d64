"""The pytest plugin's options at start-up and under pytest-xdist, on suites written here.

- `--emitter-filter-report` that cannot be written is a usage error before any
  test runs; one that stops being writable during the run is one line and a
  failed run, not a traceback.
- Under `-n 2` each worker gates its own tests and its records reach the
  controller's report.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.test_pytest_plugin import DEAD_BYTES, SUITE, imported  # noqa: F401  (autouse)

pytest_plugins = ["pytester"]


@pytest.fixture
def suite(pytester):
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def _run(pytester, *args):
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)


def _unwritable(kind: str, root: Path) -> Path:
    if kind == "directory":
        (root / "report").mkdir()
        return root / "report"
    if kind == "read-only directory":
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only directory")
        (root / "ro").mkdir(mode=0o500)
        return root / "ro" / "report.json"
    if kind == "proc":
        if not os.path.isdir("/proc/self"):
            pytest.skip("no /proc")
        return Path("/proc/self/report.json")
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["directory", "read-only directory", "proc"])
def test_an_unwritable_report_is_a_usage_error_before_any_test_runs(suite, kind):
    path = _unwritable(kind, suite.path)
    result = _run(suite, "-k", "dirty", "--emitter-filter-report", str(path))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--emitter-filter-report {path}: cannot write: *"])
    assert not (suite.path / "dirty.pte").exists()  # the test never ran
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_report_that_can_no_longer_be_written_fails_the_run_in_one_line(suite):
    suite.makepyfile(
        test_removes="""
import shutil
from pathlib import Path

def test_removes():
    shutil.rmtree(Path("out"), ignore_errors=True)
    Path("out").write_text("now a file")
"""
    )
    path = suite.path / "out" / "report.json"
    result = _run(suite, "test_removes.py", "--emitter-filter-report", str(path))
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
    result.stdout.fnmatch_lines([f"emitter_filter: report not written: {path}: cannot write: *"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_under_xdist_the_workers_records_reach_the_report(suite):
    pytest.importorskip("xdist")
    path = suite.path / "report.json"
    # Fresh processes: the controller and two workers, each with two tiny exports at most.
    result = suite.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-p",
        "xdist",
        "-n",
        "2",
        "-k",
        "dirty or clean",
        "--emitter-filter-max-dead-bytes",
        "0",
        "--emitter-filter-report",
        str(path),
    )
    result.assert_outcomes(passed=1, failed=1)  # each worker gates its own tests
    records = {r["test"].rsplit("::", 1)[1]: r for r in json.loads(path.read_text())["programs"]}
    assert sorted(records) == ["test_clean", "test_dirty"]
    assert (records["test_dirty"]["dead_bytes"], records["test_clean"]["dead_bytes"]) == (
        DEAD_BYTES,
        0,
    )
    result.stdout.fnmatch_lines([f"emitter_filter: 2 programs audited, {DEAD_BYTES} dead bytes*"])
