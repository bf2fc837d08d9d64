"""Session fixtures: the small dirty programs every file-side test reads.

With torch and executorch installed, `built` builds them with upstream ExecuTorch
(`tests.programs`). Without them (the torch-free run, `pytest -m filetools`) it
reads the same files from `tests/golden/`, and only test modules marked
`filetools` are collected: the others import torch.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import re
from pathlib import Path

import pytest

from tests.files import CASES, HAVE_EXECUTORCH, Built, read_golden
from tests.shared_build import build_once

#: `--load-outputs`: every program the tools write in a test loads in ExecuTorch's runtime.
pytest_plugins = ["tests.load_outputs"]

if not HAVE_EXECUTORCH:
    _MARKED = re.compile(r"^pytestmark = .*pytest\.mark\.filetools", re.MULTILINE)
    _HERE = Path(__file__).parent
    collect_ignore = [
        str(path.relative_to(_HERE))
        for path in _HERE.rglob("test_*.py")
        if not _MARKED.search(path.read_text(encoding="utf-8"))
    ]


@pytest.fixture(autouse=True)
def _emitter_filter_logger_as_it_was():
    """Undoes what a test's `cli.main` or start-up hook did to the `emitter_filter` logger.

    Left at INFO, every later prune would format its report for the log line
    (names, the duplicate search) and a capturing handler would keep the report
    alive: tests of laziness and of memory would then depend on the order.
    """
    logger = logging.getLogger("emitter_filter")
    saved = logger.level, list(logger.handlers), logger.propagate
    yield
    logger.setLevel(saved[0])
    logger.handlers[:] = saved[1]
    logger.propagate = saved[2]


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> dict[str, Built]:
    """Each case of `tests.files.CASES`, plus `clean`, as upstream writes it and pruned.

    Built once per run and shared by the xdist workers (`tests.shared_build`).
    """
    if not HAVE_EXECUTORCH:
        return read_golden(tmp_path_factory.mktemp("programs"))
    from tests.programs import build

    def build_all(root: Path) -> dict[str, Built]:
        return {case: _picklable(build(case, root)) for case in (*CASES, "clean")}

    _, built = build_once(tmp_path_factory, "programs", build_all)
    return built


def _picklable(built: Built) -> Built:
    """The report with its names found now: its lazy name finder holds the program."""
    report = built.report
    names = functools.partial(dict, report.find_names())  # type: ignore[attr-defined]
    return dataclasses.replace(built, report=dataclasses.replace(report, find_names=names))
