"""What `explain` found, and how it reads: the parts of a program's files together.

`Explanation` holds every `Part` of a `.pte` and its `.ptd` files (they add up to the
files' sizes), the audit their statuses come from and each method's planned arenas; it
renders itself as JSON (`to_json`, docs/explain.md) and as text (`to_text`). How the
parts are found is `explain`'s.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from emitter_filter.ondisk.analyse.explain_terms import JSON_SCHEMA, STATUSES, STORAGES
from emitter_filter.ondisk.explain_part import Part
from emitter_filter.ondisk.method_memory import memory_json, memory_lines
from emitter_filter.ondisk.read.planned_memory import PlannedMemory
from emitter_filter.program.scalar_types import dtype_label

if TYPE_CHECKING:
    # A type only: the audit is carried, not run, here (`explain` runs it).
    from emitter_filter.ondisk.analyse.audit_report import AuditReport

__all__ = ["Explanation", "shorten"]


@dataclass(frozen=True)
class Explanation:
    """The result of `explain_file`: every byte of the files, attributed.

    Attributes:
        path: The `.pte` explained.
        files: Each file (the `.pte`, then the `.ptd` files) and its size.
        parts: Every part, by file then offset; their `nbytes` add up to the
            files' sizes.
        outside: External tensors whose bytes are in no file given (no `.ptd`).
        audit: The audit these statuses come from (a set's: its first program's).
        programs: For a set of programs (`explain_set.explain_set`), each program's own
            explanation; empty for one.
        key_clashes: For a set, the named-data keys its programs hold with different
            bytes (`share_find.KeyClash`).
        memory: Each method's planned arenas (`planned_memory.plan_memory`); for a set,
            in `programs`.
    """

    path: str
    files: tuple[tuple[str, int], ...]
    parts: tuple[Part, ...]
    outside: tuple[Part, ...]
    audit: AuditReport
    programs: tuple[Explanation, ...] = ()
    key_clashes: tuple = ()
    memory: tuple[PlannedMemory, ...] = ()

    @property
    def file_bytes(self) -> int:
        return sum(size for _, size in self.files)

    def totals(self, by: str) -> dict[str, int]:
        """Bytes per group, largest first (ties in name order)."""
        sums: dict[str, int] = {}
        for part in self.parts:
            key = part.group(by)
            sums[key] = sums.get(key, 0) + part.nbytes
        return dict(sorted(sums.items(), key=lambda item: (-item[1], item[0])))

    def storage_status(self) -> dict[str, dict[str, int]]:
        """Bytes per storage (in `STORAGES` order) and status; absent ones left out."""
        table: dict[str, dict[str, int]] = {}
        for part in self.parts:
            row = table.setdefault(part.storage, dict.fromkeys(STATUSES, 0))
            row[part.status] += part.nbytes
        return {storage: table[storage] for storage in STORAGES if storage in table}

    def largest(self, count: int | None) -> tuple[Part, ...]:
        """The `count` largest parts (all for None), largest first, padding included."""
        ordered = sorted(self.parts, key=lambda p: (-p.nbytes, p.file, p.offset))
        return tuple(ordered if count is None else ordered[:count])

    def pairing(self) -> list[tuple[str, list[str]]]:
        """Each program explained and the `.ptd` files it was read with."""
        if self.programs:
            return [pair for program in self.programs for pair in program.pairing()]
        return [(self.files[0][0], [path for path, _ in self.files[1:]])]

    def to_json(self, top: int | None = None, by: str | None = None) -> dict:
        """The stable JSON form; docs/explain.md documents it, `JSON_SCHEMA` versions it."""
        status_totals = dict.fromkeys(STATUSES, 0)
        for part in self.parts:
            status_totals[part.status] += part.nbytes
        document = {
            "schema": JSON_SCHEMA,
            "path": self.path,
            "files": [{"path": path, "bytes": size} for path, size in self.files],
            "file_bytes": self.file_bytes,
            "storage": self.storage_status(),
            "status": status_totals,
            "parts": [part.to_json() for part in self.largest(top)],
            "outside": [part.to_json() for part in self.outside],
            "data": [{"program": program, "data": data} for program, data in self.pairing()],
            "methods": memory_json(self),
        }
        if by is not None:
            document["groups"] = {"by": by, "bytes": self.totals(by)}
        if self.programs:
            document["programs"] = [program.to_json(top, by) for program in self.programs]
            document["key_clashes"] = [clash.to_json() for clash in self.key_clashes]
        return document

    def to_text(self, top: int = 10, by: str | None = None) -> str:
        """The summary by storage and status, then the largest parts (or groups)."""
        lines = [
            f"{self.path}: {self.file_bytes:,} bytes in {len(self.files)} file(s); "
            + ", ".join(
                f"{status} {sum(row[status] for row in self.storage_status().values()):,}"
                for status in STATUSES
            ),
            *(
                f"{program} reads {', '.join(data) if data else 'no .ptd'}"
                for program, data in self.pairing()
            ),
            f"{'storage':<16}{'bytes':>14}" + "".join(f"{s:>12}" for s in STATUSES),
        ]
        for storage, row in self.storage_status().items():
            lines.append(
                f"{storage:<16}{sum(row.values()):>14,}"
                + "".join(f"{row[s]:>12,}" for s in STATUSES)
            )
        if self.outside:
            lines.append(
                f"not in these files (no .ptd given): {len(self.outside)} external "
                f"tensor(s), {sum(p.nbytes for p in self.outside):,} bytes"
            )
        lines += memory_lines(self)
        if self.programs:
            lines.append(f"key clashes: {len(self.key_clashes) or 'none'}")
            lines += [f"  {clash.line()}" for clash in self.key_clashes]
        if by is not None:
            groups = list(self.totals(by).items())
            lines.append(f"by {by} ({min(top, len(groups))} of {len(groups)}):")
            lines += [f"{nbytes:>14,}  {key}" for key, nbytes in groups[:top]]
            return "\n".join(lines)
        shown = self.largest(top)
        lines.append(f"largest parts ({len(shown)} of {len(self.parts)}):")
        lines += _part_table(shown, by_file=bool(self.programs))
        return "\n".join(lines)


def shorten(text: str, limit: int = 40) -> str:
    """`text`, cut from the left past `limit` characters, keeping the end that tells
    names apart (an FQN's leaf, a sha256 key's last digits).

    Package-internal: the text forms of `explain` and `diff`.
    """
    return text if len(text) <= limit else ".." + text[-(limit - 2) :]


# What a part no name or reader describes is, by storage.
_WHAT = {
    "header": "the extended header: segment offsets and sizes",
    "program": "the program's and plans' tables, strings and segment lists",
    "values": "the plan's values (EValues: tensors, scalars, lists)",
    "instructions": "the plan's instructions",
    "operators": "the names of the operators the plan calls",
    "padding": "alignment between sections",
    "ptd_header": "the .ptd's header and FlatTensor table",
    "segments": "a segment nothing refers to",
}


def _what(part: Part) -> str:
    """The last column: the part's names and readers, or what its storage holds."""
    names = ", ".join(shorten(name) for name in part.names)
    readers = ", ".join(
        replace(r, key=r.key and shorten(r.key, 20)).describe() for r in part.readers[:2]
    )
    more = len(part.readers) - 2
    readers += f" (+{more} more)" if more > 0 else ""
    if not readers and part.storage in (
        "constant",
        "mutable",
        "external",
        "named_data",
        "delegate",
        "delegate_inline",
    ):
        readers = "read by nothing live" if part.status == "dead" else ""
    what = "; ".join(filter(None, (names, readers))) or _WHAT.get(part.storage, "-")
    return what + (f"; copies: {', '.join(part.copies)}" if part.copies else "")


def _part_table(parts: Sequence[Part], by_file: bool = False) -> list[str]:
    """The largest parts as aligned columns, each label and shape in full (`by_file`: the
    label after its file's name, for a set of files)."""
    rows = []
    for part in parts:
        label = f"{os.path.basename(part.file)}:{part.label}" if by_file else part.label
        if part.shape is None:
            shape = "-"
        else:
            shapes = [s for _, s in part.layouts] if len(part.layouts) > 1 else [part.shape]
            shape = " | ".join("[" + ", ".join(map(str, s)) + "]" for s in shapes)
        rows.append(
            (f"{part.nbytes:,}", label, part.status, dtype_label(part.dtype), shape, _what(part))
        )
    head = ("bytes", "part", "status", "dtype", "shape", "names; readers")
    widths = [max(len(row[i]) for row in (head, *rows)) for i in range(len(head) - 1)]
    return [
        "  ".join(
            [row[0].rjust(max(widths[0], 14))]
            + [cell.ljust(width) for cell, width in zip(row[1:-1], widths[1:], strict=True)]
            + [row[-1]]
        )
        for row in (head, *rows)
    ]
