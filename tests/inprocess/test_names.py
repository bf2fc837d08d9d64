"""Each dropped entry is named after the model state it was built from, lazily."""

from __future__ import annotations

import copy
import logging

import pytest
import torch
from executorch.exir import ExecutorchBackendConfig as UpstreamConfig, to_edge
from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

import emitter_filter
from emitter_filter.errors import InvariantError
from emitter_filter.inprocess.prune_emitted import prune_emitter_output
from emitter_filter.program import state_names
from emitter_filter.program.names import ConstantName
from emitter_filter.program.object_models import EXIR_SCHEMA
from emitter_filter.program.plan_indices import tensor_data_ref
from emitter_filter.program.state_names import PlaceholderNames
from tests.builders import CASES, LINEAR_INPUTS, DropGate

PRUNE = emitter_filter.ExecutorchBackendConfig


def _case(name: str):
    return next(c for c in CASES if c.name == name)


class LiftedConstant(torch.nn.Module):
    """`table` is a plain tensor attribute: export lifts it as a constant; DropGate orphans it."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(32, 32)
        self.table = torch.arange(32, dtype=torch.float32) / 7

    def forward(self, x):
        return self.linear(x) * self.table


class Twins(torch.nn.Module):
    """Two unused buffers with the same bytes: the emitter stores them once."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(32, 32)
        self.register_buffer("first", torch.full((64,), 3.0))
        self.register_buffer("second", torch.full((64,), 3.0))

    def forward(self, x):
        return self.linear(x)


def _lifted_constant(config):
    exported = torch.export.export(LiftedConstant(), LINEAR_INPUTS)
    return to_edge(exported).transform([DropGate()]).to_executorch(config)


def _twins(config):
    return to_edge(torch.export.export(Twins(), LINEAR_INPUTS)).to_executorch(config)


def _builder_case(name):
    return lambda config: _case(name).build(dead=True, config=config)


NAMED = {
    "parameter_orphaned_by_a_pass": (
        _builder_case("orphaned_by_transform"),
        [[("gate", "parameter", "forward")]],
    ),
    "unused_buffer": (_builder_case("unused_buffer_portable"), [[("unused", "buffer", "forward")]]),
    "lifted_constant": (_lifted_constant, [[("table", "constant", "forward")]]),
    "two_fqns_share_one_entry": (
        _twins,
        [[("first", "buffer", "forward"), ("second", "buffer", "forward")]],
    ),
    "multi_method_program": (
        _builder_case("two_methods_and_constant_method"),
        [[("shared.unused", "buffer", "forward")]],
    ),
    "external_constant": (_builder_case("external_constants"), [[("unused", "buffer", "forward")]]),
}


@pytest.mark.parametrize("build, expected", NAMED.values(), ids=NAMED.keys())
def test_each_dropped_entry_is_named_after_its_state(build, expected):
    report = emitter_filter.report(build(PRUNE(prune_constants=True)))
    assert [[(n.name, n.kind, n.plan) for n in d.names] for d in report.dropped] == expected
    for entry in report.dropped:
        assert entry.label() == " = ".join(name for name, _, _ in expected[0])


def test_two_fqns_sharing_an_entry_drop_one_entry_and_two_values():
    report = emitter_filter.report(_twins(PRUNE(prune_constants=True)))
    assert len(report.dropped) == 1 and report.dropped_values == 2
    assert report.dropped[0].nbytes == 64 * 4


def test_the_summary_names_the_dropped_entries_and_marks_those_read_by_name():
    summary = emitter_filter.report(
        _builder_case("external_constants")(PRUNE(prune_constants=True))
    ).summary()
    assert summary.endswith("; dropped: unused (buffer, 16,384 B, was readable by name)")
    summary = emitter_filter.report(_twins(PRUNE(prune_constants=True))).summary()
    assert summary.endswith("; dropped: first = second (buffer, 256 B)")


def test_the_info_line_names_the_dropped_entries(caplog):
    with caplog.at_level(logging.INFO, logger="emitter_filter"):
        _builder_case("unused_buffer_portable")(PRUNE(prune_constants=True))
    [line] = [r.getMessage() for r in caplog.records if r.name.startswith("emitter_filter")]
    assert line.endswith("; dropped: unused (buffer, 16,384 B)")


def test_names_are_found_when_the_report_is_read_not_in_the_prune(monkeypatch, caplog):
    import emitter_filter.inprocess.prune_emitted

    calls = []
    original = state_names.name_entries

    def counting(*args):
        calls.append(args)
        return original(*args)

    monkeypatch.setattr(emitter_filter.inprocess.prune_emitted, "name_entries", counting)
    with caplog.at_level(logging.WARNING, logger="emitter_filter"):
        manager = _builder_case("unused_buffer_portable")(PRUNE(prune_constants=True))
    assert calls == []
    report = emitter_filter.report(manager)
    assert report.dropped[0].names[0].name == "unused"
    assert report.dropped is report.dropped and len(calls) == 1


def test_serialized_without_its_methods_the_report_keeps_the_programs_own_names():
    manager = _builder_case("external_constants")(UpstreamConfig())
    emitter_output = copy.deepcopy(manager._emitter_output)
    report = prune_emitter_output(emitter_output)
    assert [(n.name, n.kind) for d in report.dropped for n in d.names] == [("unused", None)]


def _counter_program():
    """The Counter model's emitted program, its mutable buffer `count` with initial state."""
    case = _case("mutable_data_and_dead_constant")
    manager = case.build(dead=True, config=UpstreamConfig())
    return manager, copy.deepcopy(manager._emitter_output)


def test_a_mutable_buffers_initial_state_is_named_as_one():
    manager, emitter_output = _counter_program()
    plan = emitter_output.program.execution_plan[0]
    [count] = [
        i
        for i, v in enumerate(plan.values)
        if hasattr(v.val, "data_buffer_idx")
        and tensor_data_ref(EXIR_SCHEMA, v.val) is not None
        and tensor_data_ref(EXIR_SCHEMA, v.val).space.value == "mutable"
    ]
    # Make nothing read `count` (its instructions read value 0 instead): its initial
    # state is then dead, as after a pass that removed every use of the buffer.
    for chain in plan.chains:
        for instruction in chain.instructions:
            args = instruction.instr_args
            if hasattr(args, "args"):
                args.args = [0 if a == count else a for a in args.args]
    report = prune_emitter_output(
        emitter_output, names=PlaceholderNames(manager._execution_programs)
    )
    mutable = [d for d in report.dropped if d.space == "mutable"]
    assert [(n.name, n.kind) for d in mutable for n in d.names] == [("count", "mutable_buffer")]


def test_a_value_that_does_not_match_its_placeholder_is_an_invariant_error():
    manager = _builder_case("unused_buffer_portable")(UpstreamConfig())
    names = PlaceholderNames(manager._execution_programs)
    values = manager.executorch_program.execution_plan[0].values
    named = {
        i: names.name_value("forward", i, v.val.sizes)
        for i, v in enumerate(values)
        if hasattr(v.val, "sizes")
    }
    [index] = [i for i, name in named.items() if name and name.name == "unused"]
    assert named[index] == ConstantName("unused", "buffer", "forward")
    with pytest.raises(InvariantError, match="values no longer follow placeholders"):
        names.name_value("forward", index, [1, 2, 3])


def test_a_mutable_buffer_with_initial_state_in_a_live_program_is_never_dropped():
    config = PRUNE(prune_constants=True, passes=[InitializedMutableBufferPass(["count"])])
    report = emitter_filter.report(
        _case("mutable_data_and_dead_constant").build(dead=True, config=config)
    )
    assert [d.space for d in report.dropped] == ["constant"]
    assert report.bytes_after["mutable"] == report.bytes_before["mutable"] > 0


def test_the_report_does_not_keep_the_manager_or_its_programs_alive():
    import gc
    import weakref

    from emitter_filter.inprocess import reports

    manager = _builder_case("unused_buffer_portable")(PRUNE(prune_constants=True))
    assert emitter_filter.report(manager).dropped[0].names
    emitter_output, program = (
        weakref.ref(manager._emitter_output),
        weakref.ref(manager.exported_program()),
    )
    key = id(manager._emitter_output)
    del manager
    gc.collect()
    assert emitter_output() is None and program() is None
    assert key not in reports._reports
