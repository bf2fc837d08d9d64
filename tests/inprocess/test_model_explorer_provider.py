"""The node data provider (`emitter_filter.model_explorer_provider`) in Model Explorer's
real server, beside Arm's PTE adapter, both in their own venv (`tests.model_explorer`).

The server lists the provider for `.pte` files drawn by the adapter; asked over its HTTP
API to run on the graph the adapter drew (as the web app asks), it gives each node the
bytes `explain --node-data` gives it, summing to `explain`'s; on a graph whose node ids
were renumbered, each call still gets its own bytes. Programs built here, portable and
lowered to XNNPACK.
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

import pytest
import torch

from emitter_filter.cli import main
from emitter_filter.ondisk.explain import explain_file
from tests.inprocess.test_node_data_model_explorer import Model
from tests.model_explorer import needs_model_explorer, serve
from tests.model_sets import export

GOLDEN_EXTERNAL = Path(__file__).parent.parent / "golden" / "external" / "dirty"

pytestmark = [needs_model_explorer, pytest.mark.slow]

PROVIDER = "emitter_filter.model_explorer_provider"
PROVIDER_ID = "emitter_filter_bytes"
STRUCTURE = {"header", "program", "values", "instructions", "operators", "padding", "segments"}


def _get(address: str, path: str):
    base = address.split("/?")[0]
    with urllib.request.urlopen(base + path, timeout=120) as response:
        return json.load(response)


def _post(address: str, command: dict):
    base = address.split("/?")[0]
    request = urllib.request.Request(
        base + "/apipost/v1/send_command",
        data=json.dumps(command).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.load(response)


def _convert(address: str, pte) -> dict[str, dict]:
    """The adapter's graphs of `pte`, from the server, by graph id."""
    answer = _post(
        address,
        {
            "extensionId": "pte_adapter_model_explorer",
            "cmdId": "convert",
            "modelPath": str(pte),
            "settings": {},
            "deleteAfterConversion": False,
        },
    )
    assert "error" not in answer or not answer["error"], answer
    return {g["id"]: g for c in answer["graphCollections"] for g in c["graphs"]}


def _run(address: str, pte, graph: dict, config: dict | None = None) -> dict:
    answer = _post(
        address,
        {
            "extensionId": PROVIDER_ID,
            "cmdId": "run",
            "modelPath": str(pte),
            "graphId": graph["id"],
            "configValues": config or {},
            "graph": graph,
        },
    )
    assert not answer.get("error"), answer
    return {node: r["value"] for node, r in answer["result"]["results"].items()}


@pytest.fixture(params=["portable", "xnnpack"])
def program(request, tmp_path):
    torch.manual_seed(0)
    path = tmp_path / f"{request.param}.pte"
    path.write_bytes(export(Model(), request.param))
    return path


def test_the_server_lists_the_provider_and_its_values_sum_to_explains(program, tmp_path):
    with serve(program, None, tmp_path / "server.log", extensions=(PROVIDER,)) as address:
        listed = {e["id"]: e for e in _get(address, "/api/v1/get_extensions")}
        assert listed[PROVIDER_ID]["type"] == "node_data_provider"
        assert listed[PROVIDER_ID]["filter"] == {
            "modelFileExts": ["pte"],
            "adapterIds": ["pte_adapter_model_explorer"],
        }
        editors = _post(address, {"extensionId": PROVIDER_ID, "cmdId": "get_config_editors"})[
            "configEditors"
        ]
        assert {e["id"]: e["type"] for e in editors} == {"value": "drop_down", "ptd": "file"}
        graphs = _convert(address, program)
        got = {graph_id: _run(address, program, graph) for graph_id, graph in graphs.items()}
        dead = _run(address, program, graphs["forward"], {"value": "dead"})
        # Renumbered: every node id of the plan's graph changed, the calls drawn as before.
        renamed = json.loads(json.dumps(graphs["forward"]).replace('"forward_', '"renamed_'))
        moved = _run(address, program, renamed)
    out = tmp_path / "node-data.json"
    assert main(["explain", str(program), "--node-data", str(out)]) == 0
    document = json.loads(out.read_text())
    expected = {g: {n: r["value"] for n, r in d["results"].items()} for g, d in document.items()}
    assert {g: v for g, v in got.items() if v} == expected
    # Each constant of this model is read by one call: the plan's nodes sum to every byte
    # explain counts outside the file's structure, the dead ones on Graph Inputs.
    parts = explain_file(program).parts
    counted = sum(p.nbytes for p in parts if p.nbytes and p.storage not in STRUCTURE)
    assert sum(got["forward"].values()) == counted
    assert dead == {"GraphInputs": sum(p.nbytes for p in parts if p.status == "dead")} != {}
    assert moved == {n.replace("forward_", "renamed_"): v for n, v in got["forward"].items()}


def test_a_pte_uploaded_without_its_ptd_is_an_error_until_the_ptd_is_picked(tmp_path):
    """A `.pte` uploaded in the browser arrives in a directory of its own; the run's
    dialog picks the `.ptd` it reads."""
    [pte] = GOLDEN_EXTERNAL.glob("*.pte")
    [ptd] = GOLDEN_EXTERNAL.glob("*.ptd")
    alone = tmp_path / "uploaded"
    alone.mkdir()
    shutil.copyfile(pte, alone / pte.name)
    with serve(alone / pte.name, None, tmp_path / "server.log", extensions=(PROVIDER,)) as address:
        graph = next(iter(_convert(address, alone / pte.name).values()))
        command = {
            "extensionId": PROVIDER_ID,
            "cmdId": "run",
            "modelPath": str(alone / pte.name),
            "graphId": graph["id"],
            "configValues": {},
            "graph": graph,
        }
        missing = _post(address, command)
        picked = _run(address, alone / pte.name, graph, {"ptd": str(ptd)})
    assert ".ptd" in missing["error"], missing
    with_ptd = explain_file(pte, [ptd])
    assert sum(picked.values()) >= sum(
        p.nbytes for p in with_ptd.parts if p.storage == "named_data"
    )
