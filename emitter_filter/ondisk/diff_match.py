"""How `diff` pairs the parts of OLD with those of NEW: `diff_parts`, step by step.

Each step matches only among the parts the steps before left unmatched: by name, by
readers with dtype and shape, by content (`digest_parts`: only sizes both sides have
are hashed), by readers alone, then the program's sections, headers and delegates by
place; the rest is added or removed (see `diff`'s docstring). A `Change` is one pair,
or one part alone. On parts only, so that a budget's record matches a file the way
two files match.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass

from emitter_filter.ondisk.explain_part import Part
from emitter_filter.ondisk.explanation import shorten
from emitter_filter.ondisk.read.byte_source import ByteSource
from emitter_filter.program.scalar_types import dtype_label

__all__ = ["Change", "diff_parts", "digest_parts", "DigestFn", "HAS_BYTES"]

_STRUCTURE = ("header", "program", "values", "instructions", "operators", "ptd_header")
#: The storages whose parts hold tensor bytes, matched by content.
HAS_BYTES = ("constant", "mutable", "external", "named_data")
#: A part's sha256, or None where it is unknown.
DigestFn = Callable[[Part], "bytes | None"]


@dataclass(frozen=True)
class Change:
    """One part of OLD matched with one of NEW (or with nothing).

    Attributes:
        old, new: The parts; None for an added (`old`) or removed (`new`) one.
        matched_by: "name", "readers", "content", "readers only", "place", or None.
        notes: What changed besides the size: dtype, shape, storage, status.
    """

    old: Part | None
    new: Part | None
    matched_by: str | None
    notes: tuple[str, ...] = ()

    @property
    def delta(self) -> int:
        return (self.new.nbytes if self.new else 0) - (self.old.nbytes if self.old else 0)

    @property
    def kind(self) -> str:
        """added, removed, grown, shrunk, changed (same size, something else), same."""
        if self.old is None:
            return "added"
        if self.new is None:
            return "removed"
        if self.delta:
            return "grown" if self.delta > 0 else "shrunk"
        return "changed" if self.notes else "same"

    @property
    def label(self) -> str:
        """The part's names where it has any, else its place (`constant[3]`)."""
        part = self.new or self.old
        if part is None:
            raise TypeError("a change has an old part, a new one or both")
        names = ", ".join(shorten(n) for n in part.names if part.storage != "delegate")
        place = (
            part.label
            if not self.old or not self.new or self.old.label == self.new.label
            else f"{self.old.label} -> {self.new.label}"
        )
        return f"{names} ({place})" if names else place

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "label": self.label,
            "old": None if self.old is None else self.old.to_json(),
            "new": None if self.new is None else self.new.to_json(),
            "delta": self.delta,
            "matched_by": self.matched_by,
            "notes": list(self.notes),
        }


def _shape(shape) -> str:
    return "-" if shape is None else "[" + ", ".join(map(str, shape)) + "]"


def _notes(old: Part, new: Part) -> tuple[str, ...]:
    notes = []
    if old.dtype != new.dtype:
        notes.append(f"dtype {dtype_label(old.dtype)} -> {dtype_label(new.dtype)}")
    if old.shape != new.shape:
        notes.append(f"shape {_shape(old.shape)} -> {_shape(new.shape)}")
    if old.storage != new.storage:
        notes.append(f"moved {old.storage} -> {new.storage}")
    if old.status != new.status:
        becomes = {
            "dead": "newly dead",
            "duplicated": "a new duplicate of " + ", ".join(new.copies),
            "shared": "now shared with " + ", ".join(new.copies),
        }
        notes.append(becomes.get(new.status, f"{old.status} -> {new.status}"))
    if old.storage in ("delegate", "delegate_inline") and new.nbytes != old.nbytes:
        notes.append(f"delegate blob {'grew' if new.nbytes > old.nbytes else 'shrank'}")
    return tuple(notes)


def _alone(part: Part) -> tuple[str, ...]:
    """What an added or removed part is: its tensor type, and its status if not live."""
    shape = "" if part.shape is None else _shape(part.shape)
    notes = [f"{dtype_label(part.dtype)} {shape}".rstrip()] if part.dtype else []
    if part.status not in ("live", "padding"):
        notes.append(part.status)
    return tuple(notes)


def _reader_key(part: Part) -> tuple:
    return tuple((r.plan, r.op, r.arg, r.ordinal, r.key) for r in part.readers)


def _match_unique(olds: list[Part], news: list[Part], key: Callable[[Part], Hashable | None]):
    """Pairs of parts whose key is not None and unique on both sides; removes them from the lists."""

    def unique(parts):
        found: dict = {}
        for part in parts:
            k = key(part)
            if k is not None:
                found.setdefault(k, []).append(part)
        return {k: v[0] for k, v in found.items() if len(v) == 1}

    old_keys, new_keys = unique(olds), unique(news)
    pairs = [(old_keys[k], new_keys[k]) for k in old_keys if k in new_keys]
    matched_old = {id(o) for o, _ in pairs}
    matched_new = {id(n) for _, n in pairs}
    olds[:] = [p for p in olds if id(p) not in matched_old]
    news[:] = [p for p in news if id(p) not in matched_new]
    return pairs


def digest_parts(sources: Mapping[str, ByteSource]) -> DigestFn:
    """The sha256 of a part's bytes, read from its file among `sources` (by name)."""

    def digest(part: Part) -> bytes | None:
        source = sources.get(part.file)
        return None if source is None else source.sha256(part.offset, part.nbytes, part.label)

    return digest


def _match_content(olds: list[Part], news: list[Part], digest: DigestFn):
    """Pairs of parts with identical bytes (the same size and sha256); removes them."""
    sizes = {p.nbytes for p in olds if p.storage in HAS_BYTES} & {
        p.nbytes for p in news if p.storage in HAS_BYTES
    }

    def by_content(parts: list[Part]) -> dict[tuple, list[Part]]:
        found: dict[tuple, list[Part]] = {}
        for part in parts:
            if part.storage in HAS_BYTES and part.nbytes in sizes:
                content = digest(part)
                if content is not None:
                    found.setdefault((part.nbytes, content), []).append(part)
        return found

    old_side, new_side = by_content(olds), by_content(news)
    pairs = [
        pair
        for k in old_side
        if k in new_side
        # As many pairs as both sides have of that content: the rest are added or removed.
        for pair in zip(old_side[k], new_side[k], strict=False)
    ]
    matched = {id(p) for pair in pairs for p in pair}
    olds[:] = [p for p in olds if id(p) not in matched]
    news[:] = [p for p in news if id(p) not in matched]
    return pairs


def _delegate_ranks(parts: list[Part]) -> dict[int, tuple]:
    """For named data XNNPACK types: (its delegates, its dims, how many such came before it)."""
    ranks: dict[int, tuple] = {}
    seen: dict[tuple, int] = {}
    for part in parts:
        if part.storage != "named_data" or part.shape is None or not part.readers:
            continue
        key = (tuple((r.plan, r.op) for r in part.readers), part.shape)
        ranks[id(part)] = (*key, seen.get(key, 0))
        seen[key] = seen.get(key, 0) + 1
    return ranks


def diff_parts(
    old: Iterable[Part], new: Iterable[Part], digest: DigestFn | None = None
) -> list[Change]:
    """Matches two files' parts (the module docstring's order); padding left out.

    Args:
        old, new: Parts of two explanations (or records of one). Not modified.
        digest: A part's sha256 (`digest_parts`, or a budget's record), for the
            content step; without it the step is skipped.

    Returns:
        Every change, the largest size change first (then by label); parts that
        match with the same size and nothing else changed are left out.
    """
    olds = [p for p in old if p.storage != "padding"]
    news = [p for p in new if p.storage != "padding"]
    steps: list[tuple[str, Callable]] = [
        (
            "name",
            lambda p: (
                tuple(sorted(p.names))
                if p.names and p.storage not in ("delegate", "delegate_inline")
                else None
            ),
        ),
        ("readers", lambda p: (_reader_key(p), p.dtype, p.shape) if p.readers else None),
    ]
    pairs: list[tuple[str, Part, Part]] = []
    for how, key in steps:
        pairs += [(how, o, n) for o, n in _match_unique(olds, news, key)]
    if digest is not None:
        pairs += [("content", o, n) for o, n in _match_content(olds, news, digest)]
    pairs += [
        ("readers only", o, n)
        for o, n in _match_unique(olds, news, lambda p: _reader_key(p) or None)
    ]
    # Named data is keyed by content: a weight that changed has a new key. Its
    # delegate and dims, and how many such came before it, still name it.
    ranks = {**_delegate_ranks(olds), **_delegate_ranks(news)}
    pairs += [
        ("delegate and dims", o, n)
        for o, n in _match_unique(olds, news, lambda p: ranks.get(id(p)))
    ]
    for how, key in (
        (
            "place",
            lambda p: (
                (p.storage, p.tag, p.index)
                if p.storage in (*_STRUCTURE, "delegate", "delegate_inline")
                else None
            ),
        ),
    ):
        pairs += [(how, o, n) for o, n in _match_unique(olds, news, key)]
    changes = [Change(o, n, how, _notes(o, n)) for how, o, n in pairs]
    changes += [Change(o, None, None, _alone(o)) for o in olds]
    changes += [Change(None, n, None, _alone(n)) for n in news]
    changes = [c for c in changes if c.kind != "same"]
    return sorted(changes, key=lambda c: (-abs(c.delta), c.label))
