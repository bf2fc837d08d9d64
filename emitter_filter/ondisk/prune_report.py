"""What `prune_file` wrote and dropped: `FilePruneReport`, its one line and its `--json`.

Each dropped entry is audit's own (`DroppedConstant`), named in `--json` by the fields of
audit's "dead" entries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from emitter_filter.program.names import DroppedConstant

if TYPE_CHECKING:
    from emitter_filter.ondisk.dedupe import DedupeReport

__all__ = ["JSON_SCHEMA", "FilePruneReport"]


#: The value of the "schema" key of `FilePruneReport.to_json()` (`prune --json`).
JSON_SCHEMA = "emitter-filter-prune/1"
#: What `prune --json` says of each dropped entry: the fields of audit's "dead" entries
#: (`DroppedConstant.to_json`) that name it.
_DROPPED_FIELDS = ("space", "index", "bytes", "name", "names", "readable_by_name")


@dataclass(frozen=True)
class FilePruneReport:
    """What `prune_file` wrote and dropped.

    Attributes:
        path: The input `.pte`.
        output: The `.pte` written.
        ptd_outputs: For each input `.ptd`, the file written, or None when none
            of its keys is live (ExecuTorch writes no `.ptd` for such a tag).
        bytes_before: Size of the input files together.
        bytes_after: Size of the output files together.
        dropped: The dropped data entries, named data and segments (the input's
            own indices; see `AuditReport.dead`).
        dropped_values: Values no root of their plan reaches.
        dropped_named_data: Named-data keys no delegate reaches, in file order.
        kept_unprovable: Named-data keys kept only because an opaque delegate may read them.
        seconds: Wall time of the whole prune (and dedupe).
        dedupe: What `dedupe=True` saved on top of pruning, or None when it was off.
        left_constant_buffer_path: The input relied on the deprecated `constant_buffer`
            path (`relies_on_constant_buffer`), which the runtime's wheels refuse; the output
            has its placeholder in the constant segment.
    """

    path: str
    output: str
    ptd_outputs: tuple[tuple[str, str | None], ...]
    bytes_before: int
    bytes_after: int
    dropped: tuple[DroppedConstant, ...]
    dropped_values: int
    dropped_named_data: tuple[str, ...]
    kept_unprovable: tuple[str, ...]
    seconds: float
    dedupe: DedupeReport | None = None
    left_constant_buffer_path: bool = False

    def to_json(self) -> dict:
        """What `prune --json` prints: the files, the bytes, each dropped entry by name."""
        return {
            "schema": JSON_SCHEMA,
            "path": self.path,
            "output": self.output,
            "ptd_outputs": [{"path": p, "output": o} for p, o in self.ptd_outputs],
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "dropped_bytes": sum(d.nbytes for d in self.dropped),
            "dropped": [
                {field: entry[field] for field in _DROPPED_FIELDS}
                for entry in (d.to_json() for d in self.dropped)
            ],
            "dropped_values": self.dropped_values,
            "dropped_named_data": list(self.dropped_named_data),
            "kept_unprovable": list(self.kept_unprovable),
            "left_constant_buffer_path": self.left_constant_buffer_path,
            **({} if self.dedupe is None else {"dedupe": self.dedupe.to_json()}),
        }

    def summary(self) -> str:
        """One line, for the log and the CLI."""
        dropped_bytes = sum(d.nbytes for d in self.dropped)
        line = (
            f"{self.path} -> {self.output}: {self.bytes_before:,} -> {self.bytes_after:,} B; "
            f"dropped {len(self.dropped)} entries ({dropped_bytes:,} B), "
            f"{self.dropped_values} values, {len(self.dropped_named_data)} named data"
        )
        if self.kept_unprovable:
            line += f"; kept {len(self.kept_unprovable)} unprovable named data"
        line += f" in {self.seconds * 1e3:.1f} ms"
        if self.left_constant_buffer_path:
            line += (
                "; rewritten from the deprecated constant_buffer path, which the runtime "
                "refuses, to the constant segment"
            )
        return line
