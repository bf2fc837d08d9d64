"""`--verify` of a command that writes programs: its outputs run in a runtime while they
are still temporary files beside their targets (`output.checked_before_replace`), and
are renamed into place only if every method computes what its input's did. On a
difference (exit 1) or a verification that cannot be made (exit 2) nothing is left at
`-o`, `--ptd-out` or any other output.

The writers do not know of it: every `write_outputs` within `verified_write` calls the
check; the command says which programs it writes (their targets), and a write without
them (`share --prune`'s pruned copies in a temporary directory) is not the one verified.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterator, Sequence

from emitter_filter.errors import VerifyError

__all__ = ["VerifyFailed", "Written", "verified_write"]


class VerifyFailed(Exception):
    """The outputs compute otherwise than their inputs: they were not written."""

    def __init__(self, report) -> None:
        super().__init__(report.summary())
        self.report = report


class Written:
    """The outputs of one write, each as written (a temporary file) and its target."""

    def __init__(self, written: Sequence[tuple[str, str]]) -> None:
        self.pairs = list(written)
        self._temp = {_key(final): temp for temp, final in written}

    def has(self, target: str) -> bool:
        return _key(target) in self._temp

    def temp(self, target: str) -> str:
        """Where `target` is written for now; a file not written (an input) as it is."""
        return self._temp.get(_key(target), target)

    def others(self, targets: Sequence[str]) -> list[str]:
        """The temporary files of every output but `targets`, in the order written."""
        keys = {_key(t) for t in targets}
        return [temp for temp, final in self.pairs if _key(final) not in keys]


def _key(path: str) -> str:
    return os.path.abspath(os.path.realpath(path) if os.path.islink(path) else path)


class _Check:
    def __init__(self, programs: Sequence[str], verify: Callable[[Written], object]) -> None:
        self.programs, self.verify = list(programs), verify
        self.report = None

    def __call__(self, written: Sequence[tuple[str, str]]) -> None:
        outputs = Written(written)
        if not all(outputs.has(p) for p in self.programs):
            return  # Not the command's outputs: an intermediate write.
        names = {temp: final for temp, final in written}
        try:
            report = self.verify(outputs)
        except VerifyError as error:
            raise VerifyError(_named(str(error), names)) from None
        report = _renamed(report, names)
        if not report.ok:
            raise VerifyFailed(report)
        self.report = report


@contextlib.contextmanager
def verified_write(
    verifier, programs: Sequence[str], verify: Callable[[Written], object]
) -> Iterator[_Check | None]:
    """With a `Verifier` (else nothing): every write of `programs` (their targets) within
    is verified by `verify(Written)` before it replaces anything; the report is the
    yielded object's `report` afterwards.

    Raises:
        VerifyFailed: A method differs; nothing was written.
        VerifyError: The verification cannot be made; nothing was written.
    """
    if verifier is None:
        yield None
        return
    from emitter_filter.ondisk.write.output import checked_before_replace

    check = _Check(programs, verify)
    with checked_before_replace(check):
        yield check


def _named(text: str, names: dict[str, str]) -> str:
    """`text` with each temporary file named by its target."""
    for temp, final in names.items():
        text = text.replace(temp, final)
    return text


def _renamed(report, names: dict[str, str]):
    """A `VerifyReport` of temporary files, naming their targets."""

    def program(p):
        return dataclasses.replace(
            p, pte=names.get(p.pte, p.pte), data=tuple(names.get(d, d) for d in p.data)
        )

    def pair(p):
        return dataclasses.replace(p, new=program(p.new), old=program(p.old))

    difference = report.difference
    if difference is not None:
        difference = dataclasses.replace(
            difference, pair=pair(difference.pair), reason=_named(difference.reason, names)
        )
    return dataclasses.replace(
        report, verified=tuple(pair(p) for p in report.verified), difference=difference
    )
