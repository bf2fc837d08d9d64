"""Which `.ptd` files each of several programs loads with: `--data [FILE=]IN.ptd`.

`merge`, `share` and the tools that read a set (`explain`, `audit`) take the same words:
`IN.ptd` is read by every input, `FILE=IN.ptd` (or a `(FILE, IN.ptd)` tuple) by the input
FILE only, where separately exported programs name different weights alike (both heads'
`head.weight`). With none given, a set's program reads the `.ptd` beside it with its stem
(`data_files_for`), as `diff` of two directories pairs them.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Sequence

from emitter_filter.errors import MethodSetError

__all__ = ["input_of", "unique_tails", "data_files_of", "beside", "data_files_for"]

logger = logging.getLogger(__name__)


def input_of(spec: str, inputs: Sequence[str]) -> int:
    """The index of the input `spec` names; the one reading of FILE in every flag.

    `#N` is the Nth input, counted from 1; otherwise the path as given, then the
    same file, then a tail of its path (`model.pte`, `ft/model.pte`), each only
    where it names one input: inputs that share a base name (every optimum export
    is `model.pte`), or one file given twice, need a longer tail or `#N`.
    """
    if spec.startswith("#") and spec[1:].isdigit():
        number = int(spec[1:])
        if 1 <= number <= len(inputs):
            return number - 1
        raise MethodSetError(f"{spec!r}: there {'is' if len(inputs) == 1 else 'are'} "
                             f"{len(inputs)} input(s), #1 to #{len(inputs)}")
    for matches in (
        lambda given: given == spec,
        lambda given: _same_file(given, spec),
        lambda given: _path_ends_with(given, spec),
    ):
        named = [index for index, given in enumerate(inputs) if matches(given)]
        if len(named) == 1:
            return named[0]
        if named:
            listed = ", ".join(f"#{i + 1} {inputs[i]}" for i in named)
            raise MethodSetError(f"{spec!r} names {len(named)} inputs ({listed}): give a "
                                 "longer tail of its path or #N (the Nth input, from 1)")
    raise MethodSetError(f"{spec!r} is none of the inputs ({', '.join(inputs)})")


def _same_file(given: str, spec: str) -> bool:
    with contextlib.suppress(OSError, ValueError):
        return os.path.samefile(given, spec)
    return False


def _path_parts(path: str) -> list[str]:
    return [part for part in os.path.normpath(path).split(os.sep) if part not in ("", ".")]


def _path_ends_with(given: str, tail: str) -> bool:
    """Whether `tail`'s names are the last names of `given`'s path (`ft/model.pte`)."""
    want = _path_parts(tail)
    if os.path.isabs(tail) or not want or ".." in want:
        return False
    return _path_parts(given)[-len(want):] == want


def unique_tails(paths: Sequence[str]) -> list[str]:
    """Each path's shortest tail that no other path ends with: its base name where that
    is unique (`a/model.pte`, `b/model.pte` -> `a/model.pte`, `b/model.pte`; `x.pte`,
    `y.pte` -> themselves): never `..`, never absolute, but for a path given twice,
    which keeps its spelling."""
    parts = [_path_parts(os.path.abspath(p)) for p in paths]
    tails = []
    for index, own in enumerate(parts):
        for length in range(1, len(own) + 1):
            tail = own[-length:]
            if all(other[-length:] != tail for j, other in enumerate(parts) if j != index):
                tails.append(os.path.join(*tail))
                break
        else:
            tails.append(paths[index])
    return tails


def data_files_of(inputs: Sequence[str], data) -> list[list[str]]:
    """The `.ptd` files each input reads: those every input reads, then its own."""
    every, own = [], [[] for _ in inputs]
    for spec in data:
        if isinstance(spec, tuple):
            (file, ptd), equals = spec, ""
        else:
            spec = os.fspath(spec)
            file, equals, ptd = spec.rpartition("=")
        if not ptd or (equals and not file):
            raise MethodSetError(f"{spec!r}: expected IN.ptd or FILE=IN.ptd")
        if file:
            own[input_of(os.fspath(file), inputs)].append(os.fspath(ptd))
        else:
            every.append(os.fspath(ptd))
    return [[*every, *files] for files in own]


def beside(pte: str) -> str | None:
    """The `.ptd` next to `pte` with its stem (`heads/a.pte` -> `heads/a.ptd`), if there is one."""
    ptd = os.path.splitext(pte)[0] + ".ptd"
    return ptd if os.path.isfile(ptd) else None


def data_files_for(ptes: Sequence[str], data) -> list[list[str]]:
    """The `.ptd` files each program of a set reads: as `data` says (`data_files_of`),
    or, with no `data`, the `.ptd` beside each with its stem."""
    if data:
        return data_files_of(ptes, data)
    paired = []
    for pte in ptes:
        ptd = beside(pte)
        if ptd is not None:
            logger.info("%s: reading %s, the .ptd beside it", pte, ptd)
        paired.append([] if ptd is None else [ptd])
    return paired
