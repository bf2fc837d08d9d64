"""`explain --node-data` on the golden files, without torch or Model Explorer (the real
client's checks are `tests/inprocess/test_node_data_model_explorer.py`)."""

from __future__ import annotations

import json
import re

import pytest

from emitter_filter.cli import main
from emitter_filter.ondisk.audit import audit_file
from emitter_filter.ondisk.explain import explain_file
from emitter_filter.ondisk.node_data import INPUTS_NODE, node_data_file
from tests.files import CASES, GOLDEN, saved

pytestmark = pytest.mark.filetools


@pytest.mark.parametrize("case", CASES)
def test_dead_bytes_are_on_the_inputs_and_every_other_node_is_a_call(case):
    pte, ptds = saved(GOLDEN / case / "dirty")
    [(graph, data)] = node_data_file(pte, ptds, "dead").items()
    assert data["results"] == {INPUTS_NODE: {"value": audit_file(pte, ptds).dead_bytes}}
    document = node_data_file(pte, ptds)
    data = document.pop("forward")
    calls = [node for node in data["results"] if node not in (INPUTS_NODE, "GraphOutputs")]
    assert calls and all(re.fullmatch(r"forward_\d+_\d+", node) for node in calls)
    # An XNNPACK call's graph, named as the adapter names it, a node per XNNPACK node.
    if case == "xnnpack":
        assert [f"model.pte::{call}" for call in calls] == list(document)
    else:
        assert not document
    for graph in document.values():
        assert all(node.isdigit() for node in graph["results"])


def test_a_tensor_read_by_two_calls_counts_at_each():
    # The plain golden program: forward(x) = x + 2 * w reads w in two calls.
    pte, _ = saved(GOLDEN / "plain" / "dirty")
    explanation = explain_file(pte)
    shared = [p for p in explanation.parts if len({(r.op, r.ordinal) for r in p.readers}) > 1]
    values = node_data_file(pte)["forward"]["results"]
    for part in shared:
        assert sum(v["value"] >= part.nbytes for v in values.values()) >= 2


def test_the_cli_writes_it_says_where_and_refuses_what_it_cannot(tmp_path, capsys):
    pte, _ = saved(GOLDEN / "xnnpack" / "dirty")
    out = tmp_path / "nd.json"
    assert main(["explain", str(pte), "--node-data", str(out), "--value", "duplicated"]) == 0
    assert f"wrote {out}: Model Explorer node data" in capsys.readouterr().err
    assert json.loads(out.read_text()) == node_data_file(pte, (), "duplicated")
    assert main(["explain", str(pte), "--node-data", str(out), "--value", "most"]) == 2
    assert main(["explain", str(pte), "--node-data", str(pte)]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith("emitter-filter: ") and pte.exists()
    assert main(["explain", str(pte), "--node-data", str(tmp_path / "no" / "dir" / "x.json")]) == 2
    capsys.readouterr()
    assert main(["explain", str(pte), "--value", "dead"]) == 2
    assert capsys.readouterr().err == (
        "emitter-filter explain: --value says what --node-data "
        "sums; give --node-data OUT.json with it "
        "(see emitter-filter explain --help)\n"
    )
