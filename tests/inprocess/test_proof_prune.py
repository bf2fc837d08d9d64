"""The hook proves its prune on the emitter's objects (`prune_proof`): a remap broken on
purpose is caught without a runtime, undone, and the program written as ExecuTorch writes
it, under the fail-safe (strict mode raises)."""

from __future__ import annotations

import dataclasses
import logging

import pytest

import emitter_filter
from emitter_filter.errors import InvalidOutputError
from emitter_filter.inprocess import named_data, prune_emitted
from emitter_filter.program import plan_indices
from tests.builders import CASES

CASES_BY_NAME = {case.name: case for case in CASES}
PORTABLE = CASES_BY_NAME["unused_buffer_portable"]


def _config(**fields):
    return emitter_filter.ExecutorchBackendConfig(prune_constants=True, **fields)


def _warnings(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("emitter_filter") and r.levelno >= logging.WARNING
    ]


def _values_off_by_one(original):
    """`value_remapper` whose kept values from the second on take the next one's number."""

    def remapper(plan, num_values, live):
        remap = original(plan, num_values, live)
        last = len(live) - 1
        return lambda old: (lambda new: new + 1 if 0 < new < last else new)(remap(old))

    return remapper


def _data_rotated(original):
    """`new_data_indices` whose kept constants trade places: every tensor reads another."""

    def new_data_indices(order):
        found = original(order)
        rotated = {}
        for space, mapping in found.items():
            olds, news = list(mapping), list(mapping.values())
            rotated[space] = dict(zip(olds, news[1:] + news[:1], strict=True))
        return rotated

    return new_data_indices


def _drops_a_live_key(original):
    """`prune_named_data` that drops a key a delegate reads too."""

    def prune(emitter_output, store, use):
        return original(
            emitter_output, store, dataclasses.replace(use, dead=(*use.dead, use.live[0]))
        )

    return prune


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_every_case_is_proven(case, caplog):
    with caplog.at_level(logging.WARNING, logger="emitter_filter"):
        manager = case.build(dead=True, config=_config(prune_strict=True))
    assert emitter_filter.report(manager).skipped is None
    assert not _warnings(caplog)


@pytest.mark.parametrize(
    ("module", "name", "broken", "case"),
    [
        (plan_indices, "value_remapper", _values_off_by_one, "unused_buffer_portable"),
        (prune_emitted, "new_data_indices", _data_rotated, "mutable_data_and_dead_constant"),
        (named_data, "prune_named_data", _drops_a_live_key, "unused_buffer_xnnpack"),
    ],
    ids=["values off by one", "constants rotated", "live named data dropped"],
)
def test_a_broken_remap_is_caught_and_undone(module, name, broken, case, monkeypatch, caplog):
    case = CASES_BY_NAME[case]
    plain = case.build(dead=True).buffer
    monkeypatch.setattr(module, name, broken(getattr(module, name)))
    with caplog.at_level(logging.WARNING, logger="emitter_filter"):
        manager = case.build(dead=True, config=_config())
    assert manager.buffer == plain
    [warning] = _warnings(caplog)
    assert "written as ExecuTorch writes it" in warning
    assert "reads other bytes after the prune than before" in warning
    assert emitter_filter.report(manager).skipped is not None


def test_strict_mode_raises_the_proofs_refusal(monkeypatch):
    monkeypatch.setattr(
        plan_indices, "value_remapper", _values_off_by_one(plan_indices.value_remapper)
    )
    with pytest.raises(InvalidOutputError, match=r"method 'forward' reads other bytes"):
        PORTABLE.build(dead=True, config=_config(prune_strict=True))


def _counting_journals(monkeypatch) -> list[int]:
    """Counts `prune_proof.Journal`s taken (one per prune that changes the program)."""
    from emitter_filter.inprocess import prune_proof

    calls: list[int] = []
    original = prune_proof.Journal

    class Counted(original):  # type: ignore[misc,valid-type]
        def __init__(self, *args) -> None:
            calls.append(1)
            super().__init__(*args)

    monkeypatch.setattr(prune_proof, "Journal", Counted)
    return calls


def test_a_prune_that_changes_nothing_reads_nothing_for_its_proof(monkeypatch):
    calls = _counting_journals(monkeypatch)
    manager = PORTABLE.build(dead=False, config=_config(prune_strict=True))
    report = emitter_filter.report(manager)
    assert report.skipped is None and not report.dropped
    assert calls == []


def test_a_prune_that_changes_something_is_journaled_and_proven(monkeypatch):
    calls = _counting_journals(monkeypatch)
    manager = PORTABLE.build(dead=True, config=_config(prune_strict=True))
    assert emitter_filter.report(manager).dropped
    assert calls == [1]


def _fields(value, seen: dict) -> object:
    """`value` as nested tuples of every field of every object it reaches (a shared object
    once, then by its first path), to compare a whole program before and after."""
    if isinstance(value, (int, float, str, bytes, bool, type(None))):
        return value
    if id(value) in seen:
        return ("seen", seen[id(value)])
    seen[id(value)] = len(seen)
    if isinstance(value, (list, tuple)):
        return tuple(_fields(v, seen) for v in value)
    if isinstance(value, dict):
        return tuple((k, _fields(v, seen)) for k, v in sorted(value.items(), key=repr))
    if dataclasses.is_dataclass(value):
        names = [f.name for f in dataclasses.fields(value)]
        return (type(value).__name__, *((n, _fields(getattr(value, n), seen)) for n in names))
    return (type(value).__name__, repr(value))


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_the_journal_holds_every_field_the_prune_changes(case, monkeypatch):
    """The proof pairs only what the journal holds: after `undo`, the whole emitter output
    (every field of every object it reaches) is what it was before the prune."""
    from emitter_filter.inprocess import prune_proof

    found: dict[str, object] = {}
    original = prune_proof.PruneProof

    class Undone(original):  # type: ignore[misc,valid-type]
        def __init__(self, emitter_output, *args) -> None:
            super().__init__(emitter_output, *args)
            found["before"] = _fields(emitter_output, {})

        def check(self, named_data) -> None:
            super().check(named_data)
            self.undo()
            found["after undo"] = _fields(self._output, {})

    monkeypatch.setattr(prune_proof, "PruneProof", Undone)
    case.build(dead=True, config=_config(prune_strict=True))
    assert found["after undo"] == found["before"]
