"""Where every byte of a `.pte` (and its `.ptd` files) goes: `emitter-filter explain`.

    model.pte  [ET12 | header | program flatbuffer (inline delegate data) | pad |
                constant: e1 pad e2 ... | pad | named data | pad | delegate | ...]
    model.ptd  [FT01 header and flatbuffer | pad | tensor | pad | tensor | ...]

`explain_file` gives every byte of each file to exactly one `Part`, so the
parts add up to the files' sizes exactly. Storages:

- `header`: the `.pte`'s extended header (`eh00`, its length field's bytes);
- `values`, `instructions`, `operators`: the bytes of each plan's `values`,
  `chains` and `operators` in the program flatbuffer (`program_sections`);
- `program`: the rest of the program flatbuffer (the program's and plans' own
  tables, delegates' metadata, segment tables, the padding flatbuffers leaves);
- `delegate_inline`: each inline delegate blob (`backend_delegate_data[i].data`);
- `constant`, `mutable`: each entry of the constant and mutable segments;
- `named_data`: each named-data segment, with every key that refers to it;
- `delegate`: each delegate segment; `segments`: each segment nothing refers to;
- `external`: each `.ptd` segment external tensors use (other `.ptd` segments
  are `named_data`); `ptd_header`: a `.ptd`'s header and flatbuffer;
- `padding`: every byte between those that no structure of the file refers to.

What is dead, duplicated and shared is `audit`'s analysis (`audit.audit_pte`),
not worked out again: a part is `dead` where audit lists its entry dead (a
named-data segment when all its keys are), `duplicated` for each copy but the
first of a content audit finds stored more than once, `shared` for a range
several references read (audit's `shared`; its bytes go to its first
reference), else `live`; padding is `padding`. Readers come from `readers`.

Reads what `audit` reads (headers, flatbuffers, entries whose size another
shares) and, with `names`, the constant and mutable entries whose size a state
tensor has. External tensors sized from their shapes (no `.ptd` given) are in
no file: `outside` lists them, apart from the parts.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from emitter_filter.errors import InvariantError, PteFormatError
from emitter_filter.ondisk.analyse.audit_report import AuditReport, audit_pte
from emitter_filter.ondisk.analyse.explain_terms import GROUPINGS, JSON_SCHEMA, STATUSES, STORAGES
from emitter_filter.ondisk.method_memory import memory_json, memory_lines
from emitter_filter.ondisk.read.byte_source import ByteSource, open_sources
from emitter_filter.ondisk.read.file_model import PteFile
from emitter_filter.ondisk.read.planned_memory import PlannedMemory, plan_memory
from emitter_filter.ondisk.read.program_sections import count_plan_sections
from emitter_filter.ondisk.read.read_pte import read_pte_program
from emitter_filter.ondisk.read.readers import (
    Reader,
    find_named_data_readers,
    find_named_data_types,
    find_tensor_readers,
    inline_delegate_spans,
)
from emitter_filter.program.flatbuffer_tables import Table
from emitter_filter.program.reachability import DataRef, DataSpace
from emitter_filter.program.scalar_types import dtype_label
from emitter_filter.program.state_names import StateFile, state_file

__all__ = [
    "JSON_SCHEMA",
    "STORAGES",
    "STATUSES",
    "GROUPINGS",
    "Part",
    "Explanation",
    "explain_file",
    "explain_pte",
    "shorten",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Part:
    """Bytes of one file attributed to one thing.

    Attributes:
        file: The file's name, as `read_pte` gives it.
        offset: Where its first byte is. `program` bytes are not contiguous (the
            header and inline delegate data lie inside): there, the first one's.
        nbytes: Its size.
        storage: One of `STORAGES`.
        index: The entry's index in its space (`constant[i]`), the segment index
            (`named_data`, `delegate`, `segments`, `external`), the inline blob's
            index (`delegate_inline`); None for the rest.
        tag: The `.ptd`'s name without extension, for its parts; the plan's name
            for `values`, `instructions` and `operators`.
        status: One of `STATUSES`.
        dtype, shape: Of the first tensor value that refers to it, if any (a live
            one first); for XNNPACK's named data, the datatype and dims XNNPACK
            reads it as.
        layouts: Every (dtype, shape) a tensor value reads it as, that one first:
            the emitter stores equal bytes once for values of different shapes.
        names: The FQNs of the tensors that refer to it (with `names`, also the
            state tensors with its shape and bytes), the named-data keys, or the
            delegate's backend.
        readers: What reads it (`readers.Reader`).
        copies: The other places holding the same bytes (duplicated), or the
            other references to this range (shared).
    """

    file: str
    offset: int
    nbytes: int
    storage: str
    index: int | None = None
    tag: str | None = None
    status: str = "live"
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    names: tuple[str, ...] = ()
    readers: tuple[Reader, ...] = ()
    copies: tuple[str, ...] = ()
    layouts: tuple[tuple[str, tuple[int, ...]], ...] = ()
    #: Of named data: the FQNs of the state `--names` finds stored in it (also in `names`).
    state_names: tuple[str, ...] = ()

    @property
    def end(self) -> int:
        return self.offset + self.nbytes

    @property
    def label(self) -> str:
        """`constant[3]`, `external:model[0]`, `program`: as `audit` names copies."""
        where = self.storage if self.tag is None else f"{self.storage}:{self.tag}"
        return where if self.index is None else f"{where}[{self.index}]"

    @property
    def methods(self) -> tuple[str, ...]:
        """The methods that read it (its readers' plans), or whose section of the program it
        is: in a merged file, what the methods share."""
        if self.storage in ("values", "instructions", "operators"):
            assert self.tag is not None, "a plan's section is tagged with the plan's name"
            return (self.tag,)
        return tuple(dict.fromkeys(r.plan for r in self.readers))

    def group(self, by: str) -> str:
        """The value of this part for `--by` (one of `GROUPINGS`)."""
        if by == "storage":
            return self.storage
        if by == "method":
            return ", ".join(self.methods) or f"({self.storage})"
        if by == "status":
            return self.status
        if by == "dtype":
            return self.dtype or "-"
        if by == "reader":
            return self.readers[0].op if self.readers else f"({self.storage})"
        if by == "module":
            # Tensors' FQNs only: named-data keys and backends are no module paths, but the
            # state `--names` finds in a delegate's named data is.
            tensor = self.storage in ("constant", "mutable", "external")
            fqn = next(iter(self.state_names or (self.names if tensor else ())), None)
            if fqn is None:
                return f"({self.storage})"
            return fqn.rsplit(".", 1)[0] if "." in fqn else "(top level)"
        raise ValueError(f"unknown grouping {by!r}; expected one of {', '.join(GROUPINGS)}")

    def to_json(self) -> dict:
        return {
            "file": self.file,
            "offset": self.offset,
            "bytes": self.nbytes,
            "storage": self.storage,
            "index": self.index,
            "tag": self.tag,
            "label": self.label,
            "status": self.status,
            "dtype": self.dtype,
            "shape": None if self.shape is None else list(self.shape),
            "layouts": [{"dtype": dtype, "shape": list(shape)} for dtype, shape in self.layouts],
            "names": list(self.names),
            "readers": [r.describe() for r in self.readers],
            "methods": list(self.methods),
            "copies": list(self.copies),
        }


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


# --- attribution -------------------------------------------------------------


class _Attributor:
    """Builds the parts of one `.pte` and its `.ptd` files from what audit found."""

    def __init__(
        self,
        pte: PteFile,
        program: Table,
        program_data: bytes,
        report: AuditReport,
        sources: Mapping[str, ByteSource],
        state: StateFile | None,
    ) -> None:
        self.pte, self.report, self.sources, self.state = pte, report, sources, state
        self.tensor_readers = find_tensor_readers(pte, program)
        self.named_readers = find_named_data_readers(pte)
        self.named_types = find_named_data_types(pte, program, program_data, sources[pte.path])
        analysis = report.analysis
        assert analysis is not None, "audit_pte's report carries its analysis"
        self.count = analysis.count
        self.live = {
            (plan.name, value)
            for plan, values in zip(pte.plans, analysis.liveness.live_values, strict=True)
            for value in values
        }
        self.users: dict[DataRef, list] = {}
        # Live values first: a part shows the layout its live readers read.
        for tensor in sorted(pte.tensors, key=self._dead_value):
            self.users.setdefault(tensor.ref, []).append(tensor)
        self.dead = {(d.space, d.name if d.space == "named_data" else d.index) for d in report.dead}
        self.tags = {
            ptd.path: os.path.splitext(os.path.basename(ptd.path))[0] for ptd in pte.ptd_files
        }

    def _tensor_part(self, ref: DataRef, entry, storage: str, **fields) -> Part:
        users = self.users.get(ref, [])
        names = [t.name for t in users if t.name]
        if self.state is not None and entry.offset >= 0 and users:
            source = self.sources[entry.file]
            found = self.state.match(
                entry.nbytes,
                [t.shape for t in users],
                lambda: source.read(entry.offset, entry.nbytes, "stored data"),
            )
            names += [n.name for n in found]
        first = users[0] if users else None
        return Part(
            entry.file,
            entry.offset,
            entry.nbytes,
            storage,
            dtype=first.dtype if first else None,
            shape=first.shape if first else None,
            layouts=tuple(dict.fromkeys((t.dtype, tuple(t.shape)) for t in users)),
            names=tuple(dict.fromkeys(names)),
            readers=self.tensor_readers.get(ref, ()),
            **fields,
        )

    def _dead_value(self, tensor) -> bool:
        return (tensor.plan, tensor.value_index) not in self.live

    def _status(self, file: str, offset: int, nbytes: int) -> str:
        """`dead` where pruning frees the range (the one count, `analysis.ByteCount`)."""
        return "dead" if self.count.frees(file, offset, nbytes) else "live"

    def pte_parts(self, program: Table, program_data: bytes) -> list[Part]:
        pte, path = self.pte, self.pte.path
        parts = []
        if pte.header_length:
            parts.append(Part(path, 8, pte.header_length, "header"))
        spans = inline_delegate_spans(program, program_data)
        for blob in pte.delegates:
            storage = "delegate" if blob.location == "segment" else "delegate_inline"
            offset, nbytes = (
                (blob.offset, blob.nbytes) if storage == "delegate" else spans[blob.index]
            )
            readers = tuple(
                Reader(u.plan, f"{u.backend_id} delegate {u.index}", -1) for u in blob.users
            )
            live = blob.users or (
                storage == "delegate" and self._status(path, offset, nbytes) == "live"
            )
            parts.append(
                Part(
                    path,
                    offset,
                    nbytes,
                    storage,
                    blob.index,
                    status="live" if live else "dead",
                    names=tuple(dict.fromkeys(u.backend_id for u in blob.users)),
                    readers=readers,
                )
            )
        for space in (DataSpace.CONSTANT, DataSpace.MUTABLE):
            for index, entry in sorted(pte.entries[space].items()):
                status = self._status(entry.file, entry.offset, entry.nbytes)
                parts.append(
                    self._tensor_part(
                        DataRef(space, index), entry, space.value, index=index, status=status
                    )
                )
        keys: dict[int, list] = {}
        for named in pte.named_data:
            if named.file == path:
                keys.setdefault(named.segment_index, []).append(named)
        for index, entries in keys.items():
            parts.append(self._named_part(entries, "named_data", index, None))
        for segment in pte.unreferenced_segments:
            parts.append(
                Part(
                    path,
                    segment.offset,
                    segment.size,
                    "segments",
                    segment.index,
                    status=self._status(path, segment.offset, segment.size),
                )
            )
        return parts

    def _named_part(self, entries, storage: str, index: int, tag: str | None) -> Part:
        keys = [e.key for e in entries]
        readers = tuple(dict.fromkeys(r for key in keys for r in self.named_readers.get(key, ())))
        dtype, shape = next(
            (self.named_types[k] for k in keys if k in self.named_types), (None, None)
        )
        first = entries[0]
        fqns: tuple[str, ...] = ()
        if self.state is not None:
            source = self.sources[first.file]
            found = self.state.match_delegated(
                first.nbytes,
                shape,
                lambda: source.read(first.offset, first.nbytes, "named data"),
            )
            fqns = tuple(n.name for n in found)
        return Part(
            first.file,
            first.offset,
            first.nbytes,
            storage,
            index,
            tag,
            status=self._status(first.file, first.offset, first.nbytes),
            dtype=dtype,
            shape=shape,
            names=(*keys, *fqns),
            readers=readers,
            state_names=fqns,
        )

    def ptd_parts(self) -> list[Part]:
        by_fqn = {t.name: t for t in self.pte.tensors if t.ref.space is DataSpace.EXTERNAL}
        parts = []
        for ptd in self.pte.ptd_files:
            tag = self.tags[ptd.path]
            segments: dict[int, list] = {}
            for named in ptd.named_data.values():
                segments.setdefault(named.segment_index, []).append(named)
            for index, entries in segments.items():
                tensors = [by_fqn[e.key] for e in entries if e.key in by_fqn]
                if not tensors:
                    parts.append(self._named_part(entries, "named_data", index, tag))
                    continue
                entry = self.pte.entries[DataSpace.EXTERNAL][tensors[0].ref.index]
                status = self._status(entry.file, entry.offset, entry.nbytes)
                part = self._tensor_part(
                    tensors[0].ref, entry, "external", index=index, tag=tag, status=status
                )
                # Each key of the segment is a layout of its bytes (`share` gives one key each).
                users = [u for t in tensors for u in self.users.get(t.ref, ())]
                users.sort(key=self._dead_value)
                readers = [r for t in tensors for r in self.tensor_readers.get(t.ref, ())]
                parts.append(
                    replace(
                        part,
                        names=tuple(e.key for e in entries),
                        dtype=users[0].dtype if users else part.dtype,
                        shape=users[0].shape if users else part.shape,
                        layouts=tuple(dict.fromkeys((u.dtype, tuple(u.shape)) for u in users)),
                        readers=tuple(dict.fromkeys(readers)),
                    )
                )
            used = set(segments)
            parts += [
                Part(ptd.path, s.offset, s.size, "segments", s.index, tag)
                for s in ptd.segments
                if s.index not in used
            ]
        return parts

    def outside(self) -> list[Part]:
        """External entries of no file given: sized from their tensors' shapes."""
        return [
            self._tensor_part(
                DataRef(DataSpace.EXTERNAL, index),
                entry,
                "external",
                index=index,
                status="dead" if ("external", index) in self.dead else "live",
            )
            for index, entry in sorted(self.pte.entries[DataSpace.EXTERNAL].items())
            if entry.offset < 0
        ]


def _mark_copies(parts: list[Part], report: AuditReport) -> list[Part]:
    """Audit's duplicates: every copy after the first `duplicated`, each naming the others."""
    position = {
        (p.storage if p.tag is None else "external", p.tag, p.index): i
        for i, p in enumerate(parts)
        if p.storage in ("constant", "mutable", "named_data", "external")
    }
    for group in report.duplicates:
        try:
            found = [position[(c.space, c.tag, c.index)] for c in group.copies]
        except KeyError:
            raise InvariantError(
                f"{report.path}: a duplicate copy is no part: {group.copies}"
            ) from None
        labels = [parts[i].label for i in found]
        for number, i in enumerate(found):
            others = tuple(label for label in labels if label != parts[i].label)
            status = parts[i].status
            if status == "live" and number:
                status = "duplicated"
            parts[i] = replace(parts[i], status=status, copies=others)
    return parts


def _merge_shared(parts: list[Part], report: AuditReport) -> list[Part]:
    """One part per range audit lists as shared, its bytes on its first reference."""
    shared = {(s.file, s.offset, s.nbytes) for s in report.shared}
    merged: dict[tuple[str, int, int], Part] = {}
    for part in parts:
        where = (part.file, part.offset, part.nbytes)
        first = merged.get(where)
        if first is None:
            merged[where] = part
            continue
        if where not in shared:
            raise InvariantError(
                f"{part.file}: {first.label} and {part.label} read the same range at "
                f"{part.offset}, which audit does not list as shared"
            )
        status = first.status if first.status == "dead" else "shared"
        # Names stay the first reference's (a key is not the tensor's name); readers are all.
        merged[where] = replace(
            first,
            status=status,
            copies=(*first.copies, part.label),
            readers=tuple(dict.fromkeys((*first.readers, *part.readers))),
        )
    return list(merged.values())


def _fill_gaps(
    file: str, size: int, structure_end: int, structure: str, parts: Iterable[Part]
) -> list[Part]:
    """`parts` of one file, by offset, with the bytes between them attributed.

    Bytes before `structure_end` no part claims are the file's flatbuffer
    (`structure`, one part); bytes after it, padding (one part per gap).

    Raises:
        PteFormatError: Two parts overlap, or one ends past the file.
    """
    placed = sorted((p for p in parts if p.nbytes), key=lambda p: (p.offset, p.nbytes))
    out: list[Part] = []
    flatbuffer = 0
    cursor = 0

    def gap(start: int, end: int) -> None:
        nonlocal flatbuffer
        cut = min(max(start, structure_end), end)
        flatbuffer += cut - start
        if end > cut:
            out.append(Part(file, cut, end - cut, "padding", status="padding"))

    for part in placed:
        if part.offset < cursor:
            raise PteFormatError(
                file,
                f"{part.label} ({part.nbytes} bytes) overlaps the part before it, "
                f"which ends at {cursor}",
                part.offset,
            )
        gap(cursor, part.offset)
        out.append(part)
        cursor = part.end
    if cursor > size:
        raise PteFormatError(file, f"{out[-1].label} ends at {cursor}, past the file ({size})")
    gap(cursor, size)
    if flatbuffer:
        out.insert(0, Part(file, 0, flatbuffer, structure))
    return out


def _split_program(pte: PteFile, program_data: bytes, parts: list[Part]) -> list[Part]:
    """`parts` with each plan's values, instructions and operators taken out of `program`."""
    sections = [
        Part(pte.path, 0, nbytes, section, tag=plan.name)
        for plan, counts in zip(
            pte.plans,
            count_plan_sections(program_data, pte.path, (8, pte.header_length)),
            strict=True,
        )
        for section, nbytes in counts.items()
        if nbytes
    ]
    taken = sum(p.nbytes for p in sections)
    programs: list[int | None] = [i for i, p in enumerate(parts) if p.storage == "program"]
    (position,) = programs or [None]
    if position is None or parts[position].nbytes < taken:
        raise InvariantError(f"{pte.path}: plan sections of {taken} bytes exceed the program's")
    rest = replace(parts[position], nbytes=parts[position].nbytes - taken)
    return [*parts[:position], *([rest] if rest.nbytes else []), *sections, *parts[position + 1 :]]


def explain_pte(
    pte: PteFile,
    program: Table,
    program_data: bytes,
    sources: Mapping[str, ByteSource],
    state: StateFile | None = None,
) -> Explanation:
    """Attributes every byte of what `read_pte_program` returned; see `explain_file`.

    Args:
        pte, program, program_data: What `read_pte_program` returned. Not modified.
        sources: The files `pte` was read from, open, by the names it gives them.
        state: The model's state tensors, to name entries by content.
    """
    report = audit_pte(pte, sources, (), state)
    attributor = _Attributor(pte, program, program_data, report, sources, state)
    found = [
        p for p in attributor.pte_parts(program, program_data) + attributor.ptd_parts() if p.nbytes
    ]
    parts = _merge_shared(_mark_copies(found, report), report)
    by_file: dict[str, list[Part]] = {}
    for part in parts:
        by_file.setdefault(part.file, []).append(part)
    placed = _split_program(
        pte,
        program_data,
        _fill_gaps(
            pte.path, pte.file_bytes, pte.program_size, "program", by_file.get(pte.path, ())
        ),
    )
    for ptd in pte.ptd_files:
        placed += _fill_gaps(
            ptd.path, ptd.file_bytes, ptd.flatbuffer_end, "ptd_header", by_file.get(ptd.path, ())
        )
    files = tuple(report.files)
    explanation = Explanation(
        pte.path,
        files,
        tuple(placed),
        tuple(attributor.outside()),
        report,
        memory=plan_memory(program),
    )
    total = sum(p.nbytes for p in explanation.parts)
    if total != explanation.file_bytes:
        raise InvariantError(
            f"{pte.path}: parts add up to {total}, files hold {explanation.file_bytes}"
        )
    return explanation


def explain_file(
    path: str | os.PathLike | bytes,
    ptd_paths: Sequence[str | os.PathLike] = (),
    *,
    names: str | os.PathLike | StateFile | None = None,
) -> Explanation:
    """Attributes every byte of a `.pte` file (and its `.ptd` files) to what it holds.

    Args:
        path: The `.pte` file, or its bytes. Not modified.
        ptd_paths: Its `.ptd` files. Not modified.
        names: A `torch.export` `.pt2` or an ETRecord of the same model (read
            with torch), or a `StateFile`: names the entries by content.

    Raises:
        PteFormatError: A file is malformed, or the `.ptd` does not match the `.pte`.
        ProgramFormatError: The program refers to something that does not exist.
    """
    state = state_file(names)
    read = read_pte_program(path, ptd_paths)
    with contextlib.ExitStack() as stack:
        return explain_pte(
            read.pte,
            read.program,
            read.program_data,
            open_sources(stack, (path, *ptd_paths)),
            state,
        )
