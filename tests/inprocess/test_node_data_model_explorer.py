"""`explain --node-data` against the real client: the ids are the ones Arm's PTE adapter
gives the file's graphs, and Model Explorer's own node-data builder reads the file back.

Programs built here (random weights, fixed seed), portable and lowered to XNNPACK. The
adapter and Model Explorer run in their own venv (`tests.model_explorer`); the last test
starts Model Explorer's server with the adapter and reads the node data off the web app in
headless Chromium. `EMITTER_FILTER_SCREENSHOTS=docs` keeps its picture of the portable program
as `docs/model-explorer.png`.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch

from emitter_filter.cli import main
from emitter_filter.ondisk.explain import explain_file
from emitter_filter.ondisk.node_data import INPUTS_NODE, OUTPUTS_NODE
from tests.browser import DevToolsPage, needs_chromium
from tests.model_explorer import (
    NODE_DATA_ROWS,
    ROOT_STATS_ROWS,
    adapter_graphs,
    needs_model_explorer,
    round_trip,
    serve,
)
from tests.model_sets import export

pytestmark = needs_model_explorer

#: The window of the picture in docs/explain.md (`EMITTER_FILTER_SCREENSHOTS=docs`).
WINDOW = (1400, 860)
#: The graph selector's option for a graph id, once the selector is open.
_OPTION = """[...document.querySelectorAll("mat-option")]
    .find(option => option.innerText.trim().split("\\n")[0].trim() === "%s")"""
_CLICK = """[...document.querySelectorAll("mat-icon, .mat-icon")]
    .find(icon => icon.innerText.trim() === "%s")?.closest("button, [role=button], div")?.click()"""


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
    # XNNPACK's: the graph of the call that reads the weights too (the adapter's id for it).
    assert bool(set(document) - {"forward"}) == (program.stem == "xnnpack")
    for graph, data in document.items():
        assert set(data["results"]) <= set(graphs[graph]), graph
    again = round_trip(document)
    for graph, data in document.items():
        assert {k: again[graph][k] for k in data} == data


def test_the_largest_node_reads_the_largest_constant_and_dead_bytes_are_on_the_inputs(
    program,
    tmp_path,
):
    explanation = explain_file(program)
    out = tmp_path / "node-data.json"
    assert main(["explain", str(program), "--node-data", str(out)]) == 0
    graph, data = "forward", json.loads(out.read_text())["forward"]
    values = {node: r["value"] for node, r in data["results"].items()}
    read = [
        p
        for p in explanation.parts
        if p.readers and p.status == "live" and p.storage in ("constant", "named_data")
    ]
    largest = max(read, key=lambda p: p.nbytes)
    calls = [node for node in values if node != INPUTS_NODE]
    ranked = sorted(calls, key=values.get, reverse=True)
    # The one node above every other is the call that reads the largest constant.
    assert values[ranked[0]] >= largest.nbytes and largest.readers[0].plan == graph
    assert len(ranked) == 1 or values[ranked[1]] < largest.nbytes
    dead = sum(p.nbytes for p in explanation.parts if p.status == "dead")
    assert dead == 32 * 32 * 4 and values[INPUTS_NODE] == dead
    assert main(["explain", str(program), "--node-data", str(out), "--value", "dead"]) == 0
    assert json.loads(out.read_text()) == {
        graph: {
            "name": f"dead ({program.name})",
            "results": {INPUTS_NODE: {"value": dead}},
            "gradient": data["gradient"],
        }
    }


def test_xnnpack_nodes_carry_the_named_data_their_inputs_hold(tmp_path):
    """On the adapter's graph of an XNNPACK call, each fully connected node holds its own
    filter and bias: the large linear's node the most, the bytes on the call split among
    them."""
    torch.manual_seed(0)
    program = tmp_path / "xnnpack.pte"
    program.write_bytes(export(Model(), "xnnpack"))
    out = tmp_path / "node-data.json"
    assert main(["explain", str(program), "--node-data", str(out)]) == 0
    document = json.loads(out.read_text())
    [graph] = set(document) - {"forward"}
    assert graph.startswith(f"{program.name}::forward_")
    labels = adapter_graphs(program)[graph]
    values = {node: r["value"] for node, r in document[graph]["results"].items()}
    assert {labels[node] for node in values} == {"XNNFullyConnected"} and len(values) == 2
    large, small = (256 * 64 + 256) * 4, (16 * 64 + 16) * 4
    assert sorted(values.values()) == [small, large]
    named = sum(p.nbytes for p in explain_file(program).parts if p.storage == "named_data")
    assert sum(values.values()) == named


@needs_chromium
def test_model_explorer_shows_the_bytes_on_the_adapters_nodes(program, tmp_path):
    """The real client: Model Explorer's server with the adapter, the web app in Chromium."""
    out = tmp_path / "node-data.json"
    assert main(["explain", str(program), "--node-data", str(out)]) == 0
    document = json.loads(out.read_text())
    graph, data = "forward", document["forward"]
    values = {node: result["value"] for node, result in data["results"].items()}
    graphs = adapter_graphs(program)
    labels = graphs[graph]
    with (
        serve(program, out, tmp_path / "server.log") as address,
        DevToolsPage(tmp_path, window=WINDOW) as page,
    ):
        page.open(address)
        rows = page.wait_for(NODE_DATA_ROWS)
        root = page.wait_for(ROOT_STATS_ROWS)
        if os.environ.get("EMITTER_FILTER_SCREENSHOTS") and program.stem == "portable":
            # Every layer open (the toolbar's "expand all"), the graph fit to the window.
            for icon in ("unfold_more_double", "fit_screen"):
                page.evaluate(_CLICK % icon)
                time.sleep(2)  # the graph's layout and colours
            # The pointer away from the toolbar, so that no button's tooltip shows.
            page.call(
                "Input.dispatchMouseEvent", type="mouseMoved", x=WINDOW[0] - 420, y=WINDOW[1] - 40
            )
            page.evaluate("document.activeElement && document.activeElement.blur()")
            # The help bubbles the clicks opened (the app's own popovers), out of the picture.
            page.evaluate("document.querySelectorAll('bubble-container').forEach(b => b.remove())")
            time.sleep(2)
            page.screenshot(Path(os.environ["EMITTER_FILTER_SCREENSHOTS"]) / "model-explorer.png")
        delegate_rows = {}
        for subgraph in set(document) - {graph}:  # XNNPACK's: picked in the graph selector
            page.evaluate("document.querySelector('mat-select').click()")
            page.wait_for(f"!!{_OPTION % subgraph}")
            page.evaluate(f"{_OPTION % subgraph}.click()")
            # Once the table lists the subgraph's nodes (the adapter's labels, in its order).
            nodes = [
                graphs[subgraph][node]
                for node in graphs[subgraph]
                if node not in (INPUTS_NODE, OUTPUTS_NODE)
            ]
            delegate_rows[subgraph] = page.wait_for(
                f"(rows => rows && JSON.stringify(rows.map(row => row[0])) === "
                f"{json.dumps(json.dumps(nodes, separators=(',', ':')))} && rows)"
                f"({NODE_DATA_ROWS})"
            )
    # The app's "Node data" table lists the graph's operator nodes in the adapter's order,
    # with the value the file gives each ("-" for none): an id it did not match would be
    # missing there. The inputs and outputs nodes are not in that table (their
    # ids are checked against the adapter's own in the tests above).
    calls = [node for node in labels if node not in (INPUTS_NODE, OUTPUTS_NODE)]
    assert set(values) <= {*calls, INPUTS_NODE}
    shown = [
        (label, None if value == "-" else float(value.replace(",", ""))) for label, value in rows
    ]
    assert shown == [(labels[node], values.get(node)) for node in calls]
    # The node it shows largest is the file's largest: the reader of the largest constant
    # (`test_the_largest_node_reads_the_largest_constant_and_dead_bytes_are_on_the_inputs`).
    largest = max((node for node in values if node != INPUTS_NODE), key=values.get)
    assert max((row for row in shown if row[1] is not None), key=lambda row: row[1]) == (
        labels[largest],
        values[largest],
    )
    # The dead bytes, on the inputs node, show beside the plan in the root-level stats, as a
    # share of what the plan's calls read.
    calls_sum = sum(value for node, value in values.items() if node != INPUTS_NODE)
    assert float(root["Graph Inputs"]) == pytest.approx(
        100 * values[INPUTS_NODE] / calls_sum, abs=0.05
    )
    # The graph of an XNNPACK call: the app shows each of its nodes with the file's value.
    assert bool(delegate_rows) == (program.stem == "xnnpack")
    for subgraph, rows in delegate_rows.items():
        results = document[subgraph]["results"]
        nodes = [node for node in graphs[subgraph] if node not in (INPUTS_NODE, OUTPUTS_NODE)]
        assert [(label, None if value == "-" else float(value)) for label, value in rows] == [
            (graphs[subgraph][node], results[node]["value"] if node in results else None)
            for node in nodes
        ]
