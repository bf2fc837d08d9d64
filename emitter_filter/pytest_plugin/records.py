"""What the plugin records of each program a test serializes, and one test's budget.

`ProgramRecord` is one program as the report file holds it (`REPORT_SCHEMA`,
docs/gates.md) and as the gates judge it; `audit_program` and `name_dead` read one
from the bytes ExecuTorch wrote. `PteBudget` is what the `pte_budget` fixture gives a
test: its budget and the programs it serialized so far.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from emitter_filter.inprocess.reports import PruneReport
    from emitter_filter.ondisk.analyse.audit_report import AuditReport

__all__ = [
    "REPORT_SCHEMA",
    "EXEMPT_MARKER",
    "ProgramRecord",
    "PteBudget",
    "audit_program",
    "name_dead",
]

#: The value of the "schema" key of the `--emitter-filter-report` file.
REPORT_SCHEMA = "emitter-filter-pytest/1"

#: The marker that exempts a test from the budget and from forced pruning.
EXEMPT_MARKER = "emitter_filter_exempt"

# Dead entries a record lists, largest first.
_LISTED_DEAD = 10


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


def audit_program(
    pte: bytes, ptd: Mapping
) -> tuple[AuditReport | None, str | None, tuple[str, ...]]:
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


def name_dead(audit: AuditReport | None, methods) -> AuditReport | None:
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
