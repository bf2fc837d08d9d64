"""`validate_file` against ExecuTorch's runtime: a file it calls valid loads, program and
every method, and each invalid case of `test_validate.py` is one the runtime refuses."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from emitter_filter.ondisk.analyse.validate import validate_file
from tests.files import GOLDEN
from tests.layouts import build_program
from tests.ondisk.test_validate import (
    CASES,
    FLIPPED,
    VERIFIER_CASES,
    changed,
    flipped,
    unverified,
)

pytest.importorskip("executorch.runtime")
# `Runtime.load_program` takes a .ptd (`data_path`) from executorch 1.5 on.
if tuple(int(p) for p in importlib.metadata.version("executorch").split(".")[:2]) < (1, 5):
    pytest.skip(
        "Runtime.load_program takes a .ptd (data_path) from executorch 1.5 on",
        allow_module_level=True,
    )


def _loads(pte: Path, ptd: Path | None = None) -> bool:
    """Whether the runtime loads the program and every method of it (pybindings, as
    `executorch.runtime` calls them: InternalConsistency verification)."""
    from executorch.runtime import Runtime

    try:
        program = Runtime.get().load_program(pte.read_bytes(), data_path=ptd)
        for name in sorted(program.method_names):
            program.load_method(name)
    except (RuntimeError, UnicodeDecodeError):  # the latter: a method name not UTF-8
        return False
    return True


def _files(tmp_path: Path) -> dict[str, tuple[Path, Path | None]]:
    files: dict[str, tuple[Path, Path | None]] = {}
    for name in CASES:
        files[name] = (tmp_path / f"{name}.pte", None)
        files[name][0].write_bytes(changed(name))
    for index, val_type in FLIPPED:
        name = f"value-{index}-as-type-{val_type}"
        files[name] = (tmp_path / f"{name}.pte", None)
        files[name][0].write_bytes(flipped(index, val_type))
    for name in VERIFIER_CASES:
        files[name] = (tmp_path / f"{name}.pte", None)
        files[name][0].write_bytes(unverified(name))
    for where in ("segment", "external", "placeholder"):
        built = build_program(dead=True, where=where)
        pte = tmp_path / f"{where}.pte"
        pte.write_bytes(built.pte)
        ptd = None
        if built.ptd is not None:
            ptd = tmp_path / f"{where}.ptd"
            ptd.write_bytes(built.ptd)
        files[f"built-{where}"] = (pte, ptd)
    for case in ("plain", "external", "xnnpack", "mutated"):
        directory = GOLDEN / case / "pruned"
        ptds = sorted(directory.glob("*.ptd"))
        files[f"golden-{case}"] = (directory / "model.pte", ptds[0] if ptds else None)
    return files


def test_the_runtime_loads_each_file_the_validator_calls_valid_and_refuses_the_others(tmp_path):
    results = {}
    for name, (pte, ptd) in _files(tmp_path).items():
        validity = validate_file(pte, [ptd] if ptd else [])
        results[name] = (validity.valid, _loads(pte, ptd), validity.problems)
    disagree = {name: r for name, r in results.items() if r[0] != r[1]}
    assert not disagree
    assert sum(valid for valid, _, _ in results.values()) >= 6  # the check can pass both ways
    assert sum(not valid for valid, _, _ in results.values()) >= 10


def test_an_external_program_without_its_ptd_is_refused_by_the_runtime(tmp_path):
    # Missing data is no problem without data files (the file may be shipped with its
    # .ptd), but the runtime refuses the method: that is what `--require-data` gates.
    built = build_program(dead=False, where="external")
    pte = tmp_path / "m.pte"
    pte.write_bytes(built.pte)
    assert validate_file(pte).missing_data == ("w",)
    assert not _loads(pte)
