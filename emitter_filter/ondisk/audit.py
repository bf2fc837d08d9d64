"""`audit_file`: read a `.pte` (and its `.ptd` files) and report what no program can reach.

The report and the audit of a file already read are in `audit_report`; this module
adds only the reading, so that tools that read a file themselves (`explain`) audit it
without importing the reader twice over.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence

from emitter_filter.ondisk.analyse.audit_report import AuditReport, audit_pte
from emitter_filter.ondisk.read.byte_source import open_sources
from emitter_filter.ondisk.read.read_pte import read_pte
from emitter_filter.ondisk.read.state_file import state_file
from emitter_filter.program.state_names import StateFile

__all__ = ["audit_file"]


def audit_file(
    path: str | os.PathLike | bytes,
    ptd_paths: Sequence[str | os.PathLike] = (),
    *,
    keep_constants: Sequence[str] = (),
    names: str | os.PathLike | StateFile | None = None,
) -> AuditReport:
    """Reports the bytes of a `.pte` file (and its `.ptd` files) that no program can reach.

    Reads headers and flatbuffers, and of the data only the entries whose size
    another entry shares (to find duplicates).

    Args:
        path: The `.pte` file, or its bytes. Not modified.
        ptd_paths: The `.ptd` files with its external constants. Not modified.
            Without them, external entries are sized from the tensors' shapes.
        keep_constants: `fnmatch` patterns of FQNs: a matching constant is a
            root (not dead), as `ExecutorchBackendConfig(keep_constants=...)` makes it.
        names: A `torch.export` `.pt2` or an ETRecord of the same model (read
            with torch), or what `read.state_file.read_state_file` returned for one:
            names constant-segment entries, and lets `keep_constants` match them.

    Raises:
        PteFormatError: A file is malformed (ranges that overlap without being the
            same range included) or the `.ptd` does not match the `.pte`.
        ProgramFormatError: The program refers to something that does not exist.
    """
    state = state_file(names)
    pte = read_pte(path, ptd_paths)
    with contextlib.ExitStack() as stack:
        return audit_pte(pte, open_sources(stack, (path, *ptd_paths)), keep_constants, state)
