"""The node data provider Model Explorer loads: `explain --node-data` on the graph it shows.

Model Explorer calls `run` with the model's path, the id of the graph on screen and that
graph as the PTE adapter drew it. The values are `node_data`'s (the bytes, dead bytes or
duplicated bytes each call reads, `--value`); they are put on the handed graph's nodes by
what the adapter draws of each call, its instruction type and its value indices (the
`args` attribute), not by the node's id, so a drawing that numbers its nodes otherwise
still gets each call's bytes. A `.pte` uploaded in the browser arrives alone: the `.ptd`
files it reads are picked in the run's dialog (a `.ptd` beside a local file is read as
`explain` reads it).
"""

from __future__ import annotations

import ast
import os
from collections.abc import Mapping

from model_explorer import (  # type: ignore[import-not-found,unused-ignore]
    NodeDataProvider,
    NodeDataProviderFilter,
    NodeDataProviderMetadata,
    NodeDataProviderResult,
)
from model_explorer.config_editor import (  # type: ignore[import-not-found,unused-ignore]
    DropDownConfigEditor,
    FileConfigEditor,
    OptionItem,
)
from model_explorer.node_data_builder import (  # type: ignore[import-not-found,unused-ignore]
    GradientItem,
    GraphNodeData,
    NodeDataResult,
)
from model_explorer.node_data_provider import (  # type: ignore[import-not-found,unused-ignore]
    GetConfigEditorsResult,
)

from emitter_filter.errors import EmitterFilterError
from emitter_filter.ondisk.explain import explain_file
from emitter_filter.ondisk.node_data import NODE_VALUES, graph_ids, node_data_file
from emitter_filter.ondisk.read.data_files import program_data
from emitter_filter.ondisk.read.read_pte import read_pte_program
from emitter_filter.ondisk.read.readers import plan_calls

__all__ = ["BytesPerNode", "PTD_EDITOR", "VALUE_EDITOR", "place_values"]

PTD_EDITOR, VALUE_EDITOR = "ptd", "value"
_ADAPTER = "pte_adapter_model_explorer"


def _call_key(kind: str, args) -> tuple[str, tuple[int, ...]]:
    return kind, tuple(int(a) for a in args)


def _our_keys(program) -> dict[str, dict[str, tuple]]:
    """For each graph id, our node id of each call to what the adapter draws of it."""
    keys: dict[str, dict[str, tuple]] = {}
    for plan, graph in zip(program.executionPlan or (), graph_ids(program), strict=True):
        keys[graph] = {
            f"{graph}_{call.chain}_{call.instruction}": _call_key(
                "KernelCall" if call.delegate is None else "DelegateCall", call.args
            )
            for call in plan_calls(plan)
        }
    return keys


def _drawn_keys(graph) -> dict[tuple, str]:
    """What the adapter drew of each call node of `graph`, to the node's id."""
    drawn = {}
    for node in graph.nodes:
        attrs = {a.key: a.value for a in node.attrs or ()}
        kind, args = attrs.get("Instruction Type"), attrs.get("args")
        if isinstance(kind, str) and isinstance(args, str):
            try:
                drawn[_call_key(kind, ast.literal_eval(args))] = node.id
            except (ValueError, SyntaxError, TypeError):
                continue
    return drawn


def place_values(values: Mapping[str, int], our_keys: Mapping[str, tuple], graph) -> dict[str, int]:
    """`values` (by our node ids) moved onto `graph`'s nodes: a call by what is drawn of it,
    the inputs and outputs by their ids, an XNNPACK node (no call attributes) by its id, the
    index of the node in the delegate's graph. A value with no node drawn for it is left out."""
    if graph is None:
        return dict(values)
    drawn = _drawn_keys(graph)
    ids = {node.id for node in graph.nodes}
    placed: dict[str, int] = {}
    for node, value in values.items():
        key = our_keys.get(node)
        if key is not None and key in drawn:
            target = drawn[key]
        elif key is None and node in ids:  # GraphInputs, GraphOutputs, an XNNPACK node
            target = node
        else:
            continue
        placed[target] = placed.get(target, 0) + value
    return placed


def _ptd_paths(model_path: str, picked) -> list[str]:
    """The `.ptd` files picked in the dialog, else the ones `explain` finds beside the file."""
    if isinstance(picked, str) and picked:
        return [picked]
    if isinstance(picked, list) and picked:
        return [str(p) for p in picked]
    return [os.fspath(p) for p in program_data(model_path, (), beside=True)]


class BytesPerNode(NodeDataProvider):
    """The bytes each call of a `.pte` reads (`explain --node-data`), on Model Explorer's
    graph. Subclasses `NodeDataProvider` directly: Model Explorer finds a provider by its
    direct base."""

    metadata = NodeDataProviderMetadata(
        id="emitter_filter_bytes",
        name="emitter-filter: bytes per node",
        description=(
            "The bytes of the constants and named data each call of a .pte reads, its dead "
            "bytes (on Graph Inputs) or its duplicated bytes; pick the .ptd files it reads."
        ),
        icon="data_usage",
        filter=NodeDataProviderFilter(modelFileExts=["pte"], adapterIds=[_ADAPTER]),
    )

    def __init__(self) -> None:
        super().__init__()

    def get_config_editors(self, provider_id: str) -> GetConfigEditorsResult:
        return GetConfigEditorsResult(
            configEditors=[
                DropDownConfigEditor(
                    id=VALUE_EDITOR,
                    label="Value",
                    description="What each node sums: every byte read, dead or duplicated.",
                    defaultValue=NODE_VALUES[0],
                    options=[OptionItem(value=v, label=v) for v in NODE_VALUES],
                ),
                FileConfigEditor(
                    id=PTD_EDITOR,
                    label=".ptd file",
                    description=(
                        "The .ptd the program reads (a .pte uploaded here arrives without it)."
                    ),
                    fileExts=["ptd"],
                ),
            ]
        )

    def run(
        self,
        provider_id: str,
        model_path: str,
        graph_id: str,
        config_values: dict,
        graph=None,
    ) -> NodeDataProviderResult:
        value = config_values.get(VALUE_EDITOR) or NODE_VALUES[0]
        try:
            ptds = _ptd_paths(model_path, config_values.get(PTD_EDITOR))
            outside = explain_file(model_path, ptds).outside
            document = node_data_file(model_path, ptds, value)
            program = read_pte_program(model_path, ptds).program
        except (EmitterFilterError, OSError, ValueError) as error:
            return NodeDataProviderResult(error=str(error))
        if outside:  # a .pte uploaded alone: its .ptd stayed behind
            return NodeDataProviderResult(
                error=f"{os.path.basename(model_path)} reads {len(outside)} external "
                f"tensor(s), {sum(p.nbytes for p in outside):,} bytes, from a .ptd not "
                "given: pick it in the run's dialog (.ptd file)"
            )
        data = document.get(graph_id)
        if data is None:
            return NodeDataProviderResult(result=GraphNodeData(results={}))
        values = {node: result["value"] for node, result in data["results"].items()}
        keys = _our_keys(program).get(graph_id, {})
        placed = place_values(values, keys, graph)
        return NodeDataProviderResult(
            result=GraphNodeData(
                results={node: NodeDataResult(value=n) for node, n in sorted(placed.items())},
                gradient=[GradientItem(**item) for item in data["gradient"]],
            )
        )
