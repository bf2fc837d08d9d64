"""Small programs with dead constants, each buildable with and without them.

Every `Case.build(dead, config)` returns an `ExecutorchProgramManager` for the
same seeded model: with `dead=True` it carries dead constants, with `dead=False`
they are deleted at the source — in the model itself where that is possible,
otherwise by `delete_unused_placeholders`, which removes them from the graph just
before `to_executorch`, where they became dead.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import EdgeProgramManager, to_edge, to_edge_transform_and_lower
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.pass_base import ExportPass
from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

import emitter_filter
from tests.seed_model import SeedModel, quantized_seed_program

SEED = 0


def _seeded_randn(*shape: int) -> torch.Tensor:
    """Random data that does not disturb the global RNG, so dead and clean models agree."""
    generator = torch.Generator().manual_seed(1234)
    return torch.randn(*shape, generator=generator)


def delete_unused_placeholders(edge: EdgeProgramManager) -> None:
    """Deletes parameters, buffers and lifted constants that nothing in the graph uses.

    This is "deleting the dead constants at the source" for constants that only
    became dead inside the ExecuTorch flow. Modifies `edge` in place.
    """
    kinds = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)
    for method in edge.methods:
        ep: ExportedProgram = edge.exported_program(method)
        # Nodes a pass left without users go at to_executorch anyway; drop them first
        # so that the constants only they used count as unused.
        ep.graph_module.graph.eliminate_dead_code()
        mutated = set(ep.graph_signature.buffers_to_mutate.values())
        nodes = {n.name: n for n in ep.graph_module.graph.nodes if n.op == "placeholder"}
        signature = ep.graph_signature
        for spec in list(signature.input_specs):
            node = nodes[spec.arg.name]
            if spec.kind not in kinds or node.users or spec.target in mutated:
                continue
            signature.input_specs.remove(spec)
            ep.state_dict.pop(spec.target, None)
            ep.constants.pop(spec.target, None)
            ep.graph_module.graph.erase_node(node)
        ep.graph_module.recompile()


@dataclass(frozen=True)
class Case:
    """A named model flow. `runs` are the (method, inputs) calls to compare, in order."""

    name: str
    build_fn: Callable[[bool, object], object]
    runs: tuple[tuple[str, tuple], ...]
    #: False where ExecuTorch 1.5.1 itself already writes nothing dead.
    has_dead: bool = True

    def build(self, dead: bool, config=None):
        torch.manual_seed(SEED)
        return self.build_fn(dead, config or emitter_filter.ExecutorchBackendConfig())


# --- the seed repro (ExecuTorch #9659, `tests.seed_model`) ----------------------------


SEED_INPUTS = (torch.randn(1, 16, generator=torch.Generator().manual_seed(7)),)


@functools.cache
def _quantized_seed_once() -> ExportedProgram:
    return quantized_seed_program(SeedModel().eval(), SEED_INPUTS)


def _quantized_seed_program() -> ExportedProgram:
    """A copy of the seed's quantized program, quantized once per process (it takes
    seconds, and a case is built three times); lowering changes the program it is given.
    `Case.build` seeds torch before the first call, so every copy has the same weights."""
    return copy.deepcopy(_quantized_seed_once())


def _seed_transform_and_lower(dead, config):
    edge = to_edge_transform_and_lower(
        _quantized_seed_program(), partitioner=[XnnpackPartitioner()]
    )
    if not dead:
        delete_unused_placeholders(edge)
    return edge.to_executorch(config)


def _seed_to_backend(dead, config):
    edge = to_edge(_quantized_seed_program()).to_backend(XnnpackPartitioner())
    if not dead:
        delete_unused_placeholders(edge)
    return edge.to_executorch(config)


# --- an unused registered buffer ------------------------------------------------------


class UnusedBuffer(torch.nn.Module):
    def __init__(self, dead: bool) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(32, 32)
        self.register_buffer("offset", torch.ones(32))
        if dead:
            self.register_buffer("unused", _seeded_randn(64, 64))

    def forward(self, x):
        return self.linear(x) + self.offset


LINEAR_INPUTS = (torch.randn(4, 32, generator=torch.Generator().manual_seed(7)),)
# Twice, so that a program with state shows its second step too.
FORWARD_TWICE = (("forward", LINEAR_INPUTS), ("forward", LINEAR_INPUTS))


def _unused_buffer_portable(dead, config):
    return to_edge(torch.export.export(UnusedBuffer(dead), LINEAR_INPUTS)).to_executorch(config)


def _unused_buffer_xnnpack(dead, config):
    return to_edge_transform_and_lower(
        torch.export.export(UnusedBuffer(dead), LINEAR_INPUTS),
        partitioner=[XnnpackPartitioner()],
    ).to_executorch(config)


def _external_constants(dead, config):
    config.external_constants = True
    return to_edge(torch.export.export(UnusedBuffer(dead), LINEAR_INPUTS)).to_executorch(config)


# --- a parameter orphaned by a pass after to_edge -------------------------------------


class Gated(torch.nn.Module):
    def __init__(self, offset_like_gate: bool) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(32, 32)
        self.gate = torch.nn.Parameter(torch.randn(256, 256))
        # With the same bytes as `gate`, the emitter stores both once, in gate's slot,
        # which comes first. Once gate is dead, that slot must move to offset's place.
        offset = self.gate.detach().clone() if offset_like_gate else torch.ones(256, 256)
        self.register_buffer("offset", offset)

    def forward(self, x):
        return self.linear(x) * self.gate[0, :32] + self.offset[1, :32]


class DropGate(ExportPass):
    """Replaces `y * gate` with `y`, leaving the 256 KiB gate parameter unused."""

    def call_operator(self, op, args, kwargs, meta):
        if op == exir_ops.edge.aten.mul.Tensor:
            return args[0]
        return super().call_operator(op, args, kwargs, meta)


def _gated(offset_like_gate: bool):
    def build(dead, config):
        module = Gated(offset_like_gate)
        edge = to_edge(torch.export.export(module, LINEAR_INPUTS)).transform([DropGate()])
        if not dead:
            delete_unused_placeholders(edge)
        return edge.to_executorch(config)

    return build


# --- two methods sharing weights, plus a constant method ------------------------------


class Shared(torch.nn.Module):
    def __init__(self, dead: bool) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(32, 32)
        if dead:
            self.register_buffer("unused", _seeded_randn(1000))


class Forward(torch.nn.Module):
    def __init__(self, shared: Shared) -> None:
        super().__init__()
        self.shared = shared

    def forward(self, x):
        return self.shared.linear(x)


class Other(torch.nn.Module):
    def __init__(self, shared: Shared) -> None:
        super().__init__()
        self.shared = shared

    def forward(self, x):
        return self.shared.linear(x).relu() * 2


def _two_methods(dead, config):
    shared = Shared(dead)
    programs = {
        "forward": torch.export.export(Forward(shared), LINEAR_INPUTS),
        "other": torch.export.export(Other(shared), LINEAR_INPUTS),
    }
    constants = {"get_scale": _seeded_randn(8), "get_count": 3}
    return to_edge(programs, constant_methods=constants).to_executorch(config)


# --- torch.cond with constants in both branches ---------------------------------------


class Branchy(torch.nn.Module):
    def __init__(self, dead: bool) -> None:
        super().__init__()
        self.register_buffer("left", _seeded_randn(4, 32))
        self.register_buffer("right", -_seeded_randn(4, 32))
        if dead:
            self.register_buffer("unused", _seeded_randn(2048))

    def forward(self, pred, x):
        return torch.cond(pred, lambda x: x + self.left, lambda x: x * self.right, (x,))


COND_INPUTS = (torch.tensor(True), torch.randn(4, 32, generator=torch.Generator().manual_seed(7)))


def _cond(dead, config):
    return to_edge(torch.export.export(Branchy(dead), COND_INPUTS)).to_executorch(config)


# --- a buffer updated in place, with initial state in the mutable data -----------------


class Counter(torch.nn.Module):
    def __init__(self, dead: bool) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(32, 32)
        self.register_buffer("count", torch.arange(32, dtype=torch.float32))
        if dead:
            self.register_buffer("unused", _seeded_randn(1024))

    def forward(self, x):
        self.count.add_(1)
        return self.linear(x) + self.count


def _mutable_data(dead, config):
    config.passes = [InitializedMutableBufferPass(["count"])]
    return to_edge(torch.export.export(Counter(dead), LINEAR_INPUTS)).to_executorch(config)


CASES = [
    # The seed repro's float weights no longer reach the file in 1.5.1, in either flow.
    Case(
        "seed_transform_and_lower",
        _seed_transform_and_lower,
        (("forward", SEED_INPUTS),),
        has_dead=False,
    ),
    Case("seed_to_backend", _seed_to_backend, (("forward", SEED_INPUTS),), has_dead=False),
    Case("unused_buffer_portable", _unused_buffer_portable, FORWARD_TWICE),
    Case("unused_buffer_xnnpack", _unused_buffer_xnnpack, FORWARD_TWICE),
    Case("orphaned_by_transform", _gated(offset_like_gate=False), FORWARD_TWICE),
    Case("dead_constant_shares_bytes_with_live_one", _gated(offset_like_gate=True), FORWARD_TWICE),
    Case(
        "two_methods_and_constant_method",
        _two_methods,
        (
            ("forward", LINEAR_INPUTS),
            ("other", LINEAR_INPUTS),
            ("get_scale", ()),
            ("get_count", ()),
        ),
    ),
    Case(
        "cond_constants_in_both_branches",
        _cond,
        (("forward", COND_INPUTS), ("forward", (torch.tensor(False), COND_INPUTS[1]))),
    ),
    Case("mutable_data_and_dead_constant", _mutable_data, FORWARD_TWICE),
    Case("external_constants", _external_constants, FORWARD_TWICE),
]
