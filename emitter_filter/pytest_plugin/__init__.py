"""A pytest plugin: gate, prune or report every program a test suite serializes.

Registered through the `pytest11` entry point as `emitter_filter`. Until one of
its options is given or a test asks for `pte_budget`, it is idle: it installs no
hook, imports nothing of ExecuTorch and changes no byte a test writes.

- `--emitter-filter-max-dead-bytes N`: every program serialized while a test
  runs (its setup and call) is audited in process, without pruning:
  `audit.audit_file` on the bytes ExecuTorch wrote, its `.ptd` files included.
  A test fails, after its own result, if one of its programs carries more than
  N dead bytes; the message lists the program's largest dead entries.
- `--emitter-filter-require-data`: a test fails if a program it serializes has an
  external tensor or named-data key in none of the `.ptd` files written with it
  (`validate.validate_bytes`: a `.pte` whose weights are nowhere).
- Either gate fails a test whose program ExecuTorch's runtime would refuse to load
  (`invalid: <reason>`, the record's `error`).
- `--emitter-filter-prune`: prune every program of the run (`hook.enable()`,
  what `EMITTER_FILTER_PRUNE=1` does), so a suite shows whether it still passes.
- `--emitter-filter-report PATH`: write one JSON record per serialized program
  (`REPORT_SCHEMA`, documented in docs/gates.md).
- The `pte_budget` fixture audits one test's programs and sets its own budget;
  the `emitter_filter_exempt` marker leaves a test alone: no budget, no forced
  pruning (its programs are still reported).

Programs are seen through `hook.add_observer`, the hook's only wrapping of
ExecuTorch's serializer. A program serialized by a session or module fixture
counts for the test whose setup built it.

Option values are checked at start-up, before any test runs: a bad one is a
`pytest.UsageError` (an unwritable report path included). Under pytest-xdist
each worker gates its own tests and sends its records to the controller
(`workeroutput`), which writes the one report, each worker's records in its
order, workers by id.

Here the hooks pytest calls by name and the fixture; what is recorded of a program in
`records`, the run's state in `session`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from emitter_filter.pytest_plugin.records import (
    EXEMPT_MARKER,
    REPORT_SCHEMA,
    ProgramRecord,
    PteBudget,
)
from emitter_filter.pytest_plugin.session import Session

__all__ = ["REPORT_SCHEMA", "EXEMPT_MARKER", "ProgramRecord", "PteBudget", "pte_budget"]

_SESSION = pytest.StashKey[Session]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup(
        "emitter_filter", "emitter_filter: dead constants in serialized programs"
    )
    group.addoption(
        "--emitter-filter-max-dead-bytes",
        type=int,
        default=None,
        metavar="N",
        help="fail a test if a program it serializes carries more than N dead bytes "
        "(audited in process, without pruning)",
    )
    group.addoption(
        "--emitter-filter-require-data",
        action="store_true",
        default=False,
        help="fail a test if a program it serializes has an external tensor or named-data "
        "key in none of the .ptd files written with it",
    )
    group.addoption(
        "--emitter-filter-prune",
        action="store_true",
        default=False,
        help="prune every program the run serializes (as EMITTER_FILTER_PRUNE=1)",
    )
    group.addoption(
        "--emitter-filter-report",
        type=Path,
        default=None,
        metavar="PATH",
        help="write one JSON record per serialized program to PATH",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{EXEMPT_MARKER}(reason): emitter_filter gives this test no dead-bytes budget "
        "and does not force pruning on it",
    )
    session = Session(config)
    config.stash[_SESSION] = session
    config.pluginmanager.register(session, "emitter_filter_session")
    from emitter_filter.errors import EmitterFilterError

    try:
        session.start()
    except EmitterFilterError as error:
        # No executorch, or one the hook does not know: one line, not a traceback.
        raise pytest.UsageError(str(error)) from error


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(_SESSION, None)
    if session is not None:
        session.finish()


@pytest.fixture
def pte_budget(request: pytest.FixtureRequest) -> PteBudget:
    """Audits the programs this test serializes from now on; set `max_dead_bytes` to gate them.

    Example::

        def test_export(pte_budget):
            pte_budget.max_dead_bytes = 4096
            model.to_executorch()
    """
    return request.config.stash[_SESSION].budget_of_current_test()
