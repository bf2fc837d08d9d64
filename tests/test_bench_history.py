"""`python -m bench --history` on fabricated runs: ordering, machines, and the steps it marks.

No model is built and no browser is needed: the page itself is checked in a real
browser by `test_bench_pages.py`.
"""

from __future__ import annotations

import html
import sys
from pathlib import Path

import pytest

# `bench/` is a top-level package of the repository, not part of the installed wheel.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.cli import EXIT_OK, EXIT_USAGE, main  # noqa: E402
from bench.compare import Thresholds  # noqa: E402
from bench.history import FIGURES, group_runs, load_run, render_history  # noqa: E402
from tests import bench_runs  # noqa: E402

_TIED = "tied_embedding_32000x288"


def _steps(history) -> set[tuple[str, str, int, str]]:
    return {
        (model, figure.key, step.index, step.direction)
        for model in history.models
        for figure in FIGURES
        for step in history.steps(model, figure)
    }


def _histories(paths, order="commit", thresholds=None):
    thresholds = Thresholds() if thresholds is None else thresholds
    return group_runs([load_run(p) for p in paths], thresholds, order)


def test_bytes_that_grow_past_the_compare_limit_are_a_step_at_that_run(tmp_path):
    (history,) = _histories(bench_runs.three_commits(tmp_path))
    assert [run.label for run in history.runs] == ["1111111", "2222222", "3333333"]
    assert _steps(history) == {
        (_TIED, "bytes_before", 2, "up"),
        (_TIED, "bytes_after", 2, "up"),
        (_TIED, "bytes_deduped", 2, "up"),
    }


def test_bytes_within_the_limit_are_no_step(tmp_path):
    paths = bench_runs.three_commits(tmp_path)
    # +2% is past the default 0.5% and within an allowance of 3%.
    (history,) = _histories(paths, thresholds=Thresholds(bytes_growth=0.03))
    assert _steps(history) == set()


def _share_run(day: int, small_filter: float, big_filter: float) -> dict:
    return bench_runs.results(
        [
            bench_runs.benchmark("small", "upstream", total=10_000, seconds=0.1),
            bench_runs.benchmark(
                "small", "pruned", total=9_000, seconds=0.1, filter_seconds=small_filter
            ),
            bench_runs.benchmark("big", "upstream", total=10 << 20, seconds=2.0),
            bench_runs.benchmark(
                "big", "pruned", total=8 << 20, seconds=2.0, filter_seconds=big_filter
            ),
        ],
        commit=f"{day}" * 40,
        commit_time=f"2026-11-2{day}T00:00:00+00:00",
    )


def test_a_share_is_judged_as_compare_judges_it_both_ways(tmp_path):
    runs = [
        _share_run(1, 0.001, 0.002),  # small 1%, big 0.1%
        _share_run(2, 0.004, 0.008),  # small 4% (a 0.1 s call: not judged), big 0.4%: up
        _share_run(3, 0.004, 0.002),  # big back to 0.1%: 0.4% > 0.1% x 1.5 + 0.2: down
    ]
    paths = [bench_runs.write(tmp_path / f"{i}.json", run) for i, run in enumerate(runs)]
    (history,) = _histories(paths)
    assert _steps(history) == {("big", "filter_share", 1, "up"), ("big", "filter_share", 2, "down")}


def test_runs_of_another_machine_are_shown_apart(tmp_path):
    paths = bench_runs.three_commits(tmp_path)
    # Between the first two commits, another machine's run with twice the bytes.
    paths.append(
        bench_runs.write(
            tmp_path / "other" / "results.json",
            bench_runs.quick_run(
                grow=2.0, commit="4" * 40, commit_time="2026-11-21T12:00:00+00:00", cpu="Other CPU"
            ),
        )
    )
    first, other = _histories(paths)
    assert [run.label for run in first.runs] == ["1111111", "2222222", "3333333"]
    assert [run.label for run in other.runs] == ["4444444"]
    assert _steps(first) == {
        (_TIED, key, 2, "up") for key in ("bytes_before", "bytes_after", "bytes_deduped")
    }
    assert _steps(other) == set()
    page = render_history([first, other])
    assert page.count('<section class="machine"') == 2
    assert "Machine 2: Other CPU, 2 CPUs, x86_64, Linux" in page


@pytest.mark.parametrize(
    ("order", "labels"),
    [
        ("commit", ["1111111", "2222222", "3333333"]),
        ("run", ["1111111", "2222222", "3333333"]),
        ("given", ["3333333", "2222222", "1111111"]),
    ],
    ids=["commit", "run", "given"],
)
def test_runs_are_sorted_by_commit_time_unless_asked_otherwise(tmp_path, order, labels):
    paths = list(reversed(bench_runs.three_commits(tmp_path)))
    (history,) = _histories(paths, order)
    assert [run.label for run in history.runs] == labels


def test_cli_history_writes_the_page_and_prints_each_step(tmp_path, capsys):
    paths = bench_runs.three_commits(tmp_path)
    out = tmp_path / "out"
    assert main(["--history", *map(str, paths), "--out", str(out)]) == EXIT_OK
    printed = capsys.readouterr().out
    assert printed.startswith("threshold: a regression is pruned .pte+.ptd bytes")
    assert (
        f"machine 1: up: {_TIED} after pruning: 73,730,176 B at 2222222 -> 75,204,779 B at "
        "3333333; 3333333 is past the limit 74,098,827 B of 2222222"
    ) in printed
    page = (out / "history.html").read_text()
    assert "steps past the --compare limits (3 up, 0 down)" in page
    assert html.escape(Thresholds().describe()) in page, "the rule is stated on the page"


@pytest.mark.parametrize(
    "extra",
    [[], ["--out", "OUT", "--quick"], ["--out", "OUT", "--compare", "base.json"]],
    ids=["no-out", "with-quick", "with-compare"],
)
def test_cli_history_takes_out_and_nothing_that_runs_or_compares(tmp_path, extra):
    paths = bench_runs.three_commits(tmp_path)
    extra = [str(tmp_path / "out") if arg == "OUT" else arg for arg in extra]
    assert main(["--history", *map(str, paths), *extra]) == EXIT_USAGE


def test_cli_history_names_an_unreadable_run(tmp_path, capsys):
    paths = bench_runs.three_commits(tmp_path)
    paths[1].write_text('{"benchmarks": [{"extra_info": {"model": "m", "mode": "pruned"}}]}')
    assert main(["--history", *map(str, paths), "--out", str(tmp_path / "out")]) == EXIT_USAGE
    assert capsys.readouterr().err.strip() == f"bench: {paths[1]}: model 'm': no upstream benchmark"
    assert not (tmp_path / "out" / "history.html").exists()


def test_cli_history_never_replaces_what_is_not_a_regular_file(tmp_path, capsys):
    paths = bench_runs.three_commits(tmp_path)
    out = tmp_path / "out"
    (out / "history.html").mkdir(parents=True)
    assert main(["--history", *map(str, paths), "--out", str(out)]) == EXIT_USAGE
    assert "exists and is not a regular file" in capsys.readouterr().err
    assert (out / "history.html").is_dir() and list(out.iterdir()) == [out / "history.html"]
