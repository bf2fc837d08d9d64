"""`explain A.pte B.pte ... [--data [FILE=]IN.ptd]`: every byte of a set of files an app ships.

Each program is explained as `explain_file` explains it (with the `.ptd` files it loads
with: `data_files.data_files_for`), then the set is made of their parts:

- each file's bytes once: a `.pte`'s parts from its program; a `.ptd`'s parts, which every
  program reading it attributes, once, read by every program that reads them (each
  reader's plan named `PROGRAM.pte:METHOD`) and live if any program reads them live;
- what the set stores twice: the contents `share` would store once (found as `audit` of
  the set and `share` find them, `share_find.find_set_shared`, with the same `min_bytes`)
  are `duplicated` in each file after the first, naming the others.
- the named-data keys its programs hold with different bytes (`share_find.key_clashes`,
  as `audit` of the set reports them).

Parts are labelled with their file's name (`classify.pte:constant[3]`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace

from emitter_filter.errors import PteFormatError
from emitter_filter.ondisk.analyse.share_find import (
    DEFAULT_MIN_BYTES,
    ProgramSet,
    SharedContent,
    find_set_shared,
)
from emitter_filter.ondisk.audit_set import set_key_clashes
from emitter_filter.ondisk.explain import Explanation, Part, explain_file
from emitter_filter.ondisk.read.data_files import data_files_for
from emitter_filter.ondisk.read.read_ptd import read_ptd_flat_tensor
from emitter_filter.ondisk.read.read_pte import read_pte_program

__all__ = ["explain_set"]

# Data a program reads, which equal bytes elsewhere in the set could hold once instead.
_DATA = ("constant", "mutable", "external", "named_data", "delegate")
# What a part is in the set when the programs that read it say different things.
_PRECEDENCE = ("live", "shared", "duplicated", "dead", "padding")


def _named(part: Part, program: str) -> Part:
    """`part` with its readers' plans named by their program."""
    readers = tuple(replace(r, plan=f"{program}:{r.plan}") for r in part.readers)
    return replace(part, readers=readers)


def _one_part(parts: Sequence[Part]) -> Part:
    """The parts several programs give one range of a `.ptd`, as one: every reader, the
    status the most alive of them says."""
    readers = tuple(dict.fromkeys(r for p in parts for r in p.readers))
    status = min((p.status for p in parts), key=_PRECEDENCE.index)
    return replace(parts[0], readers=readers, status=status)


def _mark_set_copies(parts: list[Part], shared: Sequence[SharedContent]) -> list[Part]:
    """What `share` would store once (`share_find.find_set_shared`'s contents): in each
    file after the first, the copy `duplicated`, naming the others."""
    at = {(p.file, p.offset): i for i, p in enumerate(parts) if p.storage in _DATA}
    for content in shared:
        by_file: dict[str, int] = {}
        for copy in content.copies:
            i = at.get((copy.file, copy.offset))
            if i is not None and parts[i].status == "live":
                by_file.setdefault(copy.file, i)
        members = list(by_file.values())
        if len(members) < 2:
            continue
        labels = [_label(parts[i]) for i in members]
        for number, i in enumerate(members):
            others = tuple(label for label in labels if label != labels[number])
            status = "duplicated" if number else parts[i].status
            parts[i] = replace(parts[i], status=status, copies=parts[i].copies + others)
    return parts


def _label(part: Part) -> str:
    return f"{os.path.basename(part.file)}:{part.label}"


def explain_set(
    ptes: Sequence[str | os.PathLike],
    ptd_paths: Sequence = (),
    *,
    data_beside: bool = True,
    min_bytes: int = DEFAULT_MIN_BYTES,
) -> Explanation:
    """Attributes every byte of several `.pte` files and the `.ptd` files they load with.

    `ptd_paths` as `share_files` takes them: `IN.ptd` for every program, `FILE=IN.ptd`
    for one; a program given none reads the `.ptd` beside it with its stem, unless
    `data_beside` is False (`data_files.data_files_for`). Contents shorter than
    `min_bytes` are not counted duplicated between files: `share` leaves them where
    they are, and `audit` does not count them either.

    Returns an `Explanation` of the set (`programs`: each program's own), whose parts add
    up to the files' sizes, each file counted once.

    Raises:
        PteFormatError: A file is malformed, or a `.ptd` does not match a `.pte`.
        PteFormatError: A file is given twice.
        MethodSetError: A `FILE=` names none of the programs.
    """
    pte_files = [os.fspath(p) for p in ptes]
    data_of = data_files_for(pte_files, ptd_paths, beside=data_beside)
    seen: set[str] = set()
    for path in pte_files:
        if os.path.realpath(path) in seen:
            raise PteFormatError(path, "given twice: a set holds each file once")
        seen.add(os.path.realpath(path))
    # A .ptd two programs read under two names: one file, read by both.
    named = {os.path.realpath(p): p for files in reversed(data_of) for p in files}
    data_of = [[named[os.path.realpath(p)] for p in files] for files in data_of]
    programs = tuple(
        explain_file(pte, files) for pte, files in zip(pte_files, data_of, strict=True)
    )
    parts: list[Part] = []
    ptd_parts: dict[tuple, list[Part]] = {}
    outside: list[Part] = []
    for pte, explanation in zip(pte_files, programs, strict=True):
        name = os.path.basename(pte)
        for part in explanation.parts:
            if part.file == pte:
                parts.append(_named(part, name))
            else:
                key = (part.file, part.offset, part.nbytes, part.storage, part.index)
                ptd_parts.setdefault(key, []).append(_named(part, name))
        outside += [_named(p, name) for p in explanation.outside]
    parts += [_one_part(found) for found in ptd_parts.values()]
    files = tuple(dict.fromkeys(f for e in programs for f in e.files))
    ptds = list(dict.fromkeys(p for f in data_of for p in f))
    found = find_set_shared(
        ProgramSet(
            tuple(read_pte_program(pte, f) for pte, f in zip(pte_files, data_of, strict=True)),
            tuple(read_ptd_flat_tensor(path) for path in ptds),
        ),
        min_bytes,
    )
    parts = _mark_set_copies(parts, found.shared)
    order = {path: number for number, (path, _) in enumerate(files)}
    parts.sort(key=lambda p: (order[p.file], p.offset))
    count = len(pte_files)
    return Explanation(
        path=f"{count} program{'s' if count != 1 else ''}",
        files=files,
        parts=tuple(parts),
        outside=tuple(outside),
        audit=programs[0].audit,
        programs=programs,
        key_clashes=set_key_clashes(pte_files, data_of),
    )
