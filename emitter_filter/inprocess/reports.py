"""What one prune did: bytes per data space before and after, each dropped entry by name, and the dedupe."""

from __future__ import annotations

import dataclasses
import functools
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from emitter_filter.errors import ReportNotFoundError
from emitter_filter.program.names import ConstantName, DroppedConstant

if TYPE_CHECKING:
    from emitter_filter.inprocess.named_data import NamedDataReport
    from emitter_filter.ondisk.dedupe import DedupeReport


__all__ = ["PruneReport", "report"]

#: Dropped entries the one-line summary names, largest first.
_SUMMARY_NAMES = 10


def _no_names() -> Mapping[tuple[str, int], tuple[ConstantName, ...]]:
    return {}


@dataclass(frozen=True)
class PruneReport:
    """The result of pruning one program.

    Attributes:
        bytes_before: Constant bytes per space ("constant", "mutable", "external"), before.
        bytes_after: The same, after.
        found: The dropped data entries, by space then index, as the prune found
            them: named only by what the program carries. Read `dropped` instead.
        dropped_values: How many values were removed from the plans' value tables.
        seconds: Wall time spent in the filter.
        named_data: The delegates' named data dropped, kept because unprovable, and
            the bytes written more than once; None where it was not analysed.
        skipped: Why the program was written unpruned (the filter could not prove
            the prune safe), or None when it was pruned.
        find_names: Names the dropped entries after the model state, by (space,
            index); called once, on first use of `dropped`, not in the hook.
        dedupe: What `dedupe_constants` saved on top of pruning (bytes of the
            `.pte`), or None when it was off or skipped. With `dedupe_constants`
            alone the prune fields are empty: nothing was pruned.
        dedupe_skipped: Why `dedupe_constants` left the `.pte` as it was (the
            filter could not prove the program safe to transform), or None.
    """

    bytes_before: Mapping[str, int]
    bytes_after: Mapping[str, int]
    found: tuple[DroppedConstant, ...]
    dropped_values: int
    seconds: float
    named_data: NamedDataReport | None = None
    skipped: str | None = None
    dedupe: DedupeReport | None = None
    dedupe_skipped: str | None = None
    find_names: Callable[[], Mapping[tuple[str, int], tuple[ConstantName, ...]]] = (
        dataclasses.field(default=_no_names, repr=False, compare=False)
    )

    @functools.cached_property
    def dropped(self) -> tuple[DroppedConstant, ...]:
        """The dropped data entries, by space then index, each with every name it is known by."""
        names = self.find_names()
        return tuple(
            dataclasses.replace(d, names=names[(d.space, d.index)])
            if (d.space, d.index) in names
            else d
            for d in self.found
        )

    @property
    def dropped_bytes(self) -> int:
        """Constant bytes that were not written, over all spaces."""
        return sum(self.bytes_before.values()) - sum(self.bytes_after.values())

    def __str__(self) -> str:
        return self.summary()

    def summary(self) -> str:
        """One line, as logged at INFO after each prune; it names the largest dropped entries."""
        if self.skipped is not None:
            return f"skipped, written unpruned: {self.skipped}"
        if self.dedupe_skipped is not None and not self.bytes_before:
            return f"skipped, written undeduplicated: {self.dedupe_skipped}"
        if not self.bytes_before:
            return "not pruned" if self.dedupe is None else self.dedupe.summary()
        spaces = ", ".join(
            f"{space} {self.bytes_before[space]:,} -> {self.bytes_after[space]:,} B"
            for space in self.bytes_before
            if self.bytes_before[space]
        )
        line = (
            f"dropped {len(self.found)} constants ({self.dropped_bytes:,} B) and "
            f"{self.dropped_values} values in {self.seconds * 1000:.1f} ms"
            + (f"; {spaces}" if spaces else "")
        )
        if self.named_data is not None:
            line = f"{line}; {self.named_data.summary()}"
        if self.found:
            largest = sorted(self.dropped, key=lambda d: (-d.nbytes, d.space, d.index))
            listed = ", ".join(d.describe() for d in largest[:_SUMMARY_NAMES])
            more = len(largest) - _SUMMARY_NAMES
            line = f"{line}; dropped: {listed}" + (f" and {more} more" if more > 0 else "")
        if self.dedupe_skipped is not None:
            return f"{line}; deduplication skipped: {self.dedupe_skipped}"
        return line if self.dedupe is None else f"{line}; {self.dedupe.summary()}"


# Reports are keyed by the identity of the manager's EmitterOutput, the object the
# hook sees (a dataclass, so unhashable), and forgotten when it is collected.
_reports: dict[int, PruneReport] = {}
_reports_lock = threading.Lock()


def _forget_report(key: int) -> None:
    with _reports_lock:
        _reports.pop(key, None)


def _record_report(emitter_output: object, prune_report: PruneReport) -> None:
    """Remembers `prune_report` for as long as `emitter_output` is alive."""
    key = id(emitter_output)
    with _reports_lock:
        _reports[key] = prune_report
    weakref.finalize(emitter_output, _forget_report, key)


def _record_dedupe_report(emitter_output: object, dedupe_report: DedupeReport) -> None:
    """Adds `dedupe_report` to the prune's report, or records it alone when nothing was pruned."""
    _add_to_report(emitter_output, dedupe=dedupe_report)


def _record_dedupe_skipped(emitter_output: object, reason: str) -> None:
    """Records why the dedupe left the program as it was, as `_record_dedupe_report` does."""
    _add_to_report(emitter_output, dedupe_skipped=reason)


def _add_to_report(emitter_output: object, **fields) -> None:
    with _reports_lock:
        found = _reports.get(id(emitter_output))
    if found is None:
        found = PruneReport({}, {}, (), 0, 0.0)
    _record_report(emitter_output, dataclasses.replace(found, **fields))


def report(manager) -> PruneReport:
    """Returns what the prune did for an `ExecutorchProgramManager`.

    Args:
        manager: The result of `to_executorch` with pruning on. Not modified.

    Raises:
        ReportNotFoundError: The manager's program was serialized without pruning
            (a `LookupError`).
        TypeError: `manager` is not an `ExecutorchProgramManager`.
    """
    from emitter_filter._upstream import emitter_output_of

    with _reports_lock:
        found = _reports.get(id(emitter_output_of(manager)))
    if found is None:
        raise ReportNotFoundError(
            "this program was serialized without pruning: pass "
            "ExecutorchBackendConfig(prune_constants=True) (or dedupe_constants=True) "
            "or use emitter_filter.pruning()"
        )
    return found
