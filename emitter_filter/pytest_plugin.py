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
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from emitter_filter.inprocess.hook import SerializedProgram
    from emitter_filter.inprocess.reports import PruneReport
    from emitter_filter.ondisk.analyse.audit_report import AuditReport

__all__ = ["REPORT_SCHEMA", "EXEMPT_MARKER", "ProgramRecord", "PteBudget", "pte_budget"]

logger = logging.getLogger(__name__)

#: The value of the "schema" key of the `--emitter-filter-report` file.
REPORT_SCHEMA = "emitter-filter-pytest/1"

#: The marker that exempts a test from the budget and from forced pruning.
EXEMPT_MARKER = "emitter_filter_exempt"

# Dead entries a record lists, largest first.
_LISTED_DEAD = 10

_SESSION = pytest.StashKey["_Session"]()

# The key of a pytest-xdist worker's `workeroutput` that carries its records' JSON forms.
_WORKER_RECORDS = "emitter_filter_records"


@dataclasses.dataclass(frozen=True)
class ProgramRecord:
    """One serialized program: what the report file holds, and what the gate judges.

    Attributes:
        test: The node id of the test that serialized it; None outside any test.
        methods: The names of its execution plans.
        exempt: The test carries the `emitter_filter_exempt` marker.
        pruned: It was pruned before it was written.
        file_bytes: The `.pte` and every `.ptd`, as written.
        audit: What `audit_file` found in those bytes; None if it failed (`error`).
        prune_report: What pruning dropped; None when not pruned.
        serialize_seconds: ExecuTorch's serializer.
        audit_seconds: The audit.
        error: Why the audit failed (a malformed program), or `invalid: <reason>` for a
            program the runtime would refuse (`validate`); None when neither.
        missing_data: External-tensor and named-data keys in none of its `.ptd` files.
    """

    test: str | None
    methods: tuple[str, ...]
    exempt: bool
    pruned: bool
    file_bytes: int
    audit: AuditReport | None
    prune_report: PruneReport | None
    serialize_seconds: float
    audit_seconds: float
    error: str | None
    missing_data: tuple[str, ...] = ()

    @property
    def dead_bytes(self) -> int | None:
        return None if self.audit is None else self.audit.dead_bytes

    def to_json(self) -> dict:
        """The record's form in the report file; docs/gates.md documents it."""
        audit, prune = self.audit, self.prune_report
        return {
            "test": self.test,
            "methods": list(self.methods),
            "exempt": self.exempt,
            "pruned": self.pruned,
            "file_bytes": self.file_bytes,
            "constant_bytes": None if audit is None else audit.constant_bytes,
            "dead_bytes": self.dead_bytes,
            "duplicated_bytes": None if audit is None else audit.duplicated_bytes,
            "largest_dead": []
            if audit is None
            else [
                {"space": d.space, "index": d.index, "bytes": d.nbytes, "name": d.name}
                for d in audit.largest_dead(_LISTED_DEAD)
            ],
            "bytes_before": None if prune is None else dict(prune.bytes_before),
            "bytes_after": None if prune is None else dict(prune.bytes_after),
            "dropped_bytes": None if prune is None else prune.dropped_bytes,
            "seconds": {
                "serialize": self.serialize_seconds,
                "prune": None if prune is None else prune.seconds,
                "audit": self.audit_seconds,
            },
            "error": self.error,
            "missing_data": list(self.missing_data),
        }


@dataclasses.dataclass
class PteBudget:
    """One test's budget and the programs it serialized so far (the `pte_budget` fixture).

    Attributes:
        test: The test's node id.
        max_dead_bytes: The dead bytes each of its programs may carry; None for no
            budget. Starts at `--emitter-filter-max-dead-bytes`; set it to change it
            for this test only.
        exempt: The test carries the `emitter_filter_exempt` marker: no budget applies.
        audited: The test asked for `pte_budget`: its programs are audited even
            without the plugin's options.
        require_data: `--emitter-filter-require-data`: a program with keys in none of
            its `.ptd` files fails the test.
        programs: What each program serialized so far in the test was found to hold.
    """

    test: str
    max_dead_bytes: int | None
    exempt: bool = False
    audited: bool = False
    require_data: bool = False
    programs: list[ProgramRecord] = dataclasses.field(default_factory=list)

    def check_size(
        self,
        *paths: str | os.PathLike,
        budget: str | os.PathLike = "pte-budget.json",
        tolerance_percent: float = 0.0,
    ) -> list:
        """Fails the test if a `.pte` it wrote is larger than its record in a size budget,
        or a method of it plans more memory than recorded (`non_const_buffer_sizes`).

        The budget file is the one `emitter-filter budget write` writes and the
        pre-commit hook reads (`testing.assert_within_budget`).
        """
        from emitter_filter.testing import assert_within_budget

        return assert_within_budget(paths, budget, tolerance_percent)

    def over_budget(self) -> list[ProgramRecord]:
        """The programs the gates fail the test for: over budget, unreadable or invalid,
        or (with `require_data`) without their data."""
        if self.exempt or (self.max_dead_bytes is None and not self.require_data):
            return []
        limit = self.max_dead_bytes
        return [
            r
            for r in self.programs
            if r.audit is None
            or (limit is not None and r.audit.dead_bytes > limit)
            or (self.require_data and r.missing_data)
        ]


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
    session = _Session(config)
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


def _audit(pte: bytes, ptd: Mapping) -> tuple[AuditReport | None, str | None, tuple[str, ...]]:
    """`audit_file` and `validate_bytes` on a serialized program: (the audit, None if it
    failed or the program is invalid; why; the keys in none of its `.ptd` files). The
    `.ptd` files go to a temporary directory."""
    from emitter_filter.errors import EmitterFilterError
    from emitter_filter.ondisk.analyse.validate import validate_bytes
    from emitter_filter.ondisk.audit import audit_file

    try:
        with tempfile.TemporaryDirectory(prefix="emitter-filter-") as directory:
            paths = []
            for name, cord in sorted(ptd.items()):
                paths.append(os.path.join(directory, f"{name}.ptd"))
                with open(paths[-1], "wb") as f:
                    cord.write_to_file(f)
            audit = audit_file(pte, paths)
            validity = validate_bytes(pte, paths)
    except EmitterFilterError as error:
        return None, f"{type(error).__name__}: {error}", ()
    if not validity.valid:
        return None, validity.status, validity.missing_data
    return audit, None, validity.missing_data


def _named(audit: AuditReport | None, methods) -> AuditReport | None:
    """`audit` with each dead value's entry named after the state it was emitted from (the
    FQN a failure should say, `calibration`, not `constant[3]`), where the methods are known."""
    if audit is None or not methods:
        return audit
    from emitter_filter.errors import InvariantError
    from emitter_filter.program.state_names import PlaceholderNames

    names = PlaceholderNames(methods)

    def name(dead):
        if dead.names or dead.plan is None or dead.value_index is None or dead.shape is None:
            return dead
        try:
            found = names.name_value(dead.plan, dead.value_index, dead.shape)
        except InvariantError:  # values that do not follow placeholders: left unnamed
            return dead
        return dead if found is None else dataclasses.replace(dead, names=(found,))

    return dataclasses.replace(audit, dead=tuple(name(d) for d in audit.dead))


def _describe(number: int, record: ProgramRecord, max_dead_bytes: int | None) -> str:
    from emitter_filter.testing import describe_dead_bytes as describe_audit

    where = f"program {number} (methods {', '.join(record.methods) or '-'})"
    if record.audit is None:
        if record.error is not None and record.error.startswith("invalid: "):
            return f"{where}: {record.error}"
        return f"{where}: cannot be audited: {record.error}"
    lines = []
    if max_dead_bytes is not None and record.audit.dead_bytes > max_dead_bytes:
        lines.append(describe_audit(dataclasses.replace(record.audit, path=where), max_dead_bytes))
    if record.missing_data:
        keys = ", ".join(repr(k) for k in record.missing_data)
        lines.append(f"{where}: external data in none of the .ptd files written with it: {keys}")
    return "\n".join(lines)


def _checked_report_path(path: Path) -> Path:
    """`path`, absolute (tests may change directory), once a report can be written there.

    Its missing directories are made now, as the report will need them.

    Raises:
        pytest.UsageError: It is not a regular file, or its directory takes no file.
    """
    from emitter_filter.errors import OutputFileError
    from emitter_filter.ondisk.write.targets import check_writable

    path = path.absolute()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise pytest.UsageError(
            f"--emitter-filter-report {path}: cannot make {error.filename}: {error.strerror}"
        ) from error
    try:
        check_writable(str(path))
    except OutputFileError as error:
        raise pytest.UsageError(f"--emitter-filter-report {error}") from error
    return path


class _Session:
    """The plugin's state for one pytest run: options, the running test, the records."""

    def __init__(self, config: pytest.Config) -> None:
        self.max_dead_bytes = config.getoption("emitter_filter_max_dead_bytes")
        if self.max_dead_bytes is not None and self.max_dead_bytes < 0:
            raise pytest.UsageError(
                f"--emitter-filter-max-dead-bytes {self.max_dead_bytes}: expected N >= 0"
            )
        self.require_data = config.getoption("emitter_filter_require_data")
        self.prune = config.getoption("emitter_filter_prune")
        self.report_path = config.getoption("emitter_filter_report")
        # A pytest-xdist worker sends its records to the controller, which writes the report.
        self._worker_output: dict | None = getattr(config, "workeroutput", None)
        # The controller of `-n N` runs no test: it needs neither the hook nor ExecuTorch.
        self._controller = config.getoption("dist", "no") != "no" and self._worker_output is None
        if self.report_path is not None and self._worker_output is None:
            self.report_path = _checked_report_path(self.report_path)
        self.records: list[ProgramRecord] = []  # every program audited here, in order
        self._worker_records: dict[str, list[dict]] = {}  # JSON forms, by xdist worker id
        self._report_error: str | None = None
        self._lost_workers: list[str] = []  # xdist workers that went down without their records
        self._audit_all = (
            self.max_dead_bytes is not None or self.report_path is not None or self.require_data
        )
        self._test: PteBudget | None = None
        self._observing = False
        self._enabled_pruning = False
        self._lock = threading.Lock()

    def start(self) -> None:
        if self._controller:
            if self.prune or self._audit_all:
                from emitter_filter._upstream import check_executorch_version

                check_executorch_version()  # once here, not once per worker
            return
        if self.prune:
            from emitter_filter.inprocess import hook

            if not hook.is_enabled():
                hook.enable()
                self._enabled_pruning = True
        if self._audit_all:
            self._observe()

    def _observe(self) -> None:
        if not self._observing:
            from emitter_filter.inprocess import hook

            hook.add_observer(self._on_serialized)
            self._observing = True

    def finish(self) -> None:
        if self._observing or self._enabled_pruning:
            from emitter_filter.inprocess import hook

            if self._observing:
                hook.remove_observer(self._on_serialized)
            if self._enabled_pruning:
                hook.disable()

    def _programs(self) -> list[dict]:
        """Every record's JSON form: this process's, then each xdist worker's."""
        programs = [record.to_json() for record in self.records]
        for worker in sorted(self._worker_records):
            programs.extend(self._worker_records[worker])
        return programs

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        """pytest-xdist: a worker finished (or crashed); keep the records it sent."""
        output = getattr(node, "workeroutput", None) or {}
        self._worker_records[node.gateway.id] = list(output.get(_WORKER_RECORDS, ()))
        if _WORKER_RECORDS not in output:
            self._lost_workers.append(node.gateway.id)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self._worker_output is not None:
            self._worker_output[_WORKER_RECORDS] = [r.to_json() for r in self.records]
        elif self.report_path is not None:
            self._write_report(session)

    def _write_report(self, session: pytest.Session) -> None:
        from emitter_filter.errors import OutputFileError
        from emitter_filter.ondisk.write.small_files import write_file

        programs = self._programs()
        document = {
            "schema": REPORT_SCHEMA,
            "prune": self.prune,
            "max_dead_bytes": self.max_dead_bytes,
            "programs": programs,
        }
        try:
            write_file(str(self.report_path), (json.dumps(document, indent=1) + "\n").encode())
        except OutputFileError as error:
            # Writable at start-up, no longer now (removed, full): say so, and fail a passing run.
            self._report_error = str(error)
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
            return
        logger.info("wrote %s: %d programs", self.report_path, len(programs))

    def budget_of_current_test(self) -> PteBudget:
        if self._test is None:
            raise pytest.UsageError("pte_budget is only available inside a test")
        self._test.audited = True
        self._observe()
        return self._test

    def _on_serialized(self, program: SerializedProgram) -> None:
        test = self._test
        if not (self._audit_all or (test is not None and test.audited)):
            return
        started = time.perf_counter()
        pte = bytes(program.pte)
        audit, error, missing_data = _audit(pte, program.ptd)
        audit = _named(audit, program.methods)
        audit_seconds = time.perf_counter() - started
        record = ProgramRecord(
            test=None if test is None else test.test,
            methods=tuple(plan.name for plan in program.emitter_output.program.execution_plan),
            exempt=test is not None and test.exempt,
            pruned=program.prune_report is not None,
            file_bytes=len(pte) + sum(len(cord) for cord in program.ptd.values()),
            audit=audit,
            prune_report=program.prune_report,
            serialize_seconds=program.serialize_seconds,
            audit_seconds=audit_seconds,
            error=error,
            missing_data=missing_data,
        )
        with self._lock:
            self.records.append(record)
            if test is not None:
                test.programs.append(record)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem):
        exempt = item.get_closest_marker(EXEMPT_MARKER) is not None
        self._test = PteBudget(
            item.nodeid, self.max_dead_bytes, exempt=exempt, require_data=self.require_data
        )
        unforced = exempt and self._enabled_pruning
        if unforced:
            from emitter_filter.inprocess import hook

            hook.disable()
        try:
            yield
        finally:
            if unforced:
                hook.enable()
            self._test = None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        test = self._test
        if call.when != "call" or test is None or test.test != item.nodeid:
            return
        failing = test.over_budget()
        report = outcome.get_result()
        if not failing or report.skipped:
            return
        numbers = {id(record): number for number, record in enumerate(test.programs, 1)}
        if test.max_dead_bytes is None:
            what = "lack their data or do not load (--emitter-filter-require-data"
        else:
            what = (
                f"carry more than {test.max_dead_bytes:,} dead bytes "
                "(--emitter-filter-max-dead-bytes or pte_budget"
            )
        message = "\n".join(
            [
                f"emitter_filter: {len(failing)} of {len(test.programs)} programs this test "
                f"serialized {what}; exempt with @pytest.mark.{EXEMPT_MARKER})",
                *(_describe(numbers[id(r)], r, test.max_dead_bytes) for r in failing),
            ]
        )
        if report.passed:
            report.outcome = "failed"
            report.longrepr = message
        else:
            report.sections.append(("emitter_filter: dead bytes", message))

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self._report_error is not None:
            terminalreporter.write_line(
                f"emitter_filter: report not written: {self._report_error}", red=True
            )
        if self._lost_workers:
            terminalreporter.write_line(
                f"emitter_filter: worker(s) {', '.join(sorted(self._lost_workers))} went down; "
                "the programs they serialized are missing from the summary and the report",
                red=True,
            )
        programs = self._programs()
        if not programs:
            return
        dead = sum(p["dead_bytes"] or 0 for p in programs)
        line = f"emitter_filter: {len(programs)} programs audited, {dead:,} dead bytes"
        if self.report_path is not None and self._report_error is None:
            line += f"; report: {self.report_path}"
        terminalreporter.write_line(line)
