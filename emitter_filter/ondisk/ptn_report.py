"""`audit`, `explain` and `diff` of ExecuTorch native packages (`.ptn`).

A `.ptn` (`read/read_ptn.py`) holds its constants in one safetensors entry and says which
method reads each in its native graph. Every byte of the zip is a part here: the zip's
headers and directory, the graph, the safetensors header, each constant. A constant no
method reads is dead; one whose bytes another constant holds too is duplicated (the copies
after the first); an alias in `aliases.json` is a key whose bytes are stored once, under its
owner's key, so the bytes it saves are its owner's.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

from emitter_filter.ondisk.read.read_ptn import PtnPackage, read_ptn

__all__ = ["PtnPart", "PtnReport", "PtnDiff", "PtnChange", "ptn_report", "diff_ptn"]

_HASH_CHUNK = 1 << 20


@dataclass(frozen=True)
class PtnPart:
    """One run of a package's bytes: `status` is `live`, `dead`, `duplicated` (a copy of an
    earlier constant's bytes) or `structure` (the zip's and the graph's own bytes)."""

    name: str
    storage: str
    offset: int
    nbytes: int
    status: str
    readers: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    dtype: str = ""
    shape: tuple[int, ...] = ()

    def to_json(self) -> dict:
        document = {
            "name": self.name,
            "storage": self.storage,
            "offset": self.offset,
            "nbytes": self.nbytes,
            "status": self.status,
        }
        if self.storage == "constant":
            document.update(
                dtype=self.dtype,
                shape=list(self.shape),
                readers=list(self.readers),
                aliases=list(self.aliases),
            )
        return document


@dataclass(frozen=True)
class PtnReport:
    """What `audit` and `explain` say of one `.ptn`: every part, summing to `size`."""

    path: str
    size: int
    methods: tuple[str, ...]
    parts: tuple[PtnPart, ...]
    aliases: dict[str, str]

    def bytes_of(self, status: str) -> int:
        return sum(p.nbytes for p in self.parts if p.status == status)

    @property
    def dead_bytes(self) -> int:
        return self.bytes_of("dead")

    @property
    def alias_saved_bytes(self) -> int:
        """The bytes `aliases.json` keeps from being stored again: each alias's owner's."""
        sizes = {p.name: p.nbytes for p in self.parts if p.storage == "constant"}
        return sum(sizes[owner] for owner in self.aliases.values())

    def to_json(self) -> dict:
        return {
            "path": self.path,
            "format": "ptn",
            "total_bytes": self.size,
            "methods": list(self.methods),
            "constant_bytes": sum(p.nbytes for p in self.parts if p.storage == "constant"),
            "dead_bytes": self.dead_bytes,
            "duplicated_bytes": self.bytes_of("duplicated"),
            "aliases": dict(sorted(self.aliases.items())),
            "alias_saved_bytes": self.alias_saved_bytes,
            "parts": [p.to_json() for p in self.parts],
        }

    def summary_lines(self) -> list[str]:
        """`audit`'s text: the totals and each dead or duplicated constant."""
        document = self.to_json()
        lines = [
            f"{self.path}: ExecuTorch native package (.ptn), {self.size:,} bytes, "
            f"methods: {', '.join(self.methods) or '(none)'}",
            f"  constants:          {document['constant_bytes']:>12,} B",
            f"  dead:               {self.dead_bytes:>12,} B",
            f"  duplicated:         {document['duplicated_bytes']:>12,} B",
            f"  stored once (aliases.json): {len(self.aliases)} key(s), "
            f"{self.alias_saved_bytes:,} B not stored again",
        ]
        for part in self.parts:
            if part.status in ("dead", "duplicated"):
                lines.append(f"  {part.status} {part.name!r}: {part.nbytes:,} B")
        return lines

    def to_text(self, top: int | None = None) -> str:
        """`explain`'s text: every part, largest first (the `top` largest; None: all)."""
        parts = sorted(self.parts, key=lambda p: (-p.nbytes, p.offset))
        rows = parts if top is None else parts[:top]
        lines = [*self.summary_lines()[:1], f"  {'bytes':>12}  {'status':<10} {'storage':<13} name"]
        for part in rows:
            readers = f"  read by {', '.join(part.readers)}" if part.readers else ""
            aliases = f"  also as {', '.join(part.aliases)}" if part.aliases else ""
            lines.append(
                f"  {part.nbytes:>12,}  {part.status:<10} {part.storage:<13} "
                f"{part.name or '-'}{readers}{aliases}"
            )
        if len(rows) < len(parts):
            rest = parts[len(rows) :]
            lines.append(f"  {sum(p.nbytes for p in rest):>12,}  ({len(rest)} more parts)")
        lines.append(f"  {self.size:>12,}  total")
        return "\n".join(lines)


def _digest(path: str, offset: int, nbytes: int) -> bytes:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        file.seek(offset)
        left = nbytes
        while left:
            chunk = file.read(min(left, _HASH_CHUNK))
            if not chunk:
                break
            digest.update(chunk)
            left -= len(chunk)
    return digest.digest()


def _report(package: PtnPackage) -> PtnReport:
    # Only constants of one size can hold the same bytes: hash those alone.
    sizes: dict[int, int] = {}
    for constant in package.constants:
        sizes[constant.nbytes] = sizes.get(constant.nbytes, 0) + 1
    seen: set[tuple[int, bytes]] = set()
    copies: set[str] = set()
    for constant in package.constants:
        if constant.nbytes and sizes[constant.nbytes] > 1:
            content = (constant.nbytes, _digest(package.path, constant.offset, constant.nbytes))
            if content in seen:
                copies.add(constant.key)
            seen.add(content)
    by_key = {c.key: c for c in package.constants}
    parts = []
    for span in package.spans:
        read = by_key.get(span.name) if span.storage == "constant" else None
        if read is None:
            parts.append(PtnPart(span.name, span.storage, span.offset, span.nbytes, "structure"))
            continue
        status = "dead" if not read.readers else "duplicated" if read.key in copies else "live"
        parts.append(
            PtnPart(
                span.name,
                span.storage,
                span.offset,
                span.nbytes,
                status,
                read.readers,
                read.aliases,
                read.dtype,
                read.shape,
            )
        )
    return PtnReport(package.path, package.size, package.methods, tuple(parts), package.aliases)


def ptn_report(path: str | os.PathLike) -> PtnReport:
    """`audit` and `explain` of a `.ptn`: every byte of it, by part.

    Raises:
        PteFormatError: `path` is not a readable `.ptn` (`read_ptn`).
    """
    return _report(read_ptn(path))


@dataclass(frozen=True)
class PtnChange:
    """One part of OLD or NEW whose bytes differ, by (storage, name)."""

    storage: str
    name: str
    old_bytes: int
    new_bytes: int

    @property
    def delta(self) -> int:
        return self.new_bytes - self.old_bytes

    @property
    def kind(self) -> str:
        return "added" if not self.old_bytes else "removed" if not self.new_bytes else "changed"

    @property
    def label(self) -> str:
        return f"{self.storage} {self.name or '-'}"

    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PtnDiff:
    """`diff` of two `.ptn` packages: each part's bytes in OLD and NEW."""

    old_path: str
    new_path: str
    old_bytes: int
    new_bytes: int
    changes: tuple[PtnChange, ...]

    @property
    def delta(self) -> int:
        return self.new_bytes - self.old_bytes

    def over(self, limit: tuple[int | None, float | None]) -> bool:
        """Whether NEW exceeds OLD by more than `growth_limit`'s result."""
        nbytes, percent = limit
        if nbytes is not None:
            return self.delta > nbytes
        assert percent is not None  # growth_limit gives one of the two
        return self.delta > self.old_bytes * percent / 100

    def growth(self) -> tuple[PtnChange, ...]:
        """The changes that account for the growth, largest first, until they cover it."""
        found, covered = [], 0
        for change in sorted(self.changes, key=lambda c: -c.delta):
            if change.delta <= 0 or covered >= self.delta:
                break
            found.append(change)
            covered += change.delta
        return tuple(found)

    def to_json(self) -> dict:
        return {
            "old": self.old_path,
            "new": self.new_path,
            "format": "ptn",
            "old_bytes": self.old_bytes,
            "new_bytes": self.new_bytes,
            "delta": self.delta,
            "changes": [
                {
                    "storage": c.storage,
                    "name": c.name,
                    "old_bytes": c.old_bytes,
                    "new_bytes": c.new_bytes,
                    "delta": c.delta,
                }
                for c in self.changes
            ],
        }

    def to_text(self, top: int | None = None) -> str:
        lines = [
            f"{self.old_path} -> {self.new_path}: {self.old_bytes:,} -> {self.new_bytes:,} B "
            f"({self.delta:+,})"
        ]
        changes = sorted(self.changes, key=lambda c: (-abs(c.delta), c.storage, c.name))
        for change in changes if top is None else changes[:top]:
            lines.append(
                f"  {change.delta:>+12,}  {change.kind:<8} {change.storage:<13} {change.name or '-'}"
            )
        return "\n".join(lines)

    def to_markdown(self, top: int | None = None) -> str:
        lines = [
            f"**{self.old_path} → {self.new_path}**: {self.old_bytes:,} → {self.new_bytes:,} B "
            f"({self.delta:+,})",
            "",
            "| delta | change | storage | name |",
            "|---:|---|---|---|",
        ]
        changes = sorted(self.changes, key=lambda c: (-abs(c.delta), c.storage, c.name))
        for c in changes if top is None else changes[:top]:
            lines.append(f"| {c.delta:+,} | {c.kind} | {c.storage} | `{c.name or '-'}` |")
        return "\n".join(lines)


def _totals(report: PtnReport) -> dict[tuple[str, str], int]:
    totals: dict[tuple[str, str], int] = {}
    for part in report.parts:
        key = (part.storage, part.name)
        totals[key] = totals.get(key, 0) + part.nbytes
    return totals


def diff_ptn(old: str | os.PathLike, new: str | os.PathLike) -> PtnDiff:
    """The parts of two `.ptn` packages whose bytes differ; their deltas sum to the files'.

    Raises:
        PteFormatError: Either is not a readable `.ptn`.
    """
    before, after = ptn_report(old), ptn_report(new)
    old_totals, new_totals = _totals(before), _totals(after)
    changes = tuple(
        PtnChange(key[0], key[1], old_totals.get(key, 0), new_totals.get(key, 0))
        for key in sorted({*old_totals, *new_totals})
        if old_totals.get(key, 0) != new_totals.get(key, 0)
    )
    return PtnDiff(before.path, after.path, before.size, after.size, changes)
