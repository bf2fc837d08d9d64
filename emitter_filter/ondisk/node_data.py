"""`explain --node-data`: the bytes each call reads, as Model Explorer node data.

Google's Model Explorer (`ai-edge-model-explorer`) paints "node data" onto a graph: a
JSON object of graph id to `{"results": {node id: {"value": N}}, "gradient": [...]}`
(`model_explorer.node_data_builder.ModelNodeData.to_json_string`). The ids here are the
ones Arm's `pte-adapter-model-explorer` (0.2.0) gives a `.pte`'s graphs: a graph per
execution plan, named as the plan (`ExecutionPlan_<i>` for one with no name); a node per
kernel or delegate call, `{graph}_{chain}_{instruction}`; `GraphInputs` and
`GraphOutputs`.

A node's value is the bytes of the constants, mutable buffers and named data its call
reads (`explain`'s parts and readers): a tensor read by several calls counts at each, and a
delegate's named data at each call of that delegate. A plan output counts at
`GraphOutputs`. Dead bytes have no reader: they are put on the first graph's `GraphInputs`.
The adapter also draws each call of an XNNPACK delegate as a graph of XNNPACK's own nodes,
`{file name}::{call's node id}`, a node per `XNNGraph.xnodes[i]` with id `i`: there each
node's value is the named data its inputs hold (a fully connected layer's filter and bias),
so the bytes on the delegate's call are split among its nodes. Written with `json`; Model
Explorer is never imported.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence

from emitter_filter.delegates import xnnpack_node_keys
from emitter_filter.errors import ProgramFormatError, PteFormatError
from emitter_filter.ondisk.explain import Explanation, Part, explain_pte
from emitter_filter.ondisk.read.byte_source import open_sources
from emitter_filter.ondisk.read.read_pte import read_pte_program
from emitter_filter.ondisk.read.readers import Reader, plan_calls, xnnpack_graphs
from emitter_filter.ondisk.read.state_file import state_file
from emitter_filter.program.generated_fields import table_text

__all__ = [
    "NODE_VALUES",
    "INPUTS_NODE",
    "OUTPUTS_NODE",
    "graph_ids",
    "node_data",
    "node_data_file",
]

#: What `--value` sums per node: every byte read, the dead ones, the duplicated ones.
NODE_VALUES = ("bytes", "dead", "duplicated")
#: The adapter's ids of a graph's inputs and outputs nodes.
INPUTS_NODE, OUTPUTS_NODE = "GraphInputs", "GraphOutputs"
# Model Explorer's colour scale, from few bytes (light) to the most (dark red).
_GRADIENT = ({"stop": 0, "bgColor": "#fff5f0"}, {"stop": 1, "bgColor": "#cb181d"})
# Parts of the file's structure: bytes no call reads, and that no prune frees.
_STRUCTURE = frozenset(
    {
        "header",
        "program",
        "values",
        "instructions",
        "operators",
        "padding",
        "ptd_header",
        "segments",
    }
)


def graph_ids(program) -> list[str]:
    """The adapter's id of each plan's graph."""
    return [
        table_text(plan.name) or f"ExecutionPlan_{number}"
        for number, plan in enumerate(program.executionPlan or ())
    ]


def _call_nodes(program) -> dict[tuple[str, str], list[str]]:
    """(plan name, op) to the node ids of its calls, in the order `Reader.ordinal` counts."""
    nodes: dict[tuple[str, str], list[str]] = {}
    for plan, graph in zip(program.executionPlan or (), graph_ids(program), strict=True):
        plan_name = table_text(plan.name) or ""
        for call in plan_calls(plan):
            nodes.setdefault((plan_name, call.op), []).append(
                f"{graph}_{call.chain}_{call.instruction}"
            )
    return nodes


def _counted(part: Part, value: str) -> bool:
    if not part.nbytes or part.storage in _STRUCTURE:
        return False
    if value == "bytes":
        return True
    return part.status == value


def _reader_nodes(reader: Reader, calls) -> list[str]:
    """The nodes of the calls `reader` is: one for a tensor argument, every call of the
    delegate for named data, `GraphOutputs` for a plan output."""
    if reader.op == "output":
        return [OUTPUTS_NODE]
    found = calls.get((reader.plan, reader.op.removesuffix(" (opaque)")), [])
    return found if reader.arg < 0 else found[reader.ordinal : reader.ordinal + 1]


def _xnnpack_node_values(
    explanation: Explanation,
    program,
    value: str,
    xnnpack_nodes: Mapping[tuple[str, int], Sequence[Sequence[str]]],
) -> dict[str, dict[str, int]]:
    """The adapter's graph of each XNNPACK call (`{file}::{call's node id}`) and its nodes'
    values: the counted parts each node's named-data keys read, each part once a node."""
    by_key: dict[str, list[Part]] = {}
    for part in explanation.parts:
        if _counted(part, value):
            for key in dict.fromkeys(r.key for r in part.readers if r.key is not None):
                by_key.setdefault(key, []).append(part)
    name = os.path.basename(explanation.path)
    results: dict[str, dict[str, int]] = {}
    for plan, graph in zip(program.executionPlan or (), graph_ids(program), strict=True):
        plan_name = table_text(plan.name) or ""
        for call in plan_calls(plan):
            nodes = None if call.delegate is None else xnnpack_nodes.get((plan_name, call.delegate))
            if nodes is None:  # a kernel call, or a delegate of another backend
                continue
            values = {}
            for index, keys in enumerate(nodes):
                parts = {id(p): p for key in keys for p in by_key.get(key, ())}
                if parts:
                    values[str(index)] = sum(p.nbytes for p in parts.values())
            results[f"{name}::{graph}_{call.chain}_{call.instruction}"] = values
    return results


def node_data(
    explanation: Explanation,
    program,
    value: str = "bytes",
    xnnpack_nodes: Mapping[tuple[str, int], Sequence[Sequence[str]]] | None = None,
) -> dict:
    """The node data of `explanation` (of `program`), each node valued by `value`.

    Args:
        xnnpack_nodes: For each XNNPACK delegate, by (plan name, index in its
            `delegates`), the named-data keys each of its nodes reads
            (`delegates.xnnpack_node_keys`); its calls' graphs get values from them.

    Raises:
        ValueError: `value` is not one of `NODE_VALUES`.
    """
    if value not in NODE_VALUES:
        raise ValueError(f"unknown value {value!r}; expected one of {', '.join(NODE_VALUES)}")
    calls = _call_nodes(program)
    graphs = graph_ids(program)
    graph_of = {
        table_text(plan.name) or "": graph
        for plan, graph in zip(program.executionPlan or (), graphs, strict=True)
    }
    results: dict[str, dict[str, int]] = {graph: {} for graph in graphs}
    for part in explanation.parts:
        if not _counted(part, value):
            continue
        places = {
            (graph_of[r.plan], node)
            for r in part.readers
            if r.plan in graph_of
            for node in _reader_nodes(r, calls)
        }
        if not places and graphs:
            places = {(graphs[0], INPUTS_NODE)}  # dead: read by nothing
        for graph, node in places:
            results[graph][node] = results[graph].get(node, 0) + part.nbytes
    results.update(_xnnpack_node_values(explanation, program, value, xnnpack_nodes or {}))
    name = os.path.basename(explanation.path)
    return {
        graph: {
            "name": f"{value} ({name})",
            "results": {node: {"value": values[node]} for node in sorted(values)},
            "gradient": [dict(item) for item in _GRADIENT],
        }
        for graph, values in results.items()
        if values
    }


def node_data_file(
    path: str | os.PathLike,
    ptd_paths: Sequence[str | os.PathLike] = (),
    value: str = "bytes",
    names=None,
) -> dict:
    """Reads a `.pte` (and its `.ptd` files) and gives its node data (`node_data`); `names`
    as `explain_file` takes them."""
    if value not in NODE_VALUES:
        raise ValueError(f"unknown value {value!r}; expected one of {', '.join(NODE_VALUES)}")
    read = read_pte_program(path, ptd_paths)
    with contextlib.ExitStack() as stack:
        sources = open_sources(stack, (os.fspath(path), *(os.fspath(p) for p in ptd_paths)))
        explanation = explain_pte(
            read.pte, read.program, read.program_data, sources, state_file(names)
        )
        xnnpack_nodes = {}
        for blob, graph in xnnpack_graphs(
            read.pte, read.program, read.program_data, sources[read.pte.path]
        ):
            try:
                keys = xnnpack_node_keys(graph)
            except ProgramFormatError as error:
                raise PteFormatError(
                    read.pte.path, f"XNNPACK blob: {error}", blob.offset
                ) from error
            xnnpack_nodes.update({(user.plan, user.index): keys for user in blob.users})
    return node_data(explanation, read.program, value, xnnpack_nodes)
