"""`diff OLD_DIR NEW_DIR`: two sets of files an app ships, programs matched by file name.

A set is a directory's `.pte` files and the `.ptd` files they load with: a program's
own `STEM.ptd` where there is one (`data_files.data_files_for`), else the directory's
`.ptd` files that are no other program's `STEM.ptd` (what `share` writes: one
`shared.ptd` every program reads); a neighbour's own `.ptd` is never charged to it. Programs in both are diffed as
`diff_files` diffs two files; a program only in one is added or removed. The set's size
is every `.pte` and `.ptd` file of the directory, each once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from emitter_filter.errors import PteFormatError
from emitter_filter.ondisk.diff import SizeDiff, diff_files
from emitter_filter.ondisk.read.data_files import data_files_for

__all__ = ["SetDiff", "diff_sets", "set_files"]


def set_files(directory: str | os.PathLike, *, data_beside: bool = True) -> dict[str, list[str]]:
    """The set in `directory`: each `.pte`'s name and the `.ptd` files it loads with."""
    root = Path(directory)
    ptes = sorted(p for p in root.glob("*.pte") if p.is_file())
    if not ptes:
        raise PteFormatError(str(root), "no .pte file in this directory: not a set of programs")
    stems = {p.stem for p in ptes}
    common = sorted(str(p) for p in root.glob("*.ptd") if p.is_file() and p.stem not in stems)
    own = data_files_for([str(p) for p in ptes], beside=data_beside)
    return {p.name: files or common for p, files in zip(ptes, own, strict=True)}


def _bytes(directory: str | os.PathLike) -> int:
    return sum(
        p.stat().st_size
        for p in Path(directory).iterdir()
        if p.suffix in (".pte", ".ptd") and p.is_file()
    )


@dataclass(frozen=True)
class SetDiff:
    """The result of `diff_sets`.

    Attributes:
        old, new: The two directories.
        old_bytes, new_bytes: Each set's files, each once.
        programs: Each program in both, by name, and its diff.
        added, removed: Programs only in NEW, only in OLD.
        data: For "old" and "new", each program's name and the `.ptd` files it loads with.
    """

    old: str
    new: str
    old_bytes: int
    new_bytes: int
    programs: tuple[tuple[str, SizeDiff], ...]
    added: tuple[str, ...]
    removed: tuple[str, ...]
    data: dict = field(default_factory=dict)

    def pairing(self) -> tuple[list[str], list[list[str]]]:
        """Each program of both sets and the `.ptd` files it was read with."""
        pairs = [
            (os.path.join(getattr(self, side), name), files)
            for side in ("old", "new")
            for name, files in self.data.get(side, {}).items()
        ]
        return [p for p, _ in pairs], [f for _, f in pairs]

    @property
    def delta(self) -> int:
        return self.new_bytes - self.old_bytes

    def over(self, limit: tuple[int | None, float | None]) -> bool:
        """Whether NEW exceeds OLD by more than `growth_limit`'s result, the set as a whole."""
        nbytes, percent = limit
        if nbytes is not None:
            return self.delta > nbytes
        if percent is None:
            raise TypeError("a growth limit is (bytes, None) or (None, percent)")
        return self.delta > self.old_bytes * percent / 100

    def headline(self) -> str:
        percent = f", {self.delta / self.old_bytes:+.1%}" if self.old_bytes else ""
        counts = f"{len(self.programs)} program(s) in both"
        counts += "".join(
            f", {len(names)} {what}"
            for what, names in (("added", self.added), ("removed", self.removed))
            if names
        )
        return (
            f"{self.old} -> {self.new}: {self.old_bytes:,} -> {self.new_bytes:,} bytes "
            f"({self.delta:+,}{percent}); {counts}"
        )

    def to_text(self, top: int = 20) -> str:
        lines = [self.headline()]
        lines += [f"added: {name}" for name in self.added]
        lines += [f"removed: {name}" for name in self.removed]
        for _, diff in self.programs:
            lines += ["", diff.to_text(top)]
        return "\n".join(lines)

    def to_markdown(self, top: int = 20) -> str:
        lines = [f"**{self.headline()}**"]
        lines += [f"- added: `{name}`" for name in self.added]
        lines += [f"- removed: `{name}`" for name in self.removed]
        for _, diff in self.programs:
            lines += ["", diff.to_markdown(top)]
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {
            "schema": "emitter-filter-diff-set/1",
            "old": {"path": self.old, "bytes": self.old_bytes},
            "new": {"path": self.new, "bytes": self.new_bytes},
            "delta": self.delta,
            "added": list(self.added),
            "removed": list(self.removed),
            "programs": {name: diff.to_json() for name, diff in self.programs},
        }


def diff_sets(
    old: str | os.PathLike, new: str | os.PathLike, *, data_beside: bool = True
) -> SetDiff:
    """Diffs the sets of programs in two directories, matching programs by file name.

    Raises:
        PteFormatError: A directory holds no `.pte`, a file is malformed, or a `.ptd`
            does not match its `.pte`.
    """
    before = set_files(old, data_beside=data_beside)
    after = set_files(new, data_beside=data_beside)
    root_old, root_new = Path(old), Path(new)
    programs = tuple(
        (name, diff_files(root_old / name, root_new / name, before[name], after[name]))
        for name in before
        if name in after
    )
    return SetDiff(
        old=os.fspath(old),
        new=os.fspath(new),
        old_bytes=_bytes(old),
        new_bytes=_bytes(new),
        programs=programs,
        data={"old": before, "new": after},
        added=tuple(name for name in after if name not in before),
        removed=tuple(name for name in before if name not in after),
    )
