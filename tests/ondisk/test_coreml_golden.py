"""A Core ML multifunction program as coremltools and ExecuTorch write it on Linux.

The default run reads `tests/golden/coreml/multifunction.pte` (`python -m
tests.coreml_programs` writes it again); the slow run exports it afresh. No Core ML
runtime on Linux: nothing here is run.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from emitter_filter.ondisk.audit import audit_file
from emitter_filter.ondisk.explain import explain_file
from emitter_filter.ondisk.read.read_pte import read_pte
from tests.files import GOLDEN, HAVE_EXECUTORCH

pytestmark = pytest.mark.filetools

GOLDEN_PROGRAM = GOLDEN / "coreml" / "multifunction.pte"


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> Path:
    if not HAVE_EXECUTORCH:
        pytest.skip("exports need torch, executorch and coremltools")
    pytest.importorskip("coremltools")
    from tests.coreml_programs import export_multifunction

    path = tmp_path_factory.mktemp("coreml") / "multifunction.pte"
    path.write_bytes(export_multifunction())
    return path


def _check(program: Path, tmp_path: Path) -> None:
    pte = read_pte(program)
    (key,) = [entry.key for entry in pte.named_data]
    assert key.startswith("coreml_")
    # Each method's blob names the one model: nothing is opaque, nothing dead.
    assert [blob.named_keys for blob in pte.delegates] == [frozenset({key})] * 2
    report = audit_file(program)
    assert report.kept_unprovable_named_data == () and report.dead == ()
    (part,) = [p for p in explain_file(program).to_json()["parts"] if p["storage"] == "named_data"]
    assert part["readers"] == [
        f"CoreMLBackend delegate 0 in plan {plan!r} via key {key}"
        for plan in ("forward", "prefill")
    ]
    copy = tmp_path / "in.pte"
    shutil.copyfile(program, copy)
    for argv in (
        ["split", str(copy), "--method", "score=forward", "-o", str(tmp_path / "a.pte")],
        [
            "merge",
            str(copy),
            str(program),
            "--method",
            "score=#2:forward",
            "-o",
            str(tmp_path / "b.pte"),
        ],
    ):
        run = subprocess.run(
            [sys.executable, "-m", "emitter_filter", *argv], capture_output=True, text=True
        )
        assert run.returncode == 2, run.stderr
        assert run.stderr.count("\n") == 1 and "by the ExecuTorch method name" in run.stderr
    run = subprocess.run(
        [sys.executable, "-m", "emitter_filter", "split", str(copy), "--method", "prefill"]
        + ["-o", str(tmp_path / "c.pte"), "--json"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["output"]
    assert "not run-verified here: no runtime for CoreMLBackend" in run.stderr
    assert audit_file(tmp_path / "c.pte").dead == ()


def test_a_core_ml_multifunction_program_is_read_by_key(tmp_path):
    _check(GOLDEN_PROGRAM, tmp_path)


@pytest.mark.slow
def test_a_fresh_core_ml_export_is_read_as_the_golden_one(fresh, tmp_path):
    _check(fresh, tmp_path)
