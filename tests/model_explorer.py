"""Google's Model Explorer and Arm's PTE adapter, in a venv of their own, for the tests of
`explain --node-data`.

The adapter wants `flatbuffers>25.9`, above the package's floor, so they live apart:
`EMITTER_FILTER_MODEL_EXPLORER_PYTHON` names that venv's python (`.ci/run` makes it from
`constraints/model-explorer.txt` and sets it). Without it the tests skip; with it set to
something that does not run, they fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

__all__ = ["PYTHON", "needs_model_explorer", "adapter_graphs", "round_trip"]

PYTHON = os.environ.get("EMITTER_FILTER_MODEL_EXPLORER_PYTHON")

#: Marks a test that runs the adapter or Model Explorer's builder: skipped without the venv.
needs_model_explorer = pytest.mark.skipif(
    not PYTHON, reason="EMITTER_FILTER_MODEL_EXPLORER_PYTHON (a venv with ai-edge-model-explorer "
    "and pte-adapter-model-explorer, constraints/model-explorer.txt) is not set")


def _run(code: str, *args: str) -> str:
    result = subprocess.run([PYTHON, "-c", textwrap.dedent(code), *args],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def adapter_graphs(pte: Path) -> dict[str, list[str]]:
    """The adapter's graphs of `pte`: graph id to node ids, delegate subgraphs included."""
    code = """
        import json, sys
        from pte_adapter_model_explorer.main import PTEAdapter
        graphs = {}
        for collection in PTEAdapter().convert(sys.argv[1], {})["graphCollections"]:
            for graph in collection.graphs:
                graphs[graph.id] = [node.id for node in graph.nodes]
        print(json.dumps(graphs))
    """
    return json.loads(_run(code, str(pte)))


def round_trip(document: dict) -> dict:
    """`document` read into `model_explorer.node_data_builder`'s classes and written back."""
    code = """
        import json, sys
        from model_explorer import node_data_builder as ndb
        document = json.loads(sys.argv[1])
        graphs = {
            graph: ndb.GraphNodeData(
                results={node: ndb.NodeDataResult(**r) for node, r in data["results"].items()},
                name=data.get("name"),
                gradient=[ndb.GradientItem(**item) for item in data.get("gradient", [])],
            )
            for graph, data in document.items()
        }
        print(ndb.ModelNodeData(graphsData=graphs).to_json_string())
    """
    return json.loads(_run(code, json.dumps(document)))
