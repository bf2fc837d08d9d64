"""`bench/upstream_suites.py` without running ExecuTorch's suites: its reading of pytest's results."""

from __future__ import annotations

from bench.upstream_suites import Run, _differences, _read_junit

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="t" name="test_ok"/>
<testcase classname="t" name="test_gated"><failure message="emitter_filter: 1 of 1 programs">x</failure></testcase>
<testcase classname="t" name="test_broken"><failure message="AssertionError: no">x</failure></testcase>
<testcase classname="t" name="test_setup"><error message="fixture failed">x</error></testcase>
<testcase classname="t" name="test_skip"><skipped message="later">x</skipped></testcase>
</testsuite></testsuites>
"""


def test_outcomes_and_gated_tests_are_read_from_junit_xml(tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    outcomes, gated = _read_junit(path)
    assert outcomes == {
        "t::test_ok": "passed",
        "t::test_gated": "failed",
        "t::test_broken": "failed",
        "t::test_setup": "error",
        "t::test_skip": "skipped",
    }
    assert gated == ("t::test_gated",)


def _run(mode, outcomes):
    return Run("s.py", mode, outcomes, (), None, None, None, 0.0, 0)


def test_a_test_that_changes_outcome_under_pruning_is_a_difference():
    upstream = _run("upstream", {"a": "passed", "b": "passed"})
    same = _run("prune", {"a": "passed", "b": "passed"})
    assert _differences([upstream, same]) == []
    worse = _run("prune", {"a": "passed", "b": "failed"})
    assert _differences([upstream, worse]) == ["b: passed without pruning, failed with"]
    # The gate's failures are not differences: it fails tests on purpose.
    assert _differences([upstream, _run("gate", {"a": "failed", "b": "failed"})]) == []
