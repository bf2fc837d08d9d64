"""Audit several programs and the `.ptd` files they load with (what `share` writes) as one set.

Audited alone, each program would count the entries of a shared `.ptd` that
only the others read as dead. As a set: each program's own entries are judged
by `audit_file`, as for a file on its own; a `.ptd` entry is dead only when no
program of the set reads it (an external tensor names it, or one of its
delegates may: `dead_bytes.classify_file_named_data`'s rules); and a content
stored in two or more files of the set is what `share` would still store once
(`share_find.find_shared`, with the same `min_bytes`). A named-data key two programs
hold with different bytes is a key clash (`share_find.key_clashes`): `audit
--fail-on-key-clash` fails on one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from emitter_filter.ondisk.analyse.audit_report import AuditReport
from emitter_filter.ondisk.analyse.share_find import (
    DEFAULT_MIN_BYTES,
    KeyClash,
    SharedContent,
    find_set_shared,
    key_clashes,
    read_set,
)
from emitter_filter.ondisk.audit import audit_file
from emitter_filter.ondisk.read.data_files import data_files_for

__all__ = ["ProgramInSet", "SetAuditReport", "audit_set", "set_key_clashes"]


@dataclass(frozen=True)
class ProgramInSet:
    """One program of the set.

    Attributes:
        path: The `.pte`.
        file_bytes: Its size.
        ptd_bytes: Bytes of the `.ptd` entries it reads (each segment once).
        dead_bytes: Bytes of its own (`.pte`) entries no plan of it reaches.
        report: `audit_file` of it with the `.ptd` files it loads with, for the details.
    """

    path: str
    file_bytes: int
    ptd_bytes: int
    dead_bytes: int
    report: AuditReport


@dataclass(frozen=True)
class SetAuditReport:
    """What `audit_set` found.

    Attributes:
        programs: Each program, in the order given.
        ptd_files: Each `.ptd` and its size.
        dead_ptd_keys: `.ptd` keys no program of the set reads, with their bytes
            (a segment counted once, when none of its keys is read).
        shared: Contents stored in two or more files of the set.
        key_clashes: Named-data keys programs of the set hold with different bytes.
    """

    programs: tuple[ProgramInSet, ...]
    ptd_files: tuple[tuple[str, int], ...]
    dead_ptd_keys: tuple[tuple[str, int], ...]
    shared: tuple[SharedContent, ...]
    key_clashes: tuple[KeyClash, ...] = ()

    @property
    def dead_bytes(self) -> int:
        return sum(p.dead_bytes for p in self.programs) + sum(n for _, n in self.dead_ptd_keys)

    @property
    def duplicated_bytes(self) -> int:
        return sum(c.saved_bytes for c in self.shared)

    def lines(self) -> list[str]:
        """The text `audit A.pte B.pte --data shared.ptd` prints."""
        lines = [
            f"{p.path}: {p.file_bytes:,} B, reads {p.ptd_bytes:,} B of the .ptd; "
            f"{p.dead_bytes:,} B dead"
            for p in self.programs
        ]
        lines += [f"{path}: {size:,} B" for path, size in self.ptd_files]
        dead = sum(n for _, n in self.dead_ptd_keys)
        lines.append(
            f"set: {self.dead_bytes:,} dead bytes ({len(self.dead_ptd_keys)} .ptd entries no "
            f"program reads, {dead:,} B); {self.duplicated_bytes:,} B stored in more than one "
            f"file ({len(self.shared)} contents)"
        )
        lines += [f"  dead in the .ptd: {key} ({n:,} B)" for key, n in self.dead_ptd_keys]
        for content in self.shared:
            files = ", ".join(sorted({c.file for c in content.copies}))
            lines.append(f"  stored in {files}: {content.nbytes:,} B")
        lines.append(
            f"key clashes: {len(self.key_clashes) or 'none'}"
            + (
                " (a weights cache shared by the programs would mix them up)"
                if self.key_clashes
                else ""
            )
        )
        lines += [f"  {clash.line()}" for clash in self.key_clashes]
        return lines

    def to_json(self) -> dict:
        return {
            "programs": [
                {
                    "path": p.path,
                    "bytes": p.file_bytes,
                    "ptd_bytes": p.ptd_bytes,
                    "dead_bytes": p.dead_bytes,
                }
                for p in self.programs
            ],
            "ptd_files": [{"path": path, "bytes": size} for path, size in self.ptd_files],
            "dead_bytes": self.dead_bytes,
            "dead_ptd_keys": [{"key": k, "bytes": n} for k, n in self.dead_ptd_keys],
            "duplicated_bytes": self.duplicated_bytes,
            "shared": [
                {"bytes": c.nbytes, "sha256": c.sha256, "files": sorted({b.file for b in c.copies})}
                for c in self.shared
            ],
            "data": [entry for p in self.programs for entry in p.report.to_json()["data"]],
            "key_clashes": [clash.to_json() for clash in self.key_clashes],
        }


def _read_keys(report: AuditReport, ptd_keys: set[str]) -> set[str]:
    """The `.ptd` keys a program reads: all but those its own audit finds dead."""
    dead = {d.name for d in report.dead if d.space in ("named_data", "external")}
    return ptd_keys - dead


def audit_set(
    ptes: Sequence[str | os.PathLike],
    ptd_paths: Sequence,
    *,
    min_bytes: int = DEFAULT_MIN_BYTES,
    data_beside: bool = True,
) -> SetAuditReport:
    """Audits programs and the `.ptd` files they load with as one set.

    Args:
        ptes: The programs. Not modified.
        ptd_paths: The `.ptd` files they load with, as `share_files` takes them:
            `IN.ptd` for every program, `FILE=IN.ptd` for one; none given, each
            reads the `.ptd` beside it with its stem (`data_files.data_files_for`).
            Not modified.
        min_bytes: Contents stored in several files count as shared from this size.

    Raises:
        PteFormatError: A file is malformed, or a `.ptd` does not match a program.
        MethodSetError: A `FILE=` names none of the programs.
    """
    pte_files = [os.fspath(p) for p in ptes]
    data_of = data_files_for(pte_files, ptd_paths, beside=data_beside)
    programs = read_set(pte_files, list(dict.fromkeys(p for f in data_of for p in f)), data_of)
    ptd_files = [ptd for ptd, _ in programs.ptds]
    # Per (file, key): one program's `head.weight` is not another's.
    segment_of = {
        (ptd.path, key): (ptd.path, entry.segment_index, entry.nbytes)
        for ptd in ptd_files
        for key, entry in ptd.named_data.items()
    }
    read_by_any: set[tuple[str, str]] = set()
    members = []
    for read, files in zip(programs.reads, data_of, strict=True):
        report = audit_file(read.pte.path, files)
        paths = {ptd.path for ptd in read.pte.ptd_files}
        own = {key for path, key in segment_of if path in paths}
        keys = _read_keys(report, own)
        reads = {(path, key) for path, key in segment_of if path in paths and key in keys}
        read_by_any |= reads
        own_dead = sum(
            d.nbytes
            for d in report.dead
            if not (d.space in ("named_data", "external") and d.name in own)
        )
        ptd_bytes = sum(n for _, _, n in {segment_of[k] for k in reads})
        members.append(
            ProgramInSet(read.pte.path, read.pte.file_bytes, ptd_bytes, own_dead, report)
        )
    read_segments = {segment_of[k][:2] for k in read_by_any}
    counted: set[tuple[str, int]] = set()
    dead_keys = []
    for (path, key), (_, segment, nbytes) in segment_of.items():
        if (path, key) in read_by_any:
            continue
        freed = (path, segment) not in read_segments and (path, segment) not in counted
        counted.add((path, segment))
        dead_keys.append((key, nbytes if freed else 0))
    found = find_set_shared(programs, min_bytes)
    return SetAuditReport(
        programs=tuple(members),
        ptd_files=tuple((p.path, p.file_bytes) for p in ptd_files),
        dead_ptd_keys=tuple(dead_keys),
        shared=found.shared,
        key_clashes=key_clashes(programs, found),
    )


def set_key_clashes(ptes: Sequence[str], data_of: Sequence[Sequence[str]]) -> tuple[KeyClash, ...]:
    """The named-data keys programs given together hold with different bytes, whether or not
    they read a common `.ptd` (XNNPACK keeps its keys in each `.pte`): what `explain` of
    several programs lists and `audit` of several warns about. Every content compared,
    whatever its size (`min_bytes` 1)."""
    programs = read_set(list(ptes), list(dict.fromkeys(p for f in data_of for p in f)), data_of)
    return key_clashes(programs, find_set_shared(programs, min_bytes=1))
