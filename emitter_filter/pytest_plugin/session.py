"""The plugin's state for one pytest run: its options, the running test, the records.

`Session` observes every program serialized (`hook.add_observer`), records each
(`records.audit_program`), fails a test whose programs the gates refuse after its own
result, writes the report (or, in a pytest-xdist worker, sends its records to the
controller) and says a summary line at the end.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from emitter_filter.pytest_plugin.records import (
    EXEMPT_MARKER,
    REPORT_SCHEMA,
    ProgramRecord,
    PteBudget,
    audit_program,
    name_dead,
)

if TYPE_CHECKING:
    from emitter_filter.inprocess.hook import SerializedProgram

__all__ = ["Session"]

logger = logging.getLogger(__name__)

# The key of a pytest-xdist worker's `workeroutput` that carries its records' JSON forms.
_WORKER_RECORDS = "emitter_filter_records"


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


class Session:
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
        audit, error, missing_data = audit_program(pte, program.ptd)
        audit = name_dead(audit, program.methods)
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
