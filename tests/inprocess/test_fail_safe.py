"""A program the filter cannot prove safe to prune is written as ExecuTorch writes it."""

from __future__ import annotations

import logging
import re

import pytest
import torch
from executorch.exir import ExecutorchBackendConfig as UpstreamConfig, to_edge
from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass
from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer

import emitter_filter
from emitter_filter.environment import ENV_STRICT
from emitter_filter.errors import ProgramFormatError

REASON = "plan 'step' value 0: data_buffer_idx 1 >= len(mutable data) 0"
INPUTS = (torch.ones(4),)


class State(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.arange(4, dtype=torch.float32))


class Read(torch.nn.Module):
    def __init__(self, shared: State) -> None:
        super().__init__()
        self.shared = shared

    def forward(self, x):
        return x + self.shared.state


class Step(torch.nn.Module):
    def __init__(self, shared: State) -> None:
        super().__init__()
        self.shared = shared

    def forward(self, x):
        self.shared.state.add_(x)
        return self.shared.state * 1


def _build(config):
    """`read` (emitted first) only reads `state`; `step` mutates it.

    With names and initial state, the emitter's constant cache hands `step`'s
    mutable `state` the constant index `read` got (an upstream quirk): an index
    into mutable data that does not exist.
    """
    config.emit_mutable_buffer_names = True
    config.passes = [InitializedMutableBufferPass(["state"])]
    shared = State()
    programs = {
        "read": torch.export.export(Read(shared), INPUTS),
        "step": torch.export.export(Step(shared), INPUTS),
    }
    return to_edge(programs).to_executorch(config)


@pytest.fixture(scope="module")
def plain():
    return _build(UpstreamConfig()).buffer


def test_an_unprovable_program_is_written_unpruned_with_one_warning(plain, caplog):
    with caplog.at_level(logging.INFO, logger="emitter_filter"):
        manager = _build(emitter_filter.ExecutorchBackendConfig(prune_constants=True))
    assert manager.buffer == plain
    ours = [r for r in caplog.records if r.name.startswith("emitter_filter")]
    assert [r.levelno for r in ours] == [logging.WARNING]
    assert REASON in ours[0].getMessage()
    assert "written as ExecuTorch writes it" in ours[0].getMessage()


def test_the_report_says_the_prune_was_skipped_and_why():
    report = emitter_filter.report(
        _build(emitter_filter.ExecutorchBackendConfig(prune_constants=True))
    )
    assert report.skipped == REASON
    assert report.summary() == f"skipped, written unpruned: {REASON}"
    assert report.dropped == () and report.bytes_before == report.bytes_after


def test_the_method_executorch_can_run_still_runs(plain):
    manager = _build(emitter_filter.ExecutorchBackendConfig(prune_constants=True))
    buffer = manager.buffer
    module = _load_for_executorch_from_buffer(buffer)
    [out] = module.run_method("read", INPUTS)
    assert torch.equal(out, INPUTS[0] + torch.arange(4, dtype=torch.float32))


def test_strict_mode_raises_instead(monkeypatch):
    config = emitter_filter.ExecutorchBackendConfig(prune_constants=True, prune_strict=True)
    with pytest.raises(ProgramFormatError, match=re.escape(REASON)):
        _build(config)
    monkeypatch.setenv(ENV_STRICT, "1")
    with pytest.raises(ProgramFormatError, match="data_buffer_idx 1"):
        with emitter_filter.pruning():
            _build(UpstreamConfig())


def test_strict_environment_value_must_be_a_flag(monkeypatch):
    monkeypatch.setenv(ENV_STRICT, "perhaps")
    with pytest.raises(ValueError, match="EMITTER_FILTER_STRICT='perhaps'"):
        _build(emitter_filter.ExecutorchBackendConfig(prune_constants=True))


def test_a_named_data_inconsistency_also_leaves_the_program_as_executorch_writes_it(
    monkeypatch, caplog
):
    import emitter_filter.inprocess.named_data
    from tests.builders import CASES

    case = next(c for c in CASES if c.name == "unused_buffer_xnnpack")
    plain = case.build(dead=True, config=UpstreamConfig()).buffer

    def unreadable(program, named_data, blobs=None):
        raise ProgramFormatError("plan 'forward' delegate 0: XNNPACK blob: bad header")

    monkeypatch.setattr(emitter_filter.inprocess.named_data, "find_named_data_use", unreadable)
    with caplog.at_level(logging.WARNING, logger="emitter_filter"):
        manager = case.build(
            dead=True, config=emitter_filter.ExecutorchBackendConfig(prune_constants=True)
        )
    assert manager.buffer == plain
    assert emitter_filter.report(manager).skipped.endswith("XNNPACK blob: bad header")
    assert len([r for r in caplog.records if r.name.startswith("emitter_filter")]) == 1


# --- the same fail-safe in every mode ------------------------------------------------------

MODES = {
    "prune": ({"prune_constants": True}, "not pruning this program"),
    "dedupe": ({"dedupe_constants": True}, "not deduplicating this program"),
    "both": (
        {"prune_constants": True, "dedupe_constants": True},
        "not pruning nor deduplicating this program",
    ),
}


@pytest.mark.parametrize("fields, warning", MODES.values(), ids=MODES.keys())
def test_every_mode_writes_the_program_as_executorch_does_with_one_warning_naming_it(
    plain, caplog, fields, warning
):
    with caplog.at_level(logging.INFO, logger="emitter_filter"):
        manager = _build(emitter_filter.ExecutorchBackendConfig(**fields))
    assert manager.buffer == plain
    ours = [r for r in caplog.records if r.name.startswith("emitter_filter")]
    assert [r.levelno for r in ours] == [logging.WARNING]
    message = ours[0].getMessage()
    assert f"{warning}, written as ExecuTorch writes it: " in message and REASON in message
    report = emitter_filter.report(manager)
    assert report.dedupe is None
    assert (report.dedupe_skipped is not None) == fields.get("dedupe_constants", False)


@pytest.mark.parametrize("fields", [f for f, _ in MODES.values()], ids=MODES.keys())
def test_strict_mode_raises_in_every_mode(fields):
    config = emitter_filter.ExecutorchBackendConfig(**fields, prune_strict=True)
    with pytest.raises(ProgramFormatError, match=re.escape(REASON)):
        _build(config)


def test_deduplicating_a_whole_process_is_fail_safe_too(plain, caplog):
    from emitter_filter.inprocess import hook

    hook.enable_dedupe()
    try:
        with caplog.at_level(logging.WARNING, logger="emitter_filter"):
            manager = _build(UpstreamConfig())
    finally:
        hook.disable_dedupe()
    assert manager.buffer == plain
    assert len([r for r in caplog.records if r.name.startswith("emitter_filter")]) == 1
    assert emitter_filter.report(manager).summary() == (
        f"skipped, written undeduplicated: <bytes>: {REASON}"
    )


def test_a_dedupe_that_fails_after_a_prune_writes_the_pruned_program(monkeypatch, caplog):
    import emitter_filter.ondisk.dedupe
    from tests.builders import CASES

    case = next(c for c in CASES if c.name == "unused_buffer_xnnpack")
    pruned = case.build(
        dead=True, config=emitter_filter.ExecutorchBackendConfig(prune_constants=True)
    ).buffer

    def unreadable(*args, **kwargs):
        raise ProgramFormatError("<bytes>: segment offsets fit no segment alignment")

    # The hook deduplicates the serializer's pieces (`dedupe_pieces`), else the joined bytes.
    monkeypatch.setattr(emitter_filter.ondisk.dedupe, "dedupe_pte", unreadable)
    monkeypatch.setattr(emitter_filter.ondisk.dedupe, "dedupe_pieces", unreadable)
    with caplog.at_level(logging.WARNING, logger="emitter_filter"):
        manager = case.build(
            dead=True,
            config=emitter_filter.ExecutorchBackendConfig(
                prune_constants=True, dedupe_constants=True
            ),
        )
    assert manager.buffer == pruned
    [warning] = [r.getMessage() for r in caplog.records if r.name.startswith("emitter_filter")]
    assert "not deduplicating this program, written pruned only: " in warning
    report = emitter_filter.report(manager)
    assert report.dropped and report.skipped is None
    assert report.summary().endswith(
        "; deduplication skipped: <bytes>: segment offsets fit no segment alignment"
    )
