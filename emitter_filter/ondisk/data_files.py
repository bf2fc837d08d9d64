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

__all__ = ["input_of", "data_files_of", "beside", "data_files_for"]

logger = logging.getLogger(__name__)


def input_of(path: str, inputs: Sequence[str]) -> int:
    """The index of the input `path` names: as given, the same file, or its base name."""
    for index, given in enumerate(inputs):
        if given == path:
            return index
    for index, given in enumerate(inputs):
        with contextlib.suppress(OSError):
            if os.path.samefile(given, path):
                return index
    named = [i for i, given in enumerate(inputs) if os.path.basename(given) == path]
    if len(named) == 1:
        return named[0]
    raise MethodSetError(f"{path!r} is none of the inputs ({', '.join(inputs)})")


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
