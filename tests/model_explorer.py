"""Google's Model Explorer and Arm's PTE adapter, in a venv of their own, for the tests of
`explain --node-data`.

The adapter wants `flatbuffers>25.9`, above the package's floor, so they live apart:
`EMITTER_FILTER_MODEL_EXPLORER_PYTHON` names that venv's python (`.ci/run` makes it from
`constraints/model-explorer.txt` and sets it). Without it the tests skip; with it set to
something that does not run, they fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = [
    "PYTHON",
    "needs_model_explorer",
    "adapter_graphs",
    "round_trip",
    "serve",
    "NODE_DATA_ROWS",
    "ROOT_STATS_ROWS",
]

PYTHON = os.environ.get("EMITTER_FILTER_MODEL_EXPLORER_PYTHON")

#: Marks a test that runs the adapter or Model Explorer's builder: skipped without the venv.
needs_model_explorer = pytest.mark.skipif(
    not PYTHON,
    reason="EMITTER_FILTER_MODEL_EXPLORER_PYTHON (a venv with ai-edge-model-explorer "
    "and pte-adapter-model-explorer, constraints/model-explorer.txt) is not set",
)


def _run(code: str, *args: str) -> str:
    result = subprocess.run(
        [PYTHON, "-c", textwrap.dedent(code), *args], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def adapter_graphs(pte: Path) -> dict[str, dict[str, str]]:
    """The adapter's graphs of `pte`: graph id to {node id: label}, delegate subgraphs included."""
    code = """
        import json, sys
        from pte_adapter_model_explorer.main import PTEAdapter
        graphs = {}
        for collection in PTEAdapter().convert(sys.argv[1], {})["graphCollections"]:
            for graph in collection.graphs:
                graphs[graph.id] = {node.id: node.label for node in graph.nodes}
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


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def serve(
    pte: Path,
    node_data: Path | None,
    log: Path,
    timeout: float = 120.0,
    extensions: tuple[str, ...] = (),
) -> Iterator[str]:
    """Model Explorer's server on 127.0.0.1 with the PTE adapter (and `extensions`), `pte`
    and its node data loaded as its command line loads them (its output in `log`); yields
    the address it prints for them."""
    port = _free_port()
    command = [
        str(Path(PYTHON).parent / "model-explorer"),
        str(pte),
        *(["--node_data_paths", str(node_data)] if node_data is not None else []),
        "--extensions",
        ",".join(("pte_adapter_model_explorer", *extensions)),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no_open_in_browser",
    ]
    with open(log, "w") as output:
        server = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    try:
        pattern = re.compile(rf"http://127\.0\.0\.1:{port}/\?data=\S+")
        end, found = time.monotonic() + timeout, None
        while found is None and server.poll() is None and time.monotonic() < end:
            time.sleep(0.5)
            found = pattern.search(log.read_text())
        assert found, f"Model Explorer's server did not start: {log.read_text()[-3000:]}"
        yield found.group(0)
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


#: Model Explorer's "Node data" table, as [node label, value text] per row, once drawn.
NODE_DATA_ROWS = """(() => {
  const rows = [...document.querySelectorAll("table.results tbody tr")]
    .map(row => [...row.querySelectorAll("td")].map(cell => cell.innerText.trim()))
    .filter(cells => cells.length >= 3);
  return rows.length ? rows.map(cells => [cells[1], cells[2]]) : null;
})()"""

#: Its "Root-level nodes stats" table, as {node label: its "Sum %" text}.
ROOT_STATS_ROWS = """Object.fromEntries(
  [...document.querySelectorAll("table.children-stats-results tbody tr")]
    .map(row => [...row.querySelectorAll("td")].map(cell => cell.innerText.trim()))
    .filter(cells => cells.length >= 3).map(cells => [cells[1], cells[2]]))"""
