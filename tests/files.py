"""The test programs as files: their names, and the golden copies for runs without torch.

Imports neither torch nor executorch, so that the torch-free run can use it.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import shutil
from pathlib import Path

#: Whether this run can export models (else it is the torch-free run, `-m filetools`).
HAVE_EXECUTORCH = all(importlib.util.find_spec(m) is not None for m in ("torch", "executorch"))

CASES = ("plain", "external", "xnnpack", "mutated")
GOLDEN = Path(__file__).parent / "golden"
#: The executorch release that wrote `GOLDEN`, and the flatbuffers runtime it packed
#: them with: its Builder's layout changes between releases (25.12 shares vtables
#: differently), so a program packed with another one is the same program in
#: other bytes. `python -m tests.programs` checks both.
GOLDEN_EXECUTORCH = "1.5.1"
GOLDEN_FLATBUFFERS = "25.12.19"
#: Vulkan programs (`tests.vulkan_programs`), beside the others.
VULKAN_GOLDEN = GOLDEN / "vulkan"
VULKAN_CASES = ("plain", "tied_dead", "orphaned")


@dataclasses.dataclass(frozen=True)
class Built:
    """One model saved twice: `pte`/`ptds` as upstream writes it, `pruned_*` pruned in process.

    `report` and `inputs` are None when read from the golden files (no torch).
    """

    name: str
    pte: Path
    ptds: tuple[Path, ...]
    pruned_pte: Path
    pruned_ptds: tuple[Path, ...]
    report: object
    inputs: tuple | None


def saved(directory: Path) -> tuple[Path, tuple[Path, ...]]:
    """The `.pte` and the `.ptd` files saved in `directory`."""
    return directory / "model.pte", tuple(sorted(directory.glob("*.ptd")))


def read_golden(root: Path) -> dict[str, Built]:
    """Copies of the golden files under `root` (tests may write beside them)."""
    shutil.copytree(GOLDEN, root, dirs_exist_ok=True)
    result = {}
    for case in (*CASES, "clean"):
        pte, ptds = saved(root / case / "dirty")
        pruned_pte, pruned_ptds = saved(root / case / "pruned")
        result[case] = Built(case, pte, ptds, pruned_pte, pruned_ptds, None, None)
    return result


def golden_audit(pte: Path, ptds: tuple[Path, ...]) -> str:
    """`audit --json` of a saved program, with paths relative to its directory."""
    from emitter_filter.ondisk.audit import audit_file

    cwd = os.getcwd()
    os.chdir(pte.parent)
    try:
        report = audit_file(pte.name, [p.name for p in ptds]).to_json()
    finally:
        os.chdir(cwd)
    return json.dumps(report, indent=2)


def flatbuffers_version() -> str:
    return importlib.metadata.version("flatbuffers")


def read_vulkan_golden(root: Path) -> dict[str, Built]:
    """Copies of the golden Vulkan programs under `root`."""
    shutil.copytree(VULKAN_GOLDEN, root, dirs_exist_ok=True)
    result = {}
    for case in VULKAN_CASES:
        pte, ptds = saved(root / case / "dirty")
        pruned_pte, pruned_ptds = saved(root / case / "pruned")
        result[case] = Built(case, pte, ptds, pruned_pte, pruned_ptds, None, None)
    return result
