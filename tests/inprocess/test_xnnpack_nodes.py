"""`delegates.xnnpack_node_keys`: which named data each node of an XNNPACK graph reads.

The node data of an XNNPACK call's graph (`explain --node-data`) rests on it: the union's
tables as the installed ExecuTorch's schema declares them, and every key a blob names read
by some node, on programs lowered here with several kinds of node that hold constants.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import re

import pytest
import torch

from emitter_filter.delegates.xnnpack import _XNODE_TABLES, xnnpack_named_keys, xnnpack_node_keys
from emitter_filter.ondisk.read.byte_source import open_sources
from emitter_filter.ondisk.read.read_pte import read_pte_program
from emitter_filter.ondisk.read.readers import xnnpack_graphs
from tests.model_sets import export

SCHEMA = importlib.resources.files("executorch.backends.xnnpack.serialization") / "schema.fbs"


def test_the_union_tables_are_the_installed_schemas():
    union = re.search(r"union XNodeUnion \{(.*?)\}", SCHEMA.read_text(), re.S).group(1)
    members = [m.split("//")[0].strip() for m in union.split(",")]
    aliases = dict(m.replace(" ", "").split(":") for m in members if ":" in m)
    assert _XNODE_TABLES == aliases


class Layers(torch.nn.Module):
    """A conv, a PReLU, a linear and a constant added: nodes whose inputs hold weights."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.prelu = torch.nn.PReLU(8)
        self.linear = torch.nn.Linear(8 * 6 * 6, 32)
        self.register_buffer("offset", torch.randn(32))

    def forward(self, x):
        return self.linear(self.prelu(self.conv(x)).flatten(1)) + self.offset


@pytest.mark.parametrize(
    "model, inputs",
    [
        (Layers, (torch.randn(1, 3, 8, 8),)),
        (
            lambda: torch.nn.Sequential(
                torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)
            ),
            (torch.randn(2, 16),),
        ),
    ],
    ids=["conv-prelu-linear-add", "mlp"],
)
def test_every_key_a_blob_names_is_read_by_one_of_its_nodes(model, inputs, tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "model.pte"
    path.write_bytes(export(model(), "xnnpack", inputs))
    read = read_pte_program(path, [])
    with contextlib.ExitStack() as stack:
        source = open_sources(stack, [str(path)])[read.pte.path]
        graphs = list(xnnpack_graphs(read.pte, read.program, read.program_data, source))
    assert graphs
    for _, graph in graphs:
        nodes = xnnpack_node_keys(graph)
        read_by_nodes = [key for keys in nodes for key in keys]
        assert set(read_by_nodes) == set(xnnpack_named_keys(graph))
        # Each weight is one node's: a node per layer that holds one.
        assert len(read_by_nodes) == len(set(read_by_nodes))
