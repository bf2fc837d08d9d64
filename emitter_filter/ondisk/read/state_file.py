"""Read the state tensors of a `torch.export` `.pt2` or an ETRecord, to name entries by content.

A file read on the on-disk side (`audit --names`, `prune --names`, `explain`, `diff`):
torch (and, for an ETRecord, executorch) loads only here, when a file is read. What the
tensors name is `program.state_names.StateFile`'s to say.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from emitter_filter.errors import ProgramFormatError, UnsupportedExecutorchError
from emitter_filter.program.state_names import StateFile, program_state
from emitter_filter.regular_files import open_regular_input

__all__ = ["read_state_file", "state_file"]

logger = logging.getLogger(__name__)

# parse_etrecord's marker entry (devtools/etrecord/_etrecord.py, ETRECORD_IDENTIFIER).
_ETRECORD_IDENTIFIER = "ETRECORD_V0"


def _etrecord_programs(path: str) -> list[tuple[str | None, object]]:
    from executorch.devtools.etrecord import parse_etrecord

    etrecord = parse_etrecord(path)
    programs: list[tuple[str | None, object]] = []
    edge = etrecord.edge_dialect_program
    if isinstance(edge, Mapping):
        programs.extend(edge.items())
    elif edge is not None:
        programs.append(("forward", edge))
    if etrecord.exported_program is not None:
        programs.append(("forward", etrecord.exported_program))
    for name, program in (etrecord.graph_map or {}).items():
        programs.append((name.rsplit("/", 1)[-1], program))
    return programs


def _require(module: str, path: str) -> None:
    """Refuses, in one line naming the install that brings it, a name file that needs
    `module` where it is not installed (the torch-free install of the file tools)."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        from emitter_filter._upstream import install_hint

        raise UnsupportedExecutorchError(
            f"{path}: naming entries after a .pt2 or an ETRecord needs {module}, which is "
            f"not installed here: {install_hint()}"
        )


def read_state_file(path: str | os.PathLike) -> StateFile:
    """Reads the state tensors of a `torch.export.save` `.pt2` or an ETRecord (imports torch).

    Raises:
        ProgramFormatError: The file is neither.
        UnsupportedExecutorchError: torch (for an ETRecord, executorch) is not installed.
    """
    import zipfile  # here: it imports pathlib, and every command imports this module

    path = os.fspath(path)
    # A path that is no file says so first, with or without torch.
    try:
        with os.fdopen(open_regular_input(path), "rb") as file, zipfile.ZipFile(file) as archive:
            entries = set(archive.namelist())
    except (OSError, zipfile.BadZipFile) as error:
        _require("torch", path)
        raise ProgramFormatError(
            f"{path}: not a .pt2 or an ETRecord (a zip archive): {error}"
        ) from error
    _require("torch", path)
    if _ETRECORD_IDENTIFIER in entries:
        _require("executorch", path)
        programs = _etrecord_programs(path)
    else:
        import torch

        try:
            programs = [("forward", torch.export.load(path))]
        except Exception as error:  # torch raises many kinds; all mean "not a .pt2"
            raise ProgramFormatError(f"{path}: not a torch.export .pt2: {error}") from error
    tensors = [t for plan, program in programs for t in program_state(plan, program)]
    logger.debug("%s: %d state tensors in %d programs", path, len(tensors), len(programs))
    return StateFile(path, tensors)


def state_file(names: str | os.PathLike | StateFile | None) -> StateFile | None:
    """`names` as `audit_file` and `prune_file` take it: a path is read, once."""
    if names is None or isinstance(names, StateFile):
        return names
    return read_state_file(names)
