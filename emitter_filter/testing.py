"""Assertions for users' regression tests: "this model's .pte carries no dead constants"."""

from __future__ import annotations

import os
from collections.abc import Sequence

from emitter_filter.ondisk.analyse.audit_report import AuditReport
from emitter_filter.ondisk.audit import audit_file
from emitter_filter.ondisk.read.data_files import program_data
from emitter_filter.program.scalar_types import dtype_label

__all__ = ["assert_no_dead_constants", "assert_within_budget", "describe_dead_bytes"]

# Dead entries an assertion message lists; the rest are counted.
_LISTED_ENTRIES = 10


def describe_dead_bytes(report: AuditReport, max_dead_bytes: int) -> str:
    """The failure message: the dead bytes against the limit, then the largest dead entries."""
    lines = [
        f"{report.path}: {report.dead_bytes:,} dead constant bytes > {max_dead_bytes:,} allowed "
        f"({len(report.dead)} entries, of {report.constant_bytes:,} constant bytes); "
        "largest first:"
    ]
    shown = report.largest_dead(_LISTED_ENTRIES)
    for d in shown:
        where = "" if d.plan is None else f" plan {d.plan!r} value {d.value_index}"
        # dtype and shape are None together (an entry no value referred to).
        what = (
            "" if d.dtype is None or d.shape is None else f" {dtype_label(d.dtype)} {list(d.shape)}"
        )
        # The names the user gave first (`calibration`), then where the entry is.
        names = [n.name for n in d.names] or ([] if d.name is None else [d.name])
        name = f"{', '.join(names)}  " if names else ""
        lines.append(f"  {d.nbytes:,} B  {name}{d.space}[{d.index}]{where}{what}")
    if len(report.dead) > len(shown):
        lines.append(f"  ... and {len(report.dead) - len(shown)} more")
    return "\n".join(lines)


def assert_no_dead_constants(
    pte_path_or_bytes: str | os.PathLike | bytes,
    max_dead_bytes: int = 0,
    ptd_paths: Sequence[str | os.PathLike] = (),
    *,
    data_beside: bool = True,
) -> AuditReport:
    """Fails if a `.pte` carries more than `max_dead_bytes` bytes no program can reach.

    Args:
        pte_path_or_bytes: The `.pte` file, or its bytes (`manager.buffer`). Not modified.
        max_dead_bytes: The dead bytes tolerated.
        ptd_paths: The `.ptd` files with its external constants, if any; none given, a
            path reads the `.ptd` beside it with its stem, as `emitter-filter audit` does
            (`data_files.program_data`), unless `data_beside` is False.

    Returns:
        The audit, for further checks.

    Raises:
        AssertionError: Too many dead bytes; the message lists the largest dead entries.
    """
    if not isinstance(pte_path_or_bytes, (bytes, bytearray, memoryview)):
        ptd_paths = program_data(pte_path_or_bytes, ptd_paths, beside=data_beside)
    report = audit_file(pte_path_or_bytes, ptd_paths)
    if report.dead_bytes > max_dead_bytes:
        raise AssertionError(describe_dead_bytes(report, max_dead_bytes))
    return report


def assert_within_budget(
    paths: Sequence[str | os.PathLike],
    budget: str | os.PathLike = "pte-budget.json",
    tolerance_percent: float = 0.0,
) -> list:
    """Fails if a `.pte` is larger than its record in a committed size budget, or a
    method of it plans more memory than its record (budgets that record it).

    The budget is the file `emitter-filter budget write` writes, the one
    `budget check` and the pre-commit hook read; each `.pte` is checked with the
    `.ptd` beside it with its stem, as they check it.

    Args:
        paths: The `.pte` files, as the budget names them. Not modified.
        budget: The budget file.
        tolerance_percent: Growth allowed, in percent of the recorded bytes.

    Returns:
        The `budget.BudgetCheck` of each file.

    Raises:
        AssertionError: A file is over its budget or has none; the message is
            `budget check`'s, with the diff against the recorded entries.
    """
    from emitter_filter.ondisk.budget import check_budget, read_budget

    checks = check_budget(paths, read_budget(budget), tolerance_percent)
    over = [c for c in checks if c.over]
    if over:
        raise AssertionError(
            "\n".join(
                c.summary() + ("" if c.diff is None else "\n" + c.diff.to_text()) for c in over
            )
        )
    return checks
