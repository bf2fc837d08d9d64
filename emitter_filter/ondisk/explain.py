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
no file: `outside` lists them, apart from the parts. A part is `explain_part.Part`;
the result, which renders itself, `explanation.Explanation`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace

from emitter_filter.errors import InvariantError
from emitter_filter.ondisk.analyse.audit_report import AuditReport, audit_pte
from emitter_filter.ondisk.analyse.explain_terms import GROUPINGS, JSON_SCHEMA, STATUSES, STORAGES
from emitter_filter.ondisk.explain_cover import fill_gaps, mark_copies, merge_shared, split_program
from emitter_filter.ondisk.explain_part import Part
from emitter_filter.ondisk.explanation import Explanation, shorten
from emitter_filter.ondisk.read.byte_source import ByteSource, open_sources
from emitter_filter.ondisk.read.file_model import PteFile
from emitter_filter.ondisk.read.planned_memory import plan_memory
from emitter_filter.ondisk.read.read_pte import read_pte_program
from emitter_filter.ondisk.read.readers import (
    Reader,
    find_named_data_readers,
    find_named_data_types,
    find_tensor_readers,
    inline_delegate_spans,
)
from emitter_filter.ondisk.read.state_file import state_file
from emitter_filter.program.flatbuffer_tables import Table
from emitter_filter.program.reachability import DataRef, DataSpace
from emitter_filter.program.state_names import StateFile

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
        """`dead` where pruning frees the range (the one count, `dead_bytes.ByteCount`)."""
        return "dead" if self.count.frees(file, offset, nbytes) else "live"

    def pte_parts(self, program: Table, program_data: bytes) -> list[Part]:
        pte, path = self.pte, self.pte.path
        parts = []
        if pte.header_length:
            parts.append(Part(path, 8, pte.header_length, "header"))
        parts += self._delegate_parts(program, program_data)
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

    def _delegate_parts(self, program: Table, program_data: bytes) -> list[Part]:
        """Each delegate blob, in a segment or inline in the program flatbuffer."""
        path = self.pte.path
        parts = []
        spans = inline_delegate_spans(program, program_data)
        for blob in self.pte.delegates:
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
    parts = merge_shared(mark_copies(found, report), report)
    by_file: dict[str, list[Part]] = {}
    for part in parts:
        by_file.setdefault(part.file, []).append(part)
    placed = split_program(
        pte,
        program_data,
        fill_gaps(pte.path, pte.file_bytes, pte.program_size, "program", by_file.get(pte.path, ())),
    )
    for ptd in pte.ptd_files:
        placed += fill_gaps(
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
