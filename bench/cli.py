"""`python -m bench`: run the benchmark suite, then write the JSON, the dashboard and the table.

The suite runs as a pytest subprocess (pytest-benchmark), so this process stays
free of torch and ExecuTorch and the measurements are not disturbed by it.
pytest's progress goes to stderr; the summary table goes to stdout.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

from bench.compare import Thresholds, compare
from bench.history import ORDERS, format_steps, group_runs, load_run, write_history
from bench.page import write_page
from bench.results import (
    ResultsError,
    costliest_call,
    load_results,
    load_suite_report,
    summarize,
    summarize_dedupe,
)
from bench.table import COLUMNS, format_dedupe_table, format_table

__all__ = ["main"]

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_USAGE = 2
EXIT_SUITE_FAILED = 3

_BENCH_DIR = Path(__file__).resolve().parent
_REPO_ROOT = _BENCH_DIR.parent

_EPILOG = f"""\
what is measured, per model and in one run:
  to_executorch wall time with and without pruning (pytest-benchmark rounds),
  time spent in the filter and its share of the same to_executorch call,
  .pte + .ptd bytes before and after, the dead bytes emitter_filter reports,
  and peak RSS of a fresh process per model and mode (with and without pruning).

models (bench/zoo.py, bench/llama.py): the seed repro of ExecuTorch #9659 in
its two flows, an unused buffer, a parameter orphaned by a transform pass,
external constants (.ptd), a scaled family of 12 MiB .. 1 GiB of constants
with 25% dead, and ExecuTorch's llama example (stories15M shape, 8da4w,
XNNPACK, KV cache) through export_llama with EMITTER_FILTER_PRUNE=1.
--quick leaves out the models marked slow (384 MiB, 1 GiB and llama) and
measures peak RSS in fresh processes for two models only (unused_buffer and
scaled_128MiB, the smallest and the largest): a few minutes. The full run takes
about half an hour on 2 cores and ~6 GB of RAM.

ram (python bench/bench_ram.py --out DIR): what an app holds in RAM with two
programs as separate files, shared, merged or exported together, per backend
and loader; its DIR/ram.json is drawn as a table on DIR/dashboard.html.

history (--history RESULTS.json... --out DIR): per machine (CPU, core count,
architecture, OS) and model, a line over the runs for the bytes before pruning,
after pruning and after deduplication, the filter's and the deduplication's
share of to_executorch, and to_executorch pruned (and deduplicated) over
upstream; a table of the latest run against the first and the previous; and a
step marked where a byte figure or a share crossed the --compare limit below
against the previous run (up, or down: the same limit read the other way).

table columns:
{chr(10).join(f"  {name:<22}{meaning}" for name, meaning in COLUMNS)}

exit codes:
  {EXIT_OK}  done, and no regression against --compare
  {EXIT_REGRESSION}  --compare found a regression beyond the printed threshold
  {EXIT_USAGE}  usage error, a results file that cannot be read, or a package the suite
     needs is missing (it says which, and how to install it)
  {EXIT_SUITE_FAILED}  the benchmark suite itself failed (see its output on stderr)

examples:
  python -m bench --out bench-out/base --quick
  python -m bench --out bench-out/new --quick --compare bench-out/base/results.json
  python -m bench --results bench-out/new/results.json --compare bench-out/base/results.json
  python -m bench --suite-report report.json --out bench-out/suite
  python -m bench --history runs/*/results.json --out bench-out/history
"""


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=textwrap.fill(
            "Benchmark emitter_filter: what pruning unreachable constants saves in "
            ".pte/.ptd bytes and what it costs in to_executorch time and memory. "
            "Writes DIR/results.json (pytest-benchmark JSON, byte figures in each "
            "benchmark's extra_info) and DIR/dashboard.html, and prints the table. "
            "--history draws DIR/history.html from the results of several commits.",
            width=79,
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="output directory (created); required unless --results is given",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="leave out the slow models (384 MiB, 1 GiB, llama), and measure peak RSS "
        "for two models only: a few minutes",
    )
    parser.add_argument(
        "-k",
        dest="keyword",
        metavar="EXPR",
        help="only benchmarks whose id matches this pytest -k expression",
    )
    parser.add_argument(
        "--results",
        type=Path,
        metavar="RESULTS.json",
        help="do not run the suite: summarize (and --compare) this results file",
    )
    parser.add_argument(
        "--suite-report",
        type=Path,
        metavar="REPORT.json",
        help="do not run the suite: draw DIR/suite.html from a report the "
        "pytest plugin wrote (--emitter-filter-report); needs --out",
    )
    parser.add_argument(
        "--history",
        type=Path,
        nargs="+",
        metavar="RESULTS.json",
        help="do not run the suite: draw DIR/history.html from the runs of "
        "several commits, steps past the thresholds below marked; needs --out",
    )
    parser.add_argument(
        "--order",
        choices=ORDERS,
        default="commit",
        help="--history: sort the runs by their commit's time (then the run's), "
        "by the run's time, or keep them as given (default %(default)s)",
    )
    parser.add_argument(
        "--compare",
        type=Path,
        metavar="BASELINE.json",
        help="fail (exit 1) if a model's pruned bytes or filter share got worse "
        "than in BASELINE.json beyond the thresholds below",
    )
    defaults = Thresholds()
    parser.add_argument(
        "--bytes-growth",
        type=float,
        default=defaults.bytes_growth * 100,
        metavar="PCT",
        help="allowed growth of pruned bytes, in %% (default %(default)g)",
    )
    parser.add_argument(
        "--share-factor",
        type=float,
        default=defaults.share_factor,
        help="allowed factor on the filter share (default %(default)g)",
    )
    parser.add_argument(
        "--share-slack",
        type=float,
        default=defaults.share_slack * 100,
        metavar="POINTS",
        help="plus this many percentage points (default %(default)g)",
    )
    parser.add_argument(
        "--share-min-seconds",
        type=float,
        default=defaults.share_min_seconds,
        metavar="S",
        help="judge the share only where the baseline's "
        "to_executorch took at least S seconds (default %(default)g)",
    )
    parser.add_argument(
        "--no-workers",
        action="store_true",
        help="skip the fresh-process memory measurement (faster, no RSS figures)",
    )
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG")
    return parser


def _pytest_command(
    options: argparse.Namespace, results_path: Path, argv: Sequence[str]
) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "pytest",
        str(_BENCH_DIR / "bench_models.py"),
        "--rootdir",
        str(_REPO_ROOT),
        "-p",
        "no:cacheprovider",  # keep .pytest_cache out of the work tree
        # Not the test suite's addopts (pyproject.toml): its `-n auto` would spread the
        # benchmarks over workers, where pytest-benchmark times nothing.
        "-o",
        "addopts=",
        "-o",
        "python_files=bench_*.py",  # bench files are invisible to a plain `pytest`
        "-m",
        "not slow" if options.quick else "slow or not slow",
        "-v",
        "-o",
        "log_cli=true",
        "--log-cli-level=INFO",
        "--benchmark-json",
        str(results_path),
        "--benchmark-columns=min,median,max,rounds",
        "--benchmark-group-by=group",
        "--bench-workdir",
        str(options.out / "work"),
        "--bench-command",
        shlex.join(["python", "-m", "bench", *argv]),
    ]
    if options.keyword:
        command += ["-k", options.keyword]
    if options.no_workers:
        command.append("--bench-no-workers")
    elif options.quick:
        command.append("--bench-quick")
    return command


# What the suite imports, by module, with the distribution that provides it.
_SUITE_NEEDS = {
    "pytest": "pytest",
    "pytest_benchmark": "pytest-benchmark",
    "matplotlib": "matplotlib",
    "torch": "torch",
    "executorch": "executorch",
}


def _install_command() -> str:
    """The bench extra's install into this Python (a bare `pip` may be another's)."""
    checkout = Path(__file__).resolve().parents[1]
    return (
        f"{sys.executable} -m pip install -e '{checkout}[bench]' "
        f"-c {checkout / 'constraints' / 'executorch-1.5.1.txt'}"
    )


def _missing_distributions() -> list[str]:
    return [
        dist for module, dist in _SUITE_NEEDS.items() if importlib.util.find_spec(module) is None
    ]


def _run_suite(options: argparse.Namespace, argv: Sequence[str]) -> Path | None:
    options.out.mkdir(parents=True, exist_ok=True)
    results_path = options.out / "results.json"
    command = _pytest_command(options, results_path, argv)
    logger.info("running: %s", " ".join(command))
    # Started from a pytest-xdist worker (the README's test runs this command), the suite
    # would inherit the worker's variables, and pytest-benchmark, taking itself for a
    # worker, would time nothing.
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("PYTEST_XDIST_") and name != "PYTEST_CURRENT_TEST"
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO_ROOT), env.get("PYTHONPATH")]))
    # pytest's report is progress, not data: it goes to stderr with the logs.
    completed = subprocess.run(command, cwd=_REPO_ROOT, env=env, stdout=sys.stderr, check=False)
    if completed.returncode != 0:
        logger.error("the benchmark suite failed (pytest exit %d)", completed.returncode)
        return None
    return results_path


def _draw_suite_report(report_path: Path, out: Path) -> int:
    from bench.dashboard import render_suite_dashboard

    try:
        report = load_suite_report(report_path)
        out.mkdir(parents=True, exist_ok=True)
        page = out / "suite.html"
        write_page(page, render_suite_dashboard(report))
    except (ResultsError, OSError) as error:
        print(f"bench: {error}", file=sys.stderr)
        return EXIT_USAGE
    print(f"wrote {page} ({len(report['programs'])} programs)", file=sys.stderr)
    return EXIT_OK


def _draw_history(paths: Sequence[Path], out: Path, order: str, thresholds: Thresholds) -> int:
    try:
        histories = group_runs([load_run(path) for path in paths], thresholds, order)
        out.mkdir(parents=True, exist_ok=True)
        page = out / "history.html"
        write_history(page, histories)
    except (ResultsError, OSError) as error:
        print(f"bench: {error}", file=sys.stderr)
        return EXIT_USAGE
    print(f"threshold: {thresholds.describe()}")
    print(format_steps(histories))
    print(f"wrote {page} ({len(paths)} runs, {len(histories)} machines)", file=sys.stderr)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit code instead of exiting."""
    parser = _build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        options = parser.parse_args(argv)
        if options.suite_report is not None and (
            options.out is None
            or options.results
            or options.compare
            or options.quick
            or options.keyword
        ):
            parser.error("--suite-report takes --out DIR and nothing else")
        if options.history is not None and (
            options.out is None
            or options.results
            or options.compare
            or options.quick
            or options.keyword
            or options.suite_report
        ):
            parser.error("--history takes --out DIR, --order and the thresholds, nothing else")
        if options.out is None and options.results is None:
            parser.error("give --out DIR (to run the suite) or --results RESULTS.json")
        if options.results is not None and (options.quick or options.keyword):
            parser.error("--quick and -k select what to run; --results runs nothing")
    except SystemExit as exit_:
        return EXIT_USAGE if exit_.code else EXIT_OK
    logging.basicConfig(
        level=logging.DEBUG if options.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    thresholds = Thresholds(
        bytes_growth=options.bytes_growth / 100,
        share_factor=options.share_factor,
        share_slack=options.share_slack / 100,
        share_min_seconds=options.share_min_seconds,
    )

    if options.suite_report is not None:
        return _draw_suite_report(options.suite_report, options.out)
    if options.history is not None:
        return _draw_history(options.history, options.out, options.order, thresholds)
    results_path = options.results
    if results_path is None:
        missing = _missing_distributions()
        if missing:
            print(
                f"bench: the benchmarks need {', '.join(missing)}, not installed here: "
                f"{_install_command()}",
                file=sys.stderr,
            )
            return EXIT_USAGE
        results_path = _run_suite(options, argv)
        if results_path is None:
            return EXIT_SUITE_FAILED
    try:
        results = load_results(results_path)
        summaries = summarize(results)
        dedupe_summaries = summarize_dedupe(results)
        baseline = summarize(load_results(options.compare)) if options.compare else None
    except ResultsError as error:
        print(f"bench: {error}", file=sys.stderr)
        return EXIT_USAGE

    print(format_table(summaries, markdown=options.markdown))
    if dedupe_summaries:
        print()
        print(format_dedupe_table(dedupe_summaries, markdown=options.markdown))
    costliest = costliest_call(summaries, dedupe_summaries)
    if costliest is not None:
        print(f"\n{costliest.describe()}")
    if options.out is not None:
        from bench.bench_ram import load_ram
        from bench.dashboard import write_dashboard

        ram_path = options.out / "ram.json"  # bench/bench_ram.py --out DIR: its RAM table
        try:
            ram = load_ram(ram_path) if ram_path.exists() else None
            options.out.mkdir(parents=True, exist_ok=True)
            write_dashboard(
                options.out / "dashboard.html", results, summaries, dedupe_summaries, ram
            )
        except (OSError, ValueError) as error:
            print(f"bench: {error}", file=sys.stderr)
            return EXIT_USAGE
        print(f"\nwrote {results_path} and {options.out / 'dashboard.html'}", file=sys.stderr)
    if baseline is None:
        return EXIT_OK
    comparison = compare(baseline, summaries, thresholds)
    print()
    print(comparison.format())
    if comparison.regressed:
        print(textwrap.fill(f"bench: regression against {options.compare}"), file=sys.stderr)
        return EXIT_REGRESSION
    return EXIT_OK
