"""Which `.ptd` files each program loads with: the one rule every command follows.

A program reads the `.ptd` files given for it; none given, the `.ptd` beside it with its
stem (`heads/a.pte` -> `heads/a.ptd`), unless `beside=False` (`--no-data-beside`);
else none. A directory's other `.ptd` files are not a program's unless given. A `.ptd`
found beside a program that cannot be read (ExecuTorch 0.6's layout, say) is one
warning, and the program is read as if none were there; a `.ptd` the user named and
cannot be read stays an error, where it is read.

The words are `--data [FILE=]IN.ptd` in every command (`merge`, `share`, `audit`,
`explain`, `prune`, ...): `IN.ptd` is read by every input, `FILE=IN.ptd` (or a
`(FILE, IN.ptd)` tuple) by the input FILE only, where separately exported programs name
different weights alike (both heads' `head.weight`). The spec is split at the first `=`
whose left part names an input, so that a path holding `=` (`run=3/a.ptd`) can be named.
A file given twice is read once, as is a copy of one (every key with equal bytes); one key
with other bytes in two files a program reads is refused. Programs that read a common file
form a set (`sets_of`): its bytes are judged against all its readers, every other program
alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Sequence

from emitter_filter.errors import MethodSetError, PteFormatError
from emitter_filter.ondisk.read.byte_source import ByteSource
from emitter_filter.ondisk.read.file_model import NamedData
from emitter_filter.ondisk.read.read_ptd import read_ptd

__all__ = [
    "input_of",
    "unique_tails",
    "data_files_of",
    "beside",
    "data_files_for",
    "program_data",
    "sets_of",
    "pairing_json",
]

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
        raise MethodSetError(
            f"{spec!r}: there {'is' if len(inputs) == 1 else 'are'} "
            f"{len(inputs)} input(s), #1 to #{len(inputs)}"
        )
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
            raise MethodSetError(
                f"{spec!r} names {len(named)} inputs ({listed}): give a "
                "longer tail of its path or #N (the Nth input, from 1)"
            )
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
    return _path_parts(given)[-len(want) :] == want


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


def _names_input(path: str, inputs: Sequence[str]) -> bool:
    try:
        input_of(path, inputs)
    except MethodSetError:
        return False
    return True


def _split_spec(spec, inputs: Sequence[str]) -> tuple[str, str]:
    """(FILE, IN.ptd) of one `--data` spec, FILE empty for every input: split at the first
    `=` whose left part names an input; with none, the whole spec is IN.ptd if it is a file."""
    if isinstance(spec, tuple):
        file, ptd = (os.fspath(part) for part in spec)
        if not file or not ptd:
            raise MethodSetError(f"{spec!r}: expected IN.ptd or FILE=IN.ptd")
        return file, ptd
    spec = os.fspath(spec)
    start = spec.find("=")
    while start > 0:
        if spec[start + 1 :] and _names_input(spec[:start], inputs):
            return spec[:start], spec[start + 1 :]
        start = spec.find("=", start + 1)
    if "=" not in spec or os.path.isfile(spec):
        return "", spec
    file, _, ptd = spec.rpartition("=")
    if not file or not ptd:
        raise MethodSetError(f"{spec!r}: expected IN.ptd or FILE=IN.ptd")
    input_of(file, inputs)  # names none of the inputs: its error
    raise MethodSetError(f"{spec!r}: expected IN.ptd or FILE=IN.ptd")


def _once(paths: Sequence[str]) -> list[str]:
    """`paths` without a file given twice (the same file under two names counts once)."""
    seen, kept = set(), []
    for path in paths:
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            kept.append(path)
    return kept


def data_files_of(inputs: Sequence[str], data) -> list[list[str]]:
    """The `.ptd` files given for each input: those every input reads, then its own."""
    every: list[str] = []
    own: list[list[str]] = [[] for _ in inputs]
    for spec in data:
        file, ptd = _split_spec(spec, inputs)
        if file:
            own[input_of(file, inputs)].append(ptd)
        else:
            every.append(ptd)
    return [
        _without_copies(pte, _once([*every, *files]))
        for pte, files in zip(inputs, own, strict=True)
    ]


def _without_copies(pte: str, paths: list[str]) -> list[str]:
    """`paths` without a `.ptd` whose every key an earlier one holds with equal bytes (a
    copy given as well); refuses one key with other bytes in two of them.

    The runtime merges a program's data files by key and refuses a key two of them
    hold; a copy adds nothing to read, and a key with two contents has no answer.
    """
    if len(paths) < 2:
        return paths
    ptds = [read_ptd(p) for p in paths]
    held: dict[str, NamedData] = {}
    kept = []
    for ptd in ptds:
        common = [key for key in ptd.named_data if key in held]
        for key in common:
            first, entry = held[key], ptd.named_data[key]
            if not _equal_bytes(first, entry):
                raise PteFormatError(
                    ptd.path,
                    f"named data {key!r} ({entry.nbytes:,} B) holds other bytes than "
                    f"{key!r} in {first.file} ({first.nbytes:,} B), and {pte} loads with both",
                )
        if common and len(common) == len(ptd.named_data):
            logger.info(
                "%s: every key also in %s with equal bytes: read once",
                ptd.path,
                held[common[0]].file,
            )
            continue
        kept.append(ptd.path)
        for key, entry in ptd.named_data.items():
            held.setdefault(key, entry)
    return kept


def _equal_bytes(a: NamedData, b: NamedData) -> bool:
    """Whether two named-data entries hold equal bytes."""
    if a.nbytes != b.nbytes:
        return False
    with ByteSource(a.file) as first, ByteSource(b.file) as second:
        return first.sha256(a.offset, a.nbytes, a.key) == second.sha256(b.offset, b.nbytes, b.key)


def beside(pte: str) -> str | None:
    """The `.ptd` next to `pte` with its stem (`heads/a.pte` -> `heads/a.ptd`), if there is one.

    A `.ptd` given as the program has none: it is not its own data (reading it says what it is).
    """
    ptd = os.path.splitext(os.fspath(pte))[0] + ".ptd"
    if not os.path.isfile(ptd) or os.path.realpath(ptd) == os.path.realpath(pte):
        return None
    return ptd


def _readable_beside(pte: str, warned: set[str]) -> str | None:
    """`beside(pte)` if it can be read as a `.ptd`; else None, with one warning (once
    per file in `warned`)."""
    ptd = beside(pte)
    if ptd is None:
        # A directory, a FIFO or a link to nothing under the name: the weights moved,
        # as with a truncated file, and the user hears of it the same way.
        named = os.path.splitext(os.fspath(pte))[0] + ".ptd"
        if os.path.lexists(named):
            _warn_beside(pte, named, _not_a_file(named), warned)
        return None
    try:
        read_ptd(ptd)
    except (PteFormatError, OSError) as error:
        _warn_beside(pte, ptd, _reason(error, ptd), warned)
        return None
    logger.info("%s: reading %s, the .ptd beside it", pte, ptd)
    return ptd


def _warn_beside(pte: str, ptd: str, reason: str, warned: set[str]) -> None:
    """The one warning for a `.ptd` beside `pte` that is not read (once per file)."""
    if ptd not in warned:
        warned.add(ptd)
        logger.warning(
            "%s: read as if it had no .ptd beside it: %s: %s (--no-data-beside: not looked for)",
            pte,
            ptd,
            reason,
        )


def _not_a_file(path: str) -> str:
    """Why `path`, which exists, is no `.ptd`: what it is instead."""
    if os.path.islink(path) and not os.path.exists(path):
        return f"a symbolic link to {os.readlink(path)!r}, which does not exist"
    mode = os.stat(path).st_mode
    if stat.S_ISDIR(mode):
        return "a directory, not a file"
    if stat.S_ISFIFO(mode):
        return "a FIFO, not a regular file (never read: it could block)"
    return "not a regular file"


def _reason(error: Exception, path: str) -> str:
    """The error's message without the file name it begins with."""
    if isinstance(error, OSError):
        return error.strerror or str(error)
    reason = str(error)
    return reason[len(path) + 2 :] if reason.startswith(path + ": ") else reason


def data_files_for(ptes: Sequence[str], data=(), *, beside: bool = True) -> list[list[str]]:
    """The `.ptd` files each program reads: those given for it in `data` (as
    `data_files_of` reads them), else the readable `.ptd` beside it with its stem
    (unless `beside` is False), else none."""
    ptes = [os.fspath(p) for p in ptes]
    given = data_files_of(ptes, data)
    warned: set[str] = set()
    return [
        files if files or not beside else _beside_list(pte, warned)
        for pte, files in zip(ptes, given, strict=True)
    ]


def _beside_list(pte: str, warned: set[str]) -> list[str]:
    ptd = _readable_beside(pte, warned)
    return [] if ptd is None else [ptd]


def program_data(pte: str | os.PathLike, data=(), *, beside: bool = True) -> list[str]:
    """The `.ptd` files one program reads (`data_files_for` of it alone)."""
    return data_files_for([os.fspath(pte)], data, beside=beside)[0]


def pairing_json(ptes: Sequence[str], data_of: Sequence[Sequence[str]]) -> list[dict]:
    """Which data files each program was read with, as every `--json` shows it."""
    return [
        {"program": os.fspath(p), "data": [os.fspath(f) for f in files]}
        for p, files in zip(ptes, data_of, strict=True)
    ]


def sets_of(data_of: Sequence[Sequence[str]]) -> list[list[int]]:
    """The programs (by index) that read a common data file, together; every other
    program alone. In the order given: a set where its first program is."""
    owner: dict[str, int] = {}
    parent = list(range(len(data_of)))

    def root(n: int) -> int:
        while parent[n] != n:
            n = parent[n]
        return n

    for number, files in enumerate(data_of):
        for path in files:
            real = os.path.realpath(path)
            if real in owner:
                parent[root(number)] = root(owner[real])
            else:
                owner[real] = number
    sets: dict[int, list[int]] = {}
    for number in range(len(data_of)):
        sets.setdefault(root(number), []).append(number)
    return sorted(sets.values(), key=lambda members: members[0])
