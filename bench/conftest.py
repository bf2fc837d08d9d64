"""pytest options of the benchmark suite; `python -m bench` passes them for you.

The suite lives outside the default test run: the project's `testpaths` is
`tests/`, and the files here are named `bench_*.py`, which pytest only collects
with `-o python_files=bench_*.py`. Models that take minutes are marked `slow`,
so `-m "not slow"` is the quick subset.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

#: Loggers whose INFO records are the suite's progress; ExecuTorch's own INFO chatter is not.
_PROGRESS_LOGGERS = ("bench", "emitter_filter")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("emitter_filter bench")
    group.addoption(
        "--bench-workdir",
        type=Path,
        default=None,
        help="directory for worker JSON, logs and scratch files (default: a temporary one)",
    )
    group.addoption(
        "--bench-no-workers",
        action="store_true",
        help="skip the fresh-process measurement of peak memory",
    )
    group.addoption(
        "--bench-quick",
        action="store_true",
        help="the fresh-process measurement of peak memory for the zoo's quick_memory "
        "models only (`python -m bench --quick`)",
    )
    group.addoption(
        "--bench-command",
        default=None,
        help="the command that started the suite, recorded in results.json "
        "(default: this pytest command)",
    )


class _ProgressOnly(logging.Filter):
    """Lets WARNING and above through from everyone, INFO only from the suite's loggers."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        return record.name.split(".")[0] in _PROGRESS_LOGGERS


def pytest_configure(config: pytest.Config) -> None:
    # With `--log-cli-level=INFO` (as `python -m bench` runs it), show progress
    # lines without ExecuTorch's per-pass INFO logs.
    logging_plugin = config.pluginmanager.get_plugin("logging-plugin")
    handler = getattr(logging_plugin, "log_cli_handler", None)
    if handler is not None:
        handler.addFilter(_ProgressOnly())


@pytest.fixture(scope="session")
def bench_workdir(request: pytest.FixtureRequest, tmp_path_factory) -> Path:
    workdir = request.config.getoption("--bench-workdir")
    if workdir is None:
        return tmp_path_factory.mktemp("bench-work")
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir


class WorkerQueue:
    """The fresh-process measurements (`bench.worker`), run after every timed round.

    A worker's figures are its own process's memory, which a worker beside it does not
    change, while a worker beside a timed round would disturb that round's time: so they
    wait for the end of the suite, and run `jobs` at a time (the models of the full run
    that take GiB, `alone`, one at a time after them).
    """

    def __init__(self, directory: Path, jobs: int, *, quick: bool = False) -> None:
        self.directory = directory
        self.jobs = jobs
        #: Only the zoo's `quick_memory` models get a worker (`--bench-quick`).
        self.quick = quick
        self.pending: list[tuple[dict, str, str, bool]] = []

    def add(self, extra_info: dict, model: str, mode: str, *, alone: bool) -> None:
        """Fills `extra_info`'s `worker` and `memory` once the suite's rounds are done."""
        self.pending.append((extra_info, model, mode, alone))

    def _run(self, job: tuple[dict, str, str, bool]) -> None:
        from bench.worker import run_worker

        extra_info, model, mode, _ = job
        result = run_worker(model, mode, self.directory, timeout=_WORKER_TIMEOUT_SECONDS)
        extra_info["worker"] = result
        extra_info["memory"] = result["measurement"]["memory"]

    def run(self) -> None:
        together = [job for job in self.pending if not job[3]]
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            list(pool.map(self._run, together))
        for job in self.pending:
            if job[3]:
                self._run(job)


#: A worker builds one model and serializes it once; the biggest take minutes.
_WORKER_TIMEOUT_SECONDS = 3600


@pytest.fixture(scope="session")
def bench_workers(request: pytest.FixtureRequest, bench_workdir: Path):
    """The queue of fresh-process measurements, or None with `--bench-no-workers`."""
    if request.config.getoption("--bench-no-workers"):
        yield None
        return
    queue = WorkerQueue(
        bench_workdir / "workers",
        jobs=min(2, os.cpu_count() or 1),
        quick=request.config.getoption("--bench-quick"),
    )
    yield queue
    queue.run()


def pytest_benchmark_update_json(config, benchmarks, output_json) -> None:
    """Records how the suite was run next to pytest-benchmark's own metadata."""
    output_json["bench"] = {
        "schema": 1,
        "command": config.getoption("--bench-command")
        or shlex.join(["pytest", *config.invocation_params.args]),
        "python": sys.version.split()[0],
        "markexpr": config.getoption("markexpr"),
    }
