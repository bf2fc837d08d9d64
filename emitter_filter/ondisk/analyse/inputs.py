"""`check_inputs`: every writer refuses an input `audit` calls invalid, in audit's words.

The writers read a program with the same readers `audit` does, but each reads only
what it needs: a name read by its length (`at`) where the flatbuffers Verifier wants it
to end in a NUL, say, is read and written again well-formed, and the output then calls
another operator than its input. Checking every input as `audit` does, before anything
is opened for writing, makes one rule of it: a file `audit` calls invalid is refused by
`prune`, `merge`, `split`, `share` and `verify` in the same line (exit 2), and no
runtime ever sees an input our reader refuses (a runtime crashes on some of them).

What a writer repairs is not refused: a program on the deprecated `constant_buffer`
path is rewritten onto the constant segment, which the runtime loads.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from emitter_filter.errors import PteFormatError
from emitter_filter.ondisk.analyse.validate import CONSTANT_BUFFER_PATH, validate_file
from emitter_filter.ondisk.read.read_pte import read_pte_program

__all__ = ["check_inputs"]

#: Problems a rewrite removes: the output is validated again (`validate_outputs`).
_REPAIRED = (CONSTANT_BUFFER_PATH,)


def check_inputs(inputs: Sequence[tuple[str | os.PathLike, Sequence[str | os.PathLike]]]) -> None:
    """Refuses the first input `validate_file` calls invalid. Nothing is modified.

    Args:
        inputs: (program, the `.ptd` files it is read with) of each input, as the command
            reads them (`data_files.data_files_for`).

    Raises:
        PteFormatError: An input is invalid (`FILE: invalid: PROBLEM`) or this project's
            reader refuses it (`FILE: emitter-filter cannot read it: PROBLEM`): the line
            `audit` prints for it.
        OSError: A file cannot be read.
    """
    for pte, data in inputs:
        validity = validate_file(pte, data)
        problems = tuple(p for p in validity.problems if p not in _REPAIRED)
        if problems and all(p in validity.unreadable for p in problems):
            # The reader's own error, with its offset: the line `audit` prints.
            read_pte_program(pte, data)
        if problems:
            raise PteFormatError(
                os.fspath(pte), dataclasses.replace(validity, problems=problems).status
            )
