"""Core ML multifunction references are read by key, and their methods refuse a new name.

A real export is `tests/ondisk/test_coreml_golden.py`'s; here the program is built from
the layout `coreml_preprocess.py` documents, to hold what an export does not write: a
backend whose id is `CoreMLBackend` stores the model as named data under `coreml_<id>`
and gives the method the bytes `CMJR` + JSON naming the key and the function, beside a
second key nothing names (an orphaned model). No Core ML runtime here: what merge and
split write of such a program is not run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import final

import pytest
import torch
from executorch.exir import to_edge
from executorch.exir._serialize._named_data_store import NamedDataStore
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.partitioner import (
    DelegationSpec,
    Partitioner,
    PartitionResult,
)
from executorch.exir.dialects._ops import ops as exir_ops

from emitter_filter.delegates import COREML_BACKEND_ID, delegate_named_keys
from emitter_filter.errors import MethodSetError
from emitter_filter.ondisk.audit import audit_file
from emitter_filter.ondisk.explain import explain_file
from emitter_filter.ondisk.merge import merge_files
from emitter_filter.ondisk.prune import prune_file
from emitter_filter.ondisk.split import split_file

MODEL_KEY = "coreml_executorch_0"
ORPHAN_KEY = "coreml_executorch_orphan"


def reference(key: str, function: str) -> bytes:
    """A method's processed bytes, as `CoreMLBackend.preprocess_multimethod` writes them."""
    return b"CMJR" + json.dumps({"version": 1, "key": key, "functionName": function}).encode()


@final
class CoreMLBackend(BackendDetails):
    """Stands for Core ML's backend (its id is the class name): one model, two keys."""

    @staticmethod
    def preprocess(edge_program, compile_specs: list[CompileSpec]) -> PreprocessResult:
        store = NamedDataStore()
        store.add_named_data(MODEL_KEY, b"mlpackage" * 100)
        store.add_named_data(ORPHAN_KEY, b"stale" * 100)
        return PreprocessResult(
            processed_bytes=reference(MODEL_KEY, "forward"),
            data_store_output=store.get_named_data_store_output(),
        )


class _SinToCoreML(Partitioner):
    def partition(self, exported_program) -> PartitionResult:
        for node in exported_program.graph_module.graph.nodes:
            if node.target == exir_ops.edge.aten.sin.default:
                node.meta["delegation_tag"] = "coreml"
        return PartitionResult(
            tagged_exported_program=exported_program,
            partition_tags={"coreml": DelegationSpec(CoreMLBackend.__name__, [])},
        )


class _Sin(torch.nn.Module):
    def __init__(self, add: float = 1.0) -> None:
        super().__init__()
        self.add = add

    def forward(self, x):
        return torch.sin(x) + self.add


def _export(directory: Path, add: float) -> Path:
    edge = to_edge(torch.export.export(_Sin(add), (torch.ones(3),)))
    manager = edge.to_backend(_SinToCoreML()).to_executorch()
    directory.mkdir(exist_ok=True)
    path = directory / "model.pte"
    path.write_bytes(manager.buffer)
    return path


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    return _export(tmp_path_factory.mktemp("coreml"), 1.0)


@pytest.fixture(scope="module")
def other(tmp_path_factory) -> Path:
    """A second program whose `forward` differs (so merge writes both)."""
    return _export(tmp_path_factory.mktemp("coreml_other"), 2.0)


def test_a_reference_is_read_for_its_key_and_a_model_directory_stays_opaque():
    assert delegate_named_keys(COREML_BACKEND_ID, reference("coreml_x", "forward")) == ("coreml_x",)
    assert delegate_named_keys(COREML_BACKEND_ID, b"\x00\x01flattened model directory") is None


def test_the_model_key_is_live_and_the_orphaned_one_dead(program, tmp_path):
    report = audit_file(program)
    assert report.kept_unprovable_named_data == ()
    assert [e.name for e in report.dead] == [ORPHAN_KEY]
    parts = {p["names"][0]: p for p in explain_file(program).to_json()["parts"] if p["names"]}
    assert parts[MODEL_KEY]["readers"] == [
        f"{COREML_BACKEND_ID} delegate 0 in plan 'forward' via key {MODEL_KEY}"
    ]
    result = prune_file(program, tmp_path / "pruned.pte")
    assert result.dropped_named_data == (ORPHAN_KEY,)


@pytest.mark.parametrize(
    "rename",
    [
        lambda p, o, out: merge_files([p, o], out, prefixes=["ft_=#2"]),
        lambda p, o, out: merge_files([p, o], out, methods=["score=#2:forward"]),
        lambda p, o, out: split_file(p, out, ["score=forward"]),
    ],
    ids=["merge_prefix", "merge_method", "split_method"],
)
def test_renaming_a_method_core_ml_finds_by_name_is_refused(program, other, tmp_path, rename):
    with pytest.raises(MethodSetError, match="Core ML looks function 'forward'"):
        rename(program, other, tmp_path / "out.pte")
    assert not (tmp_path / "out.pte").exists()


def test_keeping_its_name_is_not_refused(program, tmp_path):
    split_file(program, tmp_path / "out.pte", ["forward"])
    assert (tmp_path / "out.pte").exists()


def test_the_refusal_is_one_line_and_exit_2(program, tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "emitter_filter", "split", str(program), "--method", "score=forward"]
        + ["-o", str(tmp_path / "out.pte")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_what_split_writes_of_it_is_labelled_not_run_verified(program, tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "emitter_filter", "split", str(program), "--method", "forward"]
        + ["-o", str(tmp_path / "out.pte")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert "not run-verified here: no runtime for CoreMLBackend" in run.stderr
