"""The benchmark's reading side on a fabricated `results.json`: summary, compare, dashboard.

No model is built and nothing is timed: these run in about a second and check
that a regression makes `python -m bench --compare` fail, and that the
dashboard is drawn from the JSON it is given.
"""

from __future__ import annotations

import copy
import json
import os
import re
import sys
from pathlib import Path

import pytest

# `bench/` is a top-level package of the repository, not part of the installed wheel.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.cli import EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, main  # noqa: E402
from bench.compare import Thresholds, compare  # noqa: E402
from bench.results import ResultsError, summarize  # noqa: E402
from tests import bench_runs  # noqa: E402


def _results(
    *, pruned_bytes: int = 9_000, filter_seconds: float = 0.001, big_filter_seconds: float = 0.002
) -> dict:
    return bench_runs.results(
        [
            bench_runs.benchmark("small", "upstream", total=10_000, seconds=0.1),
            bench_runs.benchmark(
                "small", "pruned", total=pruned_bytes, seconds=0.1, filter_seconds=filter_seconds
            ),
            bench_runs.benchmark("big", "upstream", total=10 << 20, seconds=2.0),
            bench_runs.benchmark(
                "big", "pruned", total=8 << 20, seconds=2.0, filter_seconds=big_filter_seconds
            ),
        ]
    )


def _write(path: Path, results: dict) -> Path:
    return bench_runs.write(path, results)


def test_summary_pairs_modes_into_ratios_smallest_model_first():
    small, big = summarize(_results())
    assert (small.model, big.model) == ("small", "big")
    assert small.saved_bytes == 1_000
    assert small.filter_share == pytest.approx(0.01)
    assert big.time_ratio == pytest.approx(1.0)


def test_summary_names_a_model_with_one_mode_missing():
    results = _results()
    results["benchmarks"] = [
        b for b in results["benchmarks"] if b["name"] != "test_to_executorch[big-pruned]"
    ]
    with pytest.raises(ResultsError, match="'big': no pruned"):
        summarize(results)


@pytest.mark.parametrize(
    ("changes", "regressed"),
    [
        ({}, False),
        ({"pruned_bytes": 9_040}, False),  # +0.44%: inside the 0.5% allowance
        ({"pruned_bytes": 9_100}, True),  # +1.1%
        ({"big_filter_seconds": 0.006}, False),  # share 0.1% -> 0.3% <= 0.1% x 1.5 + 0.2 points
        ({"big_filter_seconds": 0.008}, True),  # share 0.1% -> 0.4%
        ({"filter_seconds": 0.004}, False),  # 1% -> 4%, but a 0.1 s call is not judged
    ],
    ids=["same", "bytes-within", "bytes-grew", "share-within", "share-grew", "share-too-fast"],
)
def test_compare_fails_only_beyond_the_threshold(changes, regressed):
    comparison = compare(summarize(_results()), summarize(_results(**changes)), Thresholds())
    assert comparison.regressed is regressed
    assert "threshold:" in comparison.format()


def test_cli_compare_exits_non_zero_on_a_regression(tmp_path, capsys):
    baseline = _write(tmp_path / "baseline.json", _results())
    same = _write(tmp_path / "same.json", copy.deepcopy(_results()))
    grown = _write(tmp_path / "grown.json", _results(pruned_bytes=12_000))

    assert main(["--results", str(same), "--compare", str(baseline)]) == EXIT_OK
    assert main(["--results", str(grown), "--compare", str(baseline)]) == EXIT_REGRESSION
    out = capsys.readouterr().out
    assert "REGRESSED" in out and "pruned bytes 12,000 > limit" in out


def test_cli_rejects_an_unreadable_results_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["--results", str(bad)]) == EXIT_USAGE


def test_dashboard_is_one_page_of_charts_drawn_from_the_json(tmp_path):
    pytest.importorskip("matplotlib")
    results = _write(tmp_path / "results.json", _results())
    assert main(["--results", str(results), "--out", str(tmp_path)]) == EXIT_OK
    page = (tmp_path / "dashboard.html").read_text()
    assert page.count("<svg") >= 3
    # Self-contained: nothing is fetched when the page opens.
    assert not re.search(r"<(script|link|img)\b[^>]*(src|href)=", page)
    assert "big" in page and "small" in page and "fabricated" in page


def _ram_report() -> dict:
    """A `ram.json` as bench/bench_ram.py writes it, with made-up figures."""
    from bench.bench_ram import RAM_SCHEMA

    row = {
        "backend": "xnnpack",
        "loader": "pybind",
        "weights_cache": True,
        "arrangement": "share",
        "processes": 1,
        "disk_bytes": 25 << 20,
        "anon_bytes": 3 << 20,
        "file_bytes": 5 << 20,
        "pss_bytes": 7 << 20,
        "peak_bytes": 11 << 20,
        "rss_bytes": 8 << 20,
    }
    return {
        "schema": RAM_SCHEMA,
        "machine": "fabricated, 2 cores",
        "repeat": 1,
        "versions": {"torch": "2.13.0", "executorch": "1.5.1"},
        "backbone_bytes": 24 << 20,
        "outputs_equal": {"xnnpack": True},
        "rows": [row],
    }


def test_the_dashboard_shows_the_ram_table_written_beside_the_results(tmp_path):
    pytest.importorskip("matplotlib")
    results = _write(tmp_path / "results.json", _results())
    (tmp_path / "ram.json").write_text(json.dumps(_ram_report()))
    assert main(["--results", str(results), "--out", str(tmp_path)]) == EXIT_OK
    page = (tmp_path / "dashboard.html").read_text()
    assert '<h2 id="ram">' in page and "fabricated, 2 cores" in page
    assert (
        "<td>xnnpack + weights cache</td><td>pybind</td><td>share</td><td>25.0</td>"
        "<td>8.0</td><td>3.0</td><td>5.0</td><td>7.0</td><td>11.0</td>"
    ) in page
    (tmp_path / "ram.json").write_text("{}")
    assert main(["--results", str(results), "--out", str(tmp_path)]) == EXIT_USAGE


def test_running_the_suite_without_the_bench_extra_says_what_to_install(
    tmp_path, capsys, monkeypatch
):
    import bench.cli

    monkeypatch.setattr(
        bench.cli, "_SUITE_NEEDS", {"pytest": "pytest", "a_module_nobody_has": "pytest-benchmark"}
    )
    assert main(["--out", str(tmp_path / "out"), "--quick"]) == EXIT_USAGE
    err = capsys.readouterr().err
    root = Path(__file__).resolve().parents[1]
    # This Python's pip: a bare `pip` may install into another one.
    assert err.strip() == (
        "bench: the benchmarks need pytest-benchmark, not installed here: "
        f"{sys.executable} -m pip install -e '{root}[bench]' "
        f"-c {root / 'constraints' / 'executorch-1.5.1.txt'}"
    )
    assert not (tmp_path / "out").exists()


def test_the_suite_started_from_an_xdist_worker_is_not_one(tmp_path, monkeypatch):
    """pytest-benchmark times nothing in a worker: the suite must not inherit its variables."""
    import subprocess

    import bench.cli

    seen = {}

    def run(command, env, **kwargs):
        seen.update(env)
        return subprocess.CompletedProcess(command, 1)

    monkeypatch.setattr(bench.cli.subprocess, "run", run)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    monkeypatch.setenv("PYTEST_ADDOPTS", "-x")
    options = bench.cli._build_parser().parse_args(["--out", str(tmp_path / "out"), "--quick"])
    assert bench.cli._run_suite(options, []) is None
    assert not [name for name in seen if name.startswith("PYTEST_XDIST_")]
    assert seen["PYTEST_ADDOPTS"] == "-x", "the user's own pytest options stay"
    assert seen["PYTHONPATH"].split(os.pathsep)[0] == str(Path(bench.cli.__file__).parents[1])


def _suite_report(tmp_path) -> Path:
    """A plugin report with two real records: the golden dirty and clean programs, audited."""
    from emitter_filter.ondisk.audit import audit_file
    from emitter_filter.pytest_plugin import REPORT_SCHEMA, ProgramRecord
    from tests.files import GOLDEN, saved

    records = []
    for case in ("plain", "clean"):
        pte, _ = saved(GOLDEN / case / "dirty")
        records.append(
            ProgramRecord(
                test=f"tests/test_export.py::test_{case}",
                methods=("forward",),
                exempt=False,
                pruned=False,
                file_bytes=pte.stat().st_size,
                audit=audit_file(pte),
                prune_report=None,
                serialize_seconds=0.01,
                audit_seconds=0.001,
                error=None,
            ).to_json()
        )
    path = tmp_path / "report.json"
    path.write_text(
        json.dumps(
            {"schema": REPORT_SCHEMA, "prune": False, "max_dead_bytes": None, "programs": records}
        )
    )
    return path


def test_the_suite_page_is_drawn_from_the_plugins_report(tmp_path):
    assert main(["--suite-report", str(_suite_report(tmp_path)), "--out", str(tmp_path)]) == EXIT_OK
    page = (tmp_path / "suite.html").read_text()
    assert "2 programs" in page and "148 dead" in page
    assert "tests/test_export.py::test_plain" in page and "<svg" in page
    assert "<td>128 B constant[3]</td>" in page, "the largest dead entry is listed"


def test_a_file_that_is_no_plugin_report_is_a_usage_error(tmp_path, capsys):
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"schema": "emitter-filter-audit/2"}))
    assert main(["--suite-report", str(path), "--out", str(tmp_path)]) == EXIT_USAGE
    assert "not a emitter-filter-pytest/1 report" in capsys.readouterr().err


# The scripts run as `python bench/NAME.py` or `python -m bench.NAME` (bench_models is the suite).
SCRIPTS = sorted(
    p.stem
    for p in (Path(__file__).resolve().parents[1] / "bench").glob("*.py")
    if 'if __name__ == "__main__":' in p.read_text()
)


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_bench_script_imports_and_explains_itself(script):
    """A script no test imports broke once at import after a rename: each answers --help."""
    import subprocess

    result = subprocess.run(
        [sys.executable, "-m", f"bench.{script}", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout


@pytest.mark.parametrize("script", ["bench_files", "bench_explain", "bench_share", "bench_merge"])
def test_a_missing_dir_is_one_line_and_exit_2(script, tmp_path):
    import subprocess

    missing = tmp_path / "no" / "such"
    result = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve().parents[1] / "bench" / f"{script}.py"),
            "--dir",
            str(missing),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stderr == (
        f"{script}.py: --dir {missing}: not a directory (see {script}.py --help)\n"
    )
    assert not missing.parent.exists()
