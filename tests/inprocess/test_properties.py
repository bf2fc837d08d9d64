"""Properties of the in-memory prune over random emitted programs.

Two generators:
- `emitted_programs` writes `exir.schema` programs directly: thousands of shapes of
  value tables, lists, instructions, shared and duplicated constants, in seconds;
- `random_models` builds real torch models with live and dead constants, exports them
  with ExecuTorch (some through XNNPACK), and runs both programs in the portable runtime.

The default profile is derandomised: 100 synthetic programs and 8 real models, each model an
export and two runtime loads (about 0.9 s of CPU each); `-m slow` adds 100 other real models
(`.ci/run` runs it), HYPOTHESIS_PROFILE=long runs 2000 and 1000.
"""

from __future__ import annotations

import copy
import os

import pytest
import torch
from executorch.exir import to_edge, to_edge_transform_and_lower
from executorch.exir._serialize._serialize import serialize_for_executorch
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.emit import EmitterOutput
from executorch.exir.pass_base import ExportPass
from executorch.exir.scalar_type import ScalarType
from executorch.exir.schema import (
    Buffer,
    Chain,
    ContainerMetadata,
    EValue,
    ExecutionPlan,
    Instruction,
    Int,
    IntList,
    KernelCall,
    OptionalTensorList,
    Program,
    SubsegmentOffsets,
    Tensor,
    TensorList,
    TensorShapeDynamism,
)
from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer
from hypothesis import HealthCheck, given, settings, strategies as st

import emitter_filter
from emitter_filter.inprocess.prune_emitted import collect_plan_refs, prune_emitter_output
from emitter_filter.program.reachability import find_live

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=100,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    "long",
    deadline=None,
    max_examples=2000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.load_profile(PROFILE)
# Each real model costs an export and two runtime loads (0.9 s of CPU here): 25 of them were
# 21 s of the default run's CPU. The depth is in the slow variant, which `.ci/run` runs.
MODEL_EXAMPLES = {"ci": 8, "long": 1000}[PROFILE]
DEEP_MODEL_EXAMPLES = {"ci": 100, "long": 1000}[PROFILE]


# --- synthetic emitted programs --------------------------------------------------------


def _tensor(data_buffer_idx: int) -> EValue:
    return EValue(
        Tensor(
            scalar_type=ScalarType.FLOAT,
            storage_offset=0,
            sizes=[1],
            dim_order=[0],
            requires_grad=False,
            layout=0,
            data_buffer_idx=data_buffer_idx,
            allocation_info=None,
            shape_dynamism=TensorShapeDynamism.STATIC,
        )
    )


@st.composite
def _plan(draw, name: str, num_buffers: int) -> ExecutionPlan:
    values: list[EValue] = []
    for index in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["tensor", "int", "list"] if index else ["tensor"]))
        if kind == "tensor":
            values.append(_tensor(draw(st.integers(0, num_buffers - 1))))
        elif kind == "int":
            values.append(EValue(Int(draw(st.integers(-3, 3)))))
        else:
            items = draw(st.lists(st.integers(0, index - 1), max_size=4))
            list_type = draw(st.sampled_from([IntList, TensorList, OptionalTensorList]))
            if list_type is OptionalTensorList:
                items = [draw(st.sampled_from([i, -1])) for i in items]
            values.append(EValue(list_type(items)))
    indices = st.integers(0, len(values) - 1)
    instructions = [
        Instruction(KernelCall(op_index=0, args=draw(st.lists(indices, max_size=4))))
        for _ in range(draw(st.integers(0, 4)))
    ]
    return ExecutionPlan(
        name=name,
        container_meta_type=ContainerMetadata("", ""),
        values=values,
        inputs=draw(st.lists(indices, max_size=2)),
        outputs=draw(st.lists(indices, max_size=2)),
        chains=[Chain(inputs=[], outputs=[], instructions=instructions, stacktrace=None)],
        operators=[],
        delegates=[],
        non_const_buffer_sizes=[0],
    )


@st.composite
def emitted_programs(draw) -> EmitterOutput:
    # Few distinct payloads, so that duplicated bytes are common.
    payloads = st.sampled_from([b"a" * 4, b"b" * 8, b"c" * 12, b""])
    buffers = [Buffer(b"")] + [Buffer(draw(payloads)) for _ in range(draw(st.integers(0, 6)))]
    plans = [draw(_plan(f"m{i}", len(buffers))) for i in range(draw(st.integers(1, 3)))]
    program = Program(
        version=0,
        execution_plan=plans,
        constant_buffer=buffers,
        backend_delegate_data=[],
        segments=[],
        constant_segment=SubsegmentOffsets(0, []),
    )
    return EmitterOutput(
        program=program,
        debug_handle_map={},
        method_to_delegate_debug_id_map={},
        instruction_id_to_num_outs_map={},
        mutable_data=None,
        external_constant_buffer=[],
        external_constant_map=None,
    )


def _used_indices(plan: ExecutionPlan):
    yield from plan.inputs
    yield from plan.outputs
    for chain in plan.chains:
        for instruction in chain.instructions:
            yield from instruction.instr_args.args


@given(emitted_programs())
def test_pruning_keeps_every_used_value_with_its_bytes(emitter_output):
    before = copy.deepcopy(emitter_output)
    original_buffers = list(emitter_output.program.constant_buffer)
    prune_report = prune_emitter_output(emitter_output)
    for old, new in zip(
        before.program.execution_plan, emitter_output.program.execution_plan, strict=True
    ):
        # Every index still resolves; list items still come before their lists.
        for index in _used_indices(new):
            assert 0 <= index < len(new.values)
        for position, evalue in enumerate(new.values):
            if isinstance(evalue.val, (IntList, TensorList, OptionalTensorList)):
                assert all(-1 <= item < position for item in evalue.val.items)
        # What an instruction or plan used is the same value with the same bytes.
        for old_index, new_index in zip(_used_indices(old), _used_indices(new), strict=True):
            old_val, new_val = old.values[old_index].val, new.values[new_index].val
            assert type(old_val) is type(new_val)
            if isinstance(old_val, Tensor):
                assert (
                    before.program.constant_buffer[old_val.data_buffer_idx].storage
                    == emitter_output.program.constant_buffer[new_val.data_buffer_idx].storage
                )
        assert len(new.values) <= len(old.values)
    kept = emitter_output.program.constant_buffer
    assert kept[0].storage == b""
    # Kept entries are the original objects, in no new copies.
    assert all(any(b is k for b in original_buffers) for k in kept)
    assert prune_report.dropped_bytes == sum(d.nbytes for d in prune_report.dropped)


@given(emitted_programs())
def test_pruning_twice_changes_nothing_and_nothing_dead_remains(emitter_output):
    prune_emitter_output(emitter_output)
    once = copy.deepcopy(emitter_output)
    again = prune_emitter_output(emitter_output)
    assert not again.dropped and again.dropped_values == 0
    assert emitter_output == once
    plans = [collect_plan_refs(plan) for plan in emitter_output.program.execution_plan]
    liveness = find_live(plans)
    assert all(
        len(live) == p.num_values for p, live in zip(plans, liveness.live_values, strict=True)
    )


# --- random real models, run in ExecuTorch's runtime ---------------------------------------

SHAPE = (4, 8)
OPS = ["add", "mul", "cat", "stack", "index", "inplace"]


class RandomModel(torch.nn.Module):
    """Applies `ops` to the input, each with one of the live constants; `dead` are never read.

    It ends dividing by `gate`, a parameter that `DropDivision` can orphan after `to_edge`.
    """

    def __init__(self, ops, live_pick, payloads, dead_payloads, cond: bool) -> None:
        super().__init__()
        self.ops = ops
        self.live_pick = live_pick
        for i, payload in enumerate(payloads):
            self.register_buffer(f"c{i}", payload.clone())
        for i, payload in enumerate(dead_payloads):
            self.register_buffer(f"dead{i}", payload.clone())
        self.register_buffer("state", torch.zeros(SHAPE))
        self.register_buffer("rows", torch.tensor([3, 0, 2, 1]))
        self.gate = torch.nn.Parameter(payloads[0].abs() + 1)
        self.cond = cond

    def forward(self, x):
        h = x
        for op, pick in zip(self.ops, self.live_pick, strict=True):
            c = getattr(self, f"c{pick}")
            if op == "add":
                h = h + c
            elif op == "mul":
                h = h * c
            elif op == "cat":
                h = torch.cat([h, c], dim=1)[:, : SHAPE[1]]
            elif op == "stack":
                h = torch.stack([h, c]).sum(0)
            elif op == "index":
                h = h + c[self.rows]
            else:
                self.state.add_(c)
                h = h + self.state
        if self.cond:
            c0 = self.c0
            h = torch.cond(h.sum() > 0, lambda h: h + c0, lambda h: h - c0, (h,))
        return h / self.gate


class DropDivision(ExportPass):
    """Replaces `h / gate` with `h`, orphaning the gate parameter after `to_edge`."""

    def call_operator(self, op, args, kwargs, meta):
        if op == exir_ops.edge.aten.div.Tensor:
            return args[0]
        return super().call_operator(op, args, kwargs, meta)


@st.composite
def random_models(draw):
    num_payloads = draw(st.integers(1, 3))
    pool = [torch.randn(SHAPE, generator=torch.Generator().manual_seed(s)) for s in range(4)]
    # Drawing payloads from a small pool duplicates bytes between constants, dead and live.
    payloads = [pool[draw(st.integers(0, 3))] for _ in range(num_payloads)]
    dead = [pool[draw(st.integers(0, 3))] for _ in range(draw(st.integers(1, 3)))]
    ops = draw(st.lists(st.sampled_from(OPS), min_size=1, max_size=5))
    picks = [draw(st.integers(0, num_payloads - 1)) for _ in ops]
    cond = draw(st.booleans())
    xnnpack = not cond and draw(st.booleans())  # cond with XNNPACK: see pitfalls note
    orphan_gate = not xnnpack and draw(st.booleans())
    return RandomModel(ops, picks, payloads, dead, cond), xnnpack, orphan_gate


def _export(model, xnnpack: bool, orphan_gate: bool):
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    inputs = (torch.randn(SHAPE, generator=torch.Generator().manual_seed(99)),)
    exported = torch.export.export(model, inputs)
    if xnnpack:
        edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
    else:
        edge = to_edge(exported)
    if orphan_gate:
        edge = edge.transform([DropDivision()])
    return edge, inputs


def _outputs(pte: bytes, inputs, steps: int = 2):
    module = _load_for_executorch_from_buffer(pte)
    return [module.forward(inputs) for _ in range(steps)]


def _check_random_model(model_and_flow) -> None:
    model, xnnpack, orphan_gate = model_and_flow
    edge, inputs = _export(model, xnnpack, orphan_gate)
    manager = edge.to_executorch()
    emitter_output = manager._emitter_output
    pruned_output = copy.deepcopy(emitter_output)
    prune_report = prune_emitter_output(pruned_output)
    assert prune_report.dropped_values > 0, "every random model has a dead buffer"
    config = emitter_filter.ExecutorchBackendConfig()
    pruned, _ = serialize_for_executorch(pruned_output, config, manager._data_serializer, None)
    for want, got in zip(
        _outputs(manager.buffer, inputs), _outputs(bytes(pruned), inputs), strict=True
    ):
        assert all(torch.equal(w, g) for w, g in zip(want, got, strict=True))
    again = prune_emitter_output(pruned_output)
    assert not again.dropped and again.dropped_values == 0


@settings(max_examples=MODEL_EXAMPLES)
@given(random_models())
def test_random_models_compute_the_same_after_pruning(model_and_flow):
    _check_random_model(model_and_flow)


@pytest.mark.slow
@settings(max_examples=DEEP_MODEL_EXAMPLES)
@given(random_models())
def test_random_models_compute_the_same_after_pruning_at_depth(model_and_flow):
    """The same check on other derandomised models (another test, another seed)."""
    _check_random_model(model_and_flow)
