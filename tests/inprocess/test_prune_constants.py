"""End to end: `ExecutorchBackendConfig(prune_constants=True)` on programs with dead constants.

Each case is built three times from the same seeded model: with its dead
constants and pruning off (what ExecuTorch writes today), with its dead constants
and pruning on, and with the dead constants deleted at the source.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path

import pytest
import torch
from executorch.exir import ExecutorchBackendConfig as UpstreamConfig
from executorch.exir._serialize._program import deserialize_pte_binary
from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer

import emitter_filter
from emitter_filter.inprocess.prune_emitted import collect_plan_refs
from emitter_filter.program.reachability import DataSpace, find_live
from tests.builders import CASES, Case
from tests.shared_build import build_once

PRUNE = dict(prune_constants=True)


def _files(manager, directory: Path) -> dict[str, bytes]:
    """Every file the manager writes: the .pte and each .ptd, by name."""
    directory.mkdir()
    manager.save(str(directory / "model.pte"))
    manager.write_tensor_data_to_file(str(directory))
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def _ptd_bytes(files: dict[str, bytes]) -> bytes | None:
    ptds = [data for name, data in files.items() if name.endswith(".ptd")]
    assert len(ptds) <= 1, "these cases write at most one .ptd"
    return ptds[0] if ptds else None


def _run(case: Case, files: dict[str, bytes]) -> list[list[torch.Tensor]]:
    pte = next(data for name, data in files.items() if name.endswith(".pte"))
    ptd = _ptd_bytes(files)
    module = (
        _load_for_executorch_from_buffer(pte, ptd) if ptd else _load_for_executorch_from_buffer(pte)
    )
    return [list(module.run_method(method, inputs)) for method, inputs in case.runs]


def _build(case: Case, directory: Path) -> dict:
    """The case's three builds under `directory`, and what the tests read of the pruned one.

    Only picklable figures, so that `build_once` can share them: the report without its
    names (they need the edge program), the pruned manager's program and buffers.
    """
    pruned = case.build(dead=True, config=emitter_filter.ExecutorchBackendConfig(**PRUNE))
    with open(directory / "written.pte", "wb") as f:
        pruned.write_to_file(f)
    emitter_output = pruned._emitter_output
    return {
        "dirty": _files(case.build(dead=True), directory / "dirty"),
        "pruned": _files(pruned, directory / "pruned"),
        "clean": _files(case.build(dead=False), directory / "clean"),
        "report": dataclasses.replace(emitter_filter.report(pruned), find_names=dict),
        "program": pruned.executorch_program,
        "buffer": pruned.buffer,
        "written": (directory / "written.pte").read_bytes(),
        "mutable_data": len(emitter_output.mutable_data or [None]),
        "external_constants": len(emitter_output.external_constant_buffer),
    }


@pytest.fixture(scope="module")
def every_case_built(tmp_path_factory) -> dict[str, dict]:
    """Every case built once in the whole test run, not once per xdist worker.

    Each worker walks the cases under `build_once`, the second one from the other end:
    while one builds a case the other builds another, and each reads what the other
    built. The pruned build runs the hook; the tests below check what it wrote.
    """
    cases = list(CASES)
    if os.environ.get("PYTEST_XDIST_WORKER", "gw0") != "gw0":
        cases.reverse()
    return {
        case.name: build_once(
            tmp_path_factory, f"prune-{case.name}", functools.partial(_build, case)
        )[1]
        for case in cases
    }


@pytest.fixture(scope="module", params=CASES, ids=lambda case: case.name)
def built(request, every_case_built):
    case: Case = request.param
    return {"case": case, **every_case_built[case.name]}


def test_case_carries_dead_constants_exactly_when_expected(built):
    report = built["report"]
    dirty_bytes = sum(map(len, built["dirty"].values()))
    pruned_bytes = sum(map(len, built["pruned"].values()))
    if built["case"].has_dead:
        assert report.dropped_values, "the case must have something to prune, or it tests nothing"
        # Dropping only a value can leave the size as it was, through segment padding.
        assert dirty_bytes > pruned_bytes or report.dropped_bytes == 0
        assert built["pruned"] != built["dirty"]
    else:
        assert not report.dropped and report.dropped_values == 0
        assert built["pruned"] == built["dirty"]


def test_pruned_files_are_byte_identical_to_the_clean_model(built):
    assert built["pruned"].keys() == built["clean"].keys()
    for name in built["clean"]:
        assert built["pruned"][name] == built["clean"][name], name


def test_pruned_program_computes_bit_identical_outputs(built):
    expected = _run(built["case"], built["dirty"])
    actual = _run(built["case"], built["pruned"])
    assert len(expected) == len(actual)
    for want, got in zip(expected, actual, strict=True):
        assert len(want) == len(got)
        for w, g in zip(want, got, strict=True):
            if isinstance(w, torch.Tensor):
                assert w.dtype == g.dtype and torch.equal(w, g)
            else:
                assert w == g


def test_nothing_dead_remains(built):
    program = built["program"]
    plans = [collect_plan_refs(plan) for plan in program.execution_plan]
    liveness = find_live(plans)
    for plan, live in zip(plans, liveness.live_values, strict=True):
        assert len(live) == plan.num_values, plan.name
    assert len(liveness.live_data[DataSpace.CONSTANT]) == len(program.constant_buffer) - 1
    assert len(liveness.live_data[DataSpace.MUTABLE]) == built["mutable_data"] - 1
    assert len(liveness.live_data[DataSpace.EXTERNAL]) == built["external_constants"]


def test_report_matches_the_bytes_saved(built):
    report = built["report"]
    assert report.dropped_bytes == sum(d.nbytes for d in report.dropped)
    saved = sum(map(len, built["dirty"].values())) - sum(map(len, built["pruned"].values()))
    # The files also lose each entry's alignment padding and the dead values' metadata.
    slack = 128 * (len(report.dropped) + 1) + 256 * report.dropped_values
    assert report.dropped_bytes <= saved <= report.dropped_bytes + slack


def test_manager_outputs_agree_with_the_pruned_program(built):
    assert built["written"] == built["buffer"]
    assert next(d for n, d in built["pruned"].items() if n.endswith(".pte")) == built["buffer"]
    round_trip = deserialize_pte_binary(built["buffer"]).program
    for ours, theirs in zip(
        built["program"].execution_plan, round_trip.execution_plan, strict=True
    ):
        assert ours.values == theirs.values
        assert ours.inputs == theirs.inputs and ours.outputs == theirs.outputs


@pytest.mark.parametrize(
    "case",
    [
        c
        for c in CASES
        if c.name
        in ("unused_buffer_portable", "unused_buffer_xnnpack", "two_methods_and_constant_method")
    ],
    ids=lambda case: case.name,
)
def test_program_with_nothing_dead_is_left_byte_identical(case, tmp_path):
    plain = _files(case.build(dead=False, config=UpstreamConfig()), tmp_path / "plain")
    pruned = _files(
        case.build(dead=False, config=emitter_filter.ExecutorchBackendConfig(**PRUNE)),
        tmp_path / "pruned",
    )
    assert pruned == plain


def test_prune_constants_false_is_byte_identical_to_plain_executorch(tmp_path):
    case = next(c for c in CASES if c.name == "unused_buffer_portable")
    emitter_filter.install()
    plain = _files(case.build(dead=True, config=UpstreamConfig()), tmp_path / "plain")
    off = _files(
        case.build(dead=True, config=emitter_filter.ExecutorchBackendConfig()), tmp_path / "off"
    )
    assert off == plain
