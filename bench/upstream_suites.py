"""`python -m bench.upstream_suites`: ExecuTorch's own test files, run with the pytest plugin.

A suite nobody here wrote is the check that pruning keeps upstream behaviour:
each test file of the installed executorch wheel runs three times, one pytest
process each, one after the other:

- `upstream`: the plugin idle (no option): the counts to match;
- `prune`: `--emitter-filter-prune`: every program pruned; must give the same
  outcome for every test as `upstream`;
- `gate`: `--emitter-filter-max-dead-bytes 0`: every program audited unpruned;
  the tests it fails are the ones whose programs carry dead bytes.

The last two write the plugin's report (`--emitter-filter-report`), from which
the programs seen and the dead (or dropped) bytes are counted. Slow (minutes):
not part of any test run.

Exit codes: 0 every `prune` run gave `upstream`'s outcomes; 1 some did not;
2 usage error or a test file missing from the installed wheel.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SUITES", "MODES", "main"]

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_DIFFERENT = 1
EXIT_USAGE = 2

#: The test files, relative to the executorch package.
SUITES = (
    "exir/emit/test/test_emit.py",
    "exir/_serialize/test/test_serialize.py",
    "exir/program/test/test_program.py",
)

#: The plugin's options per mode; `report` adds `--emitter-filter-report`.
MODES = {
    "upstream": {"options": (), "report": False},
    "prune": {"options": ("--emitter-filter-prune",), "report": True},
    "gate": {"options": ("--emitter-filter-max-dead-bytes", "0"), "report": True},
}

_GATE_PREFIX = "emitter_filter:"


@dataclass(frozen=True)
class Run:
    """One test file run in one mode."""

    suite: str
    mode: str
    outcomes: dict[str, str]  # test id -> passed, failed, error, skipped
    gated: tuple[str, ...]  # tests the plugin's budget failed
    programs: int | None
    dead_bytes: int | None
    dropped_bytes: int | None
    seconds: float
    exit_code: int

    def count(self, outcome: str) -> int:
        return sum(1 for o in self.outcomes.values() if o == outcome)


def _executorch_root() -> Path:
    spec = importlib.util.find_spec("executorch")  # finds, does not import (no torch)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("executorch is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def _read_junit(path: Path) -> tuple[dict[str, str], tuple[str, ...]]:
    outcomes: dict[str, str] = {}
    gated = []
    for case in ElementTree.parse(path).iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        failure, error = case.find("failure"), case.find("error")
        if case.find("skipped") is not None:
            outcomes[name] = "skipped"
        elif failure is not None:
            outcomes[name] = "failed"
            if (failure.get("message") or "").startswith(_GATE_PREFIX):
                gated.append(name)
        elif error is not None:
            outcomes[name] = "error"
        else:
            outcomes[name] = "passed"
    return outcomes, tuple(gated)


def _run(root: Path, suite: str, mode: str, workdir: Path) -> Run:
    stem = f"{Path(suite).stem}.{mode}"
    junit, report = workdir / f"{stem}.junit.xml", workdir / f"{stem}.report.json"
    # pytest's output goes to {stem}.log there.
    command = [
        sys.executable,
        "-m",
        "pytest",
        str(root / suite),
        "-q",
        "-p",
        "no:cacheprovider",
        "--junitxml",
        str(junit),
        *MODES[mode]["options"],
    ]
    if MODES[mode]["report"]:
        command += ["--emitter-filter-report", str(report)]
    logger.info("running: %s", " ".join(command))
    started = time.perf_counter()
    # Run from the work directory: upstream tests may write files to the current one.
    with open(workdir / f"{stem}.log", "wb") as log:
        completed = subprocess.run(
            command, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, check=False
        )
    seconds = time.perf_counter() - started
    outcomes, gated = _read_junit(junit)
    programs = dead = dropped = None
    if MODES[mode]["report"]:
        records = json.loads(report.read_text())["programs"]
        programs = len(records)
        dead = sum(r["dead_bytes"] or 0 for r in records)
        if "--emitter-filter-prune" in MODES[mode]["options"]:
            dropped = sum(r["dropped_bytes"] or 0 for r in records)
    return Run(suite, mode, outcomes, gated, programs, dead, dropped, seconds, completed.returncode)


def _format(runs: Sequence[Run]) -> str:
    header = (
        f"{'suite':<16}{'mode':<10}{'passed':>7}{'failed':>7}{'errors':>7}"
        f"{'skipped':>8}{'programs':>9}{'dead B':>11}{'dropped B':>11}{'gated':>6}{'s':>7}"
    )
    lines = [header]
    for run in runs:

        def cell(value):
            return "-" if value is None else f"{value:,}"

        lines.append(
            f"{Path(run.suite).stem:<16}{run.mode:<10}{run.count('passed'):>7}"
            f"{run.count('failed'):>7}{run.count('error'):>7}{run.count('skipped'):>8}"
            f"{cell(run.programs):>9}{cell(run.dead_bytes):>11}{cell(run.dropped_bytes):>11}"
            f"{len(run.gated):>6}{run.seconds:>7.0f}"
        )
    return "\n".join(lines)


def _differences(runs: Sequence[Run]) -> list[str]:
    """Tests whose outcome under `prune` is not their outcome under `upstream`."""
    by_key = {(run.suite, run.mode): run for run in runs}
    found = []
    for (suite, mode), run in by_key.items():
        upstream = by_key.get((suite, "upstream"))
        if mode != "prune" or upstream is None:
            continue
        for test in sorted(upstream.outcomes.keys() | run.outcomes.keys()):
            before, after = upstream.outcomes.get(test), run.outcomes.get(test)
            if before != after:
                found.append(f"{test}: {before} without pruning, {after} with")
    return found


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.upstream_suites",
        description="Run ExecuTorch's own emit, serialize and program tests with the "
        "emitter_filter pytest plugin idle, forcing pruning, and gating at 0 dead bytes.",
    )
    parser.add_argument(
        "--suite",
        action="append",
        choices=SUITES,
        metavar="FILE",
        help=f"only this test file (repeatable; default all of {', '.join(SUITES)})",
    )
    parser.add_argument(
        "--mode",
        action="append",
        choices=tuple(MODES),
        help="only this mode (repeatable; default all, in order)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="keep the JUnit XML and plugin reports here (default: a temporary directory)",
    )
    parser.add_argument("--json", action="store_true", help="print the runs as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit code instead of exiting."""
    try:
        options = _build_parser().parse_args(argv)
    except SystemExit as exit_:
        return EXIT_USAGE if exit_.code else EXIT_OK
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    root = _executorch_root()
    suites = options.suite or SUITES
    missing = [suite for suite in suites if not (root / suite).is_file()]
    if missing:
        print(
            f"upstream_suites: not in the installed wheel ({root}): {', '.join(missing)}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    modes = [mode for mode in MODES if mode in (options.mode or MODES)]
    with tempfile.TemporaryDirectory(prefix="upstream-suites-") as scratch:
        workdir = options.out or Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        runs = [_run(root, suite, mode, workdir) for suite in suites for mode in modes]
    differences = _differences(runs)
    if options.json:
        print(
            json.dumps(
                [
                    {
                        "suite": r.suite,
                        "mode": r.mode,
                        "passed": r.count("passed"),
                        "failed": r.count("failed"),
                        "errors": r.count("error"),
                        "skipped": r.count("skipped"),
                        "programs": r.programs,
                        "dead_bytes": r.dead_bytes,
                        "dropped_bytes": r.dropped_bytes,
                        "gated": list(r.gated),
                        "seconds": r.seconds,
                    }
                    for r in runs
                ],
                indent=2,
            )
        )
    else:
        print(_format(runs))
    for line in differences:
        print(f"upstream_suites: {line}", file=sys.stderr)
    return EXIT_DIFFERENT if differences else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
