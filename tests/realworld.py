"""The real files of `EMITTER_FILTER_REALWORLD_DIR` (`.ci/run` points it at the
workplace's copies), for the opt-in tests: each `.pte` with the `.ptd` of its stem,
and why the tools refuse one (a test skips a refused file with that reason).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from emitter_filter.errors import PteFormatError
from emitter_filter.ondisk.audit import audit_file

__all__ = ["REALWORLD", "needs_realworld", "real_files", "refused"]

REALWORLD = os.environ.get("EMITTER_FILTER_REALWORLD_DIR")

#: Marks a test of the real files: skipped unless the variable names their directory.
needs_realworld = pytest.mark.skipif(
    not REALWORLD, reason="EMITTER_FILTER_REALWORLD_DIR is not set"
)


def real_files(directory: str | os.PathLike | None = REALWORLD) -> list[tuple[Path, list[Path]]]:
    """Each `.pte` in `directory` and a `.ptd` of its stem beside it (if any); [] for None."""
    if not directory:
        return []
    files = []
    for pte in sorted(Path(directory).glob("*.pte")):
        ptd = pte.with_suffix(".ptd")
        files.append((pte, [ptd] if ptd.exists() else []))
    return files


def refused(pte: Path, ptds) -> str | None:
    """Why the tools refuse a file (one line), or None."""
    try:
        audit_file(pte, ptds)
    except PteFormatError as error:
        return str(error)
    return None
