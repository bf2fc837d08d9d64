"""`explain --node-data` against the real client: the ids are the ones Arm's PTE adapter
gives the file's graphs, and Model Explorer's own node-data builder reads the file back.

Programs built here (random weights, fixed seed), portable and lowered to XNNPACK. The
adapter and Model Explorer run in their own venv (`tests.model_explorer`).
"""

from __future__ import annotations

import json

import pytest
import torch

from emitter_filter.cli import main
from emitter_filter.ondisk.explain import explain_file
from emitter_filter.ondisk.node_data import INPUTS_NODE
from tests.model_explorer import adapter_graphs, needs_model_explorer, round_trip
from tests.model_sets import export

pytestmark = needs_model_explorer


class Model(torch.nn.Module):
    """Two linears of different sizes and a buffer nothing reads."""

    def __init__(self) -> None:
        super().__init__()
        self.small = torch.nn.Linear(64, 16)
        self.large = torch.nn.Linear(64, 256)
        self.register_buffer("unused", torch.randn(32, 32))

    def forward(self, x):
        return self.small(x).sum() + self.large(x).sum()


@pytest.fixture(params=["portable", "xnnpack"])
def program(request, tmp_path):
    torch.manual_seed(0)
    path = tmp_path / f"{request.param}.pte"
    path.write_bytes(export(Model(), request.param))
    return path


def test_every_node_is_one_the_adapter_draws_and_model_explorer_reads_it(program, tmp_path):
    out = tmp_path / "node-data.json"
    assert main(["explain", str(program), "--node-data", str(out)]) == 0
    document = json.loads(out.read_text())
    graphs = adapter_graphs(program)
    assert document and set(document) <= set(graphs)
    for graph, data in document.items():
        assert set(data["results"]) <= set(graphs[graph]), graph
    again = round_trip(document)
    for graph, data in document.items():
        assert {k: again[graph][k] for k in data} == data


def test_the_largest_node_reads_the_largest_constant_and_dead_bytes_are_on_the_inputs(
    program, tmp_path,
):
    explanation = explain_file(program)
    out = tmp_path / "node-data.json"
    assert main(["explain", str(program), "--node-data", str(out)]) == 0
    [(graph, data)] = json.loads(out.read_text()).items()
    values = {node: r["value"] for node, r in data["results"].items()}
    read = [p for p in explanation.parts if p.readers and p.status == "live"
            and p.storage in ("constant", "named_data")]
    largest = max(read, key=lambda p: p.nbytes)
    calls = [node for node in values if node != INPUTS_NODE]
    ranked = sorted(calls, key=values.get, reverse=True)
    # The one node above every other is the call that reads the largest constant.
    assert values[ranked[0]] >= largest.nbytes and largest.readers[0].plan == graph
    assert len(ranked) == 1 or values[ranked[1]] < largest.nbytes
    dead = sum(p.nbytes for p in explanation.parts if p.status == "dead")
    assert dead == 32 * 32 * 4 and values[INPUTS_NODE] == dead
    assert main(["explain", str(program), "--node-data", str(out), "--value", "dead"]) == 0
    assert json.loads(out.read_text())[graph]["results"] == {INPUTS_NODE: {"value": dead}}
