"""Why a `.pte` grew: `emitter-filter diff OLD NEW`, entry by entry.

Both files are explained (`explain.explain_pte`: the same attribution, the same
audit), then their parts are matched, in this order, each step only among the
parts the steps before left unmatched:

1. by name: the FQNs or named-data keys, where the set of them is unique on both sides;
2. by readers, dtype and shape: the same calls read them (`readers.Reader`:
   plan, operator, argument, and the how-manieth call of that operator);
3. by content: identical bytes (their sha256; only parts whose size a part on
   the other side shares are hashed; a budget records its parts' digests, so it
   matches a file with its record in this step too);
4. by readers alone (a dtype or shape that changed); XNNPACK's named data (keyed
   by content, so a new key when the weight changes) by its delegate, its dims
   and how many such came before it; then the program's sections, the headers
   and the delegates by place.

Reading content only after names and readers keeps a diff of two large files
from reading their tensors: what the first two steps match is never read. What
is left is added (only in NEW) or removed (only in OLD). Padding is compared as
one total per file.

`diff_parts` (`diff_match`) does the matching on parts alone (content only when
it is given a way to digest them, `digest_parts`), so a budget compares a file with
a recorded breakdown the way `diff` compares two files; here, what the match adds
up to (`SizeDiff`, which renders itself) and the files read to get there.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from emitter_filter.ondisk.analyse.explain_terms import STORAGES
from emitter_filter.ondisk.diff_match import HAS_BYTES, Change, DigestFn, diff_parts, digest_parts
from emitter_filter.ondisk.explain import explain_pte
from emitter_filter.ondisk.explain_part import Part
from emitter_filter.ondisk.explanation import Explanation
from emitter_filter.ondisk.method_memory import MemoryChange, memory_changes
from emitter_filter.ondisk.read.byte_source import ByteSource, open_sources
from emitter_filter.ondisk.read.read_pte import read_pte_program
from emitter_filter.ondisk.read.state_file import state_file
from emitter_filter.program.state_names import StateFile

__all__ = [
    "JSON_SCHEMA",
    "Change",
    "SizeDiff",
    "diff_parts",
    "diff_files",
    "diff_explanations",
    "growth_limit",
    "totals_of",
    "digest_parts",
    "DigestFn",
    "HAS_BYTES",
]

#: The value of the "schema" key of `SizeDiff.to_json()`.
JSON_SCHEMA = "emitter-filter-diff/1"


def growth_limit(text: str) -> tuple[int | None, float | None]:
    """`--max-growth`: `BYTES` or `PCT%`, as (bytes, None) or (None, percent). A negative
    limit is a shrink asked for: `-5%` fails a NEW that is not 5% smaller than OLD."""
    value = text.strip()
    number = value[:-1] if value.endswith("%") else value
    try:
        parsed = float(number) if value.endswith("%") else int(number)
    except ValueError:
        raise ValueError(
            f"--max-growth {text!r}: expected BYTES or PCT% (e.g. 4096 or 1.5%)"
        ) from None
    if not math.isfinite(parsed):
        raise ValueError(f"--max-growth {text!r}: expected a finite number")
    return (None, float(parsed)) if value.endswith("%") else (int(parsed), None)


@dataclass(frozen=True)
class SizeDiff:
    """The result of `diff_files`: OLD and NEW, by storage and status, and each change.

    Attributes:
        old_path, new_path: The two `.pte` files.
        old_bytes, new_bytes: Their sizes with their `.ptd` files.
        old_totals, new_totals: Bytes per storage, then per status (`"status:dead"`).
        changes: What `diff_parts` returned.
        memory: Each method's planned arena that grew or shrank
            (`method_memory.memory_changes`): memory, not bytes of the files.
    """

    old_path: str
    new_path: str
    old_bytes: int
    new_bytes: int
    old_totals: Mapping[str, int]
    new_totals: Mapping[str, int]
    changes: tuple[Change, ...]
    memory: tuple[MemoryChange, ...] = ()

    @property
    def delta(self) -> int:
        return self.new_bytes - self.old_bytes

    @property
    def unchanged(self) -> bool:
        return (
            not self.changes and not self.memory and dict(self.old_totals) == dict(self.new_totals)
        )

    def over(self, limit: tuple[int | None, float | None]) -> bool:
        """Whether NEW exceeds OLD by more than `growth_limit`'s result."""
        nbytes, percent = limit
        if nbytes is not None:
            return self.delta > nbytes
        if percent is None:
            raise TypeError("a growth limit is (bytes, None) or (None, percent)")
        return self.delta > self.old_bytes * percent / 100

    def growth(self) -> tuple[Change, ...]:
        """The changes that account for the growth, largest first, until they cover it."""
        found, covered = [], 0
        for change in sorted(self.changes, key=lambda c: -c.delta):
            if change.delta <= 0 or covered >= self.delta:
                break
            found.append(change)
            covered += change.delta
        return tuple(found)

    def rows(self) -> list[tuple[str, int, int]]:
        """(storage or status, old, new) for each with bytes in either file."""
        keys = [
            k
            for k in (*STORAGES, *(f"status:{s}" for s in ("live", "dead", "duplicated", "shared")))
            if self.old_totals.get(k) or self.new_totals.get(k)
        ]
        return [(k, self.old_totals.get(k, 0), self.new_totals.get(k, 0)) for k in keys]

    def headline(self) -> str:
        if self.unchanged:
            return f"{self.old_path} -> {self.new_path}: no change ({self.new_bytes:,} bytes)"
        percent = f", {self.delta / self.old_bytes:+.1%}" if self.old_bytes else ""
        return (
            f"{self.old_path} -> {self.new_path}: {self.old_bytes:,} -> {self.new_bytes:,} "
            f"bytes ({self.delta:+,}{percent})"
        )

    def to_json(self) -> dict:
        """The stable JSON form; docs/explain.md documents it, `JSON_SCHEMA` versions it."""
        return {
            "schema": JSON_SCHEMA,
            "old": {
                "path": self.old_path,
                "bytes": self.old_bytes,
                "totals": dict(self.old_totals),
            },
            "new": {
                "path": self.new_path,
                "bytes": self.new_bytes,
                "totals": dict(self.new_totals),
            },
            "delta": self.delta,
            "unchanged": self.unchanged,
            "changes": [change.to_json() for change in self.changes],
            "planned_memory": [change.to_json() for change in self.memory],
        }

    def to_text(self, top: int = 20) -> str:
        lines = [self.headline()]
        if self.unchanged:
            return lines[0]
        lines.append(f"{'':<20}{'old':>14}{'new':>14}{'delta':>14}")
        lines += [f"{k:<20}{o:>14,}{n:>14,}{n - o:>+14,}" for k, o, n in self.rows()]
        shown = self.changes[:top]
        lines.append(f"changes, largest first ({len(shown)} of {len(self.changes)}):")
        for change in shown:
            notes = f"  ({'; '.join(change.notes)})" if change.notes else ""
            lines.append(f"{change.delta:>+14,}  {change.kind:<8} {change.label}{notes}")
        lines += [f"planned memory: {change.line()}" for change in self.memory]
        return "\n".join(lines)

    def to_markdown(self, top: int = 20) -> str:
        """Tables ready for a pull request's comment."""
        if self.unchanged:
            return f"**{os.path.basename(self.new_path)}**: no change ({self.new_bytes:,} bytes)"
        percent = f", {self.delta / self.old_bytes:+.1%}" if self.old_bytes else ""
        lines = [
            f"**{os.path.basename(self.new_path)}**: {self.old_bytes:,} → {self.new_bytes:,} "
            f"bytes ({self.delta:+,}{percent})",
            "",
            "| | old | new | delta |",
            "|---|---:|---:|---:|",
        ]
        lines += [f"| {k} | {o:,} | {n:,} | {n - o:+,} |" for k, o, n in self.rows()]
        lines += [
            "",
            "| change | entry | old | new | delta | what changed |",
            "|---|---|---:|---:|---:|---|",
        ]
        for change in self.changes[:top]:
            old = "" if change.old is None else f"{change.old.nbytes:,}"
            new = "" if change.new is None else f"{change.new.nbytes:,}"
            lines.append(
                f"| {change.kind} | `{change.label}` | {old} | {new} | "
                f"{change.delta:+,} | {'; '.join(change.notes)} |"
            )
        if len(self.changes) > top:
            lines.append(f"\n{len(self.changes) - top} more changes not shown.")
        if self.memory:
            lines += ["", "| method | memory id | old planned | new planned | delta |"]
            lines.append("|---|---:|---:|---:|---:|")
            lines += [
                f"| `{c.method}` | {c.memory_id} | {c.old:,} | {c.new:,} | {c.delta:+,} |"
                for c in self.memory
            ]
        return "\n".join(lines)


def totals_of(parts: Iterable[Part]) -> dict[str, int]:
    """Bytes per storage and per `status:<status>`: what `SizeDiff` compares."""
    totals: dict[str, int] = {}
    for part in parts:
        totals[part.storage] = totals.get(part.storage, 0) + part.nbytes
        key = f"status:{part.status}"
        totals[key] = totals.get(key, 0) + part.nbytes
    return totals


def diff_explanations(
    old: Explanation, new: Explanation, sources: Mapping[str, ByteSource] | None = None
) -> SizeDiff:
    """`SizeDiff` of two explanations; their bytes read from `sources` to match by content."""
    digest = None if sources is None else digest_parts(sources)
    return SizeDiff(
        old.path,
        new.path,
        old.file_bytes,
        new.file_bytes,
        totals_of(old.parts),
        totals_of(new.parts),
        tuple(diff_parts(old.parts, new.parts, digest)),
        memory_changes(old.memory, new.memory),
    )


def _explain_open(stack, path, ptd_paths, state) -> tuple[Explanation, dict[str, ByteSource]]:
    read = read_pte_program(path, ptd_paths)
    opened = open_sources(stack, (path, *ptd_paths))
    return explain_pte(read.pte, read.program, read.program_data, opened, state), opened


def diff_files(
    old: str | os.PathLike,
    new: str | os.PathLike,
    old_ptd: Sequence[str | os.PathLike] = (),
    new_ptd: Sequence[str | os.PathLike] = (),
    *,
    old_names: str | os.PathLike | StateFile | None = None,
    new_names: str | os.PathLike | StateFile | None = None,
) -> SizeDiff:
    """Explains two `.pte` files (with their `.ptd` files) and matches their parts.

    Args:
        old, new: The two programs. Not modified.
        old_ptd, new_ptd: Their `.ptd` files. Not modified.
        old_names, new_names: `.pt2` or ETRecord files naming their entries (torch).

    Raises:
        PteFormatError: A file is malformed, or a `.ptd` does not match its `.pte`.
    """
    with contextlib.ExitStack() as stack:
        before, old_sources = _explain_open(stack, old, old_ptd, state_file(old_names))
        after, new_sources = _explain_open(stack, new, new_ptd, state_file(new_names))
        # A file on both sides (diff a.pte a.pte) is read through either: the same bytes.
        return diff_explanations(before, after, {**old_sources, **new_sources})
