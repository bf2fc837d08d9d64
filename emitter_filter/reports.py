"""What one prune did: bytes per data space before and after, each dropped entry, and the dedupe."""

from __future__ import annotations

import dataclasses
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from emitter_filter.dedupe import DedupeReport
    from emitter_filter.named_data import NamedDataReport

__all__ = ["DroppedConstant", "PruneReport", "report"]


@dataclass(frozen=True)
class DroppedConstant:
    """One data entry that was not written, or (in `audit`) that no program can reach.

    `plan`, `value_index`, `dtype` and `shape` describe the first dead value that
    referred to it (all None for an entry no value referred to); `name` is its
    `fully_qualified_name` where the program carries one (external constants,
    named buffers), or the key of named data. Indices are those before pruning:
    a file's own indices on disk.
    """

    space: str
    index: int
    nbytes: int
    plan: str | None
    value_index: int | None
    dtype: str | None
    shape: tuple[int, ...] | None
    name: str | None


@dataclass(frozen=True)
class PruneReport:
    """The result of pruning one program.

    Attributes:
        bytes_before: Constant bytes per space ("constant", "mutable", "external"), before.
        bytes_after: The same, after.
        dropped: The dropped data entries, by space then index.
        dropped_values: How many values were removed from the plans' value tables.
        seconds: Wall time spent in the filter.
        named_data: The delegates' named data dropped, kept because unprovable, and
            the bytes written more than once; None where it was not analysed.
        dedupe: What `dedupe_constants` saved on top of pruning (bytes of the
            `.pte`), or None when it was off. With `dedupe_constants` alone the
            prune fields are empty: nothing was pruned.
    """

    bytes_before: Mapping[str, int]
    bytes_after: Mapping[str, int]
    dropped: tuple[DroppedConstant, ...]
    dropped_values: int
    seconds: float
    named_data: NamedDataReport | None = None
    dedupe: DedupeReport | None = None

    @property
    def dropped_bytes(self) -> int:
        """Constant bytes that were not written, over all spaces."""
        return sum(self.bytes_before.values()) - sum(self.bytes_after.values())

    def __str__(self) -> str:
        return self.summary()

    def summary(self) -> str:
        """One line, as logged at INFO after each prune."""
        if not self.bytes_before:
            return "not pruned" if self.dedupe is None else self.dedupe.summary()
        spaces = ", ".join(
            f"{space} {self.bytes_before[space]:,} -> {self.bytes_after[space]:,} B"
            for space in self.bytes_before
            if self.bytes_before[space]
        )
        line = (
            f"dropped {len(self.dropped)} constants ({self.dropped_bytes:,} B) and "
            f"{self.dropped_values} values in {self.seconds * 1000:.1f} ms"
            + (f"; {spaces}" if spaces else "")
        )
        if self.named_data is not None:
            line = f"{line}; {self.named_data.summary()}"
        return line if self.dedupe is None else f"{line}; {self.dedupe.summary()}"


# Reports are keyed by the identity of the manager's EmitterOutput, the object the
# hook sees (a dataclass, so unhashable), and forgotten when it is collected.
_reports: dict[int, PruneReport] = {}
_reports_lock = threading.Lock()


def _forget_report(key: int) -> None:
    with _reports_lock:
        _reports.pop(key, None)


def record_report(emitter_output: object, prune_report: PruneReport) -> None:
    """Remembers `prune_report` for as long as `emitter_output` is alive."""
    key = id(emitter_output)
    with _reports_lock:
        _reports[key] = prune_report
    weakref.finalize(emitter_output, _forget_report, key)


def record_dedupe_report(emitter_output: object, dedupe_report: DedupeReport) -> None:
    """Adds `dedupe_report` to the prune's report, or records it alone when nothing was pruned."""
    with _reports_lock:
        found = _reports.get(id(emitter_output))
    if found is None:
        found = PruneReport({}, {}, (), 0, 0.0)
    record_report(emitter_output, dataclasses.replace(found, dedupe=dedupe_report))


def report(manager) -> PruneReport:
    """Returns what the prune did for an `ExecutorchProgramManager`.

    Args:
        manager: The result of `to_executorch` with pruning on. Not modified.

    Raises:
        LookupError: The manager's program was serialized without pruning.
    """
    from emitter_filter._upstream import emitter_output_of

    with _reports_lock:
        found = _reports.get(id(emitter_output_of(manager)))
    if found is None:
        raise LookupError(
            "this program was serialized without pruning: pass "
            "ExecutorchBackendConfig(prune_constants=True) (or dedupe_constants=True) "
            "or use emitter_filter.pruning()"
        )
    return found
