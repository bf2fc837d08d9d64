"""What a method plans in memory: explain, diff and budget read `non_const_buffer_sizes`."""

from __future__ import annotations

import json

import pytest

from emitter_filter.cli import main
from emitter_filter.ondisk.budget import check_budget, read_budget
from emitter_filter.ondisk.diff import diff_files
from emitter_filter.ondisk.explain import explain_file
from tests.layouts import build_constants, with_program_changed

pytestmark = pytest.mark.filetools


def _planned(*arenas: int) -> bytes:
    """A one-method program whose plan asks for `arenas` (index 0 reserved, so 0)."""
    base = build_constants([bytes(range(1, 65))], frozenset())

    def plan(program) -> None:
        program.executionPlan[0].nonConstBufferSizes = [0, *arenas]

    return with_program_changed(base, plan)


@pytest.fixture
def hidden(tmp_path, monkeypatch):
    """narrow.pte plans a 64-wide hidden layer's activations, wide.pte a 4,096-wide one."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "narrow.pte").write_bytes(_planned(64 * 4, 32))
    (tmp_path / "wide.pte").write_bytes(_planned(4096 * 4, 32))
    return tmp_path


def test_explain_gives_each_method_its_planned_bytes_by_memory_id(hidden, capsys):
    (method,) = explain_file("wide.pte").to_json()["methods"]
    assert method["method"] == "forward"
    assert method["planned_bytes"] == 4096 * 4 + 32
    assert method["memory_ids"] == [
        {"memory_id": 1, "planned_bytes": 4096 * 4},
        {"memory_id": 2, "planned_bytes": 32},
    ]
    assert method["constant_bytes"] == 64
    assert method["external_bytes"] == 0
    assert main(["explain", "wide.pte"]) == 0
    assert (
        "memory forward: planned 16,416 B (memory id 1: 16,384, memory id 2: 32); "
        "constants 64 B; .ptd 0 B" in capsys.readouterr().out
    )


def test_diff_names_the_arena_that_grew(hidden, capsys):
    diff = diff_files("narrow.pte", "wide.pte")
    (change,) = diff.memory
    assert (change.method, change.memory_id, change.old, change.new) == ("forward", 1, 256, 16384)
    assert not diff.unchanged
    assert main(["diff", "narrow.pte", "wide.pte"]) == 0
    said = capsys.readouterr().out
    assert "planned memory: forward memory id 1: planned grew 256 -> 16,384 B (+16,128)" in said
    assert main(["diff", "wide.pte", "narrow.pte", "--markdown"]) == 0
    assert "| `forward` | 1 | 16,384 | 256 | -16,128 |" in capsys.readouterr().out
    assert main(["diff", "narrow.pte", "narrow.pte", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["planned_memory"] == []


def test_budget_check_fails_naming_planned_memory(hidden, capsys):
    (hidden / "model.pte").write_bytes((hidden / "narrow.pte").read_bytes())
    assert main(["budget", "write", "model.pte", "-o", "pte-budget.json"]) == 0
    recorded = json.loads((hidden / "pte-budget.json").read_text())["files"]["model.pte"]
    assert recorded["methods"] == {
        "forward": {"planned_bytes": 288, "memory_ids": {"1": 256, "2": 32}}
    }
    (hidden / "model.pte").write_bytes((hidden / "wide.pte").read_bytes())
    capsys.readouterr()
    assert main(["budget", "check", "model.pte", "--budget", "pte-budget.json"]) == 1
    captured = capsys.readouterr()
    assert ": within budget" in captured.out  # the bytes are as recorded: memory fails it
    assert (
        "model.pte: over budget: forward: planned memory 16,416 B, budget 288 B (allowed 288): "
        "+16,128 B (forward memory id 1: planned grew 256 -> 16,384 B (+16,128))" in captured.out
    )
    assert "forward: planned memory 16,416 B" in captured.err
    # Within a tolerance that covers it, it passes.
    assert (
        main(["budget", "check", "model.pte", "--budget", "pte-budget.json", "--tolerance", "6000"])
        == 0
    )


def test_a_budget_without_planned_memory_still_reads_and_gates_bytes_only(hidden, capsys):
    (hidden / "model.pte").write_bytes((hidden / "narrow.pte").read_bytes())
    assert main(["budget", "write", "model.pte", "-o", "pte-budget.json"]) == 0
    document = json.loads((hidden / "pte-budget.json").read_text())
    del document["files"]["model.pte"]["methods"]
    (hidden / "pte-budget.json").write_text(json.dumps(document))
    (hidden / "model.pte").write_bytes((hidden / "wide.pte").read_bytes())
    (check,) = check_budget(["model.pte"], read_budget("pte-budget.json"))
    assert check.memory_over is None and not check.over
    assert "no planned memory recorded" in check.summary()


def test_a_budget_with_a_memory_id_that_is_no_number_is_refused(hidden, capsys):
    (hidden / "model.pte").write_bytes((hidden / "narrow.pte").read_bytes())
    assert main(["budget", "write", "model.pte", "-o", "pte-budget.json"]) == 0
    document = json.loads((hidden / "pte-budget.json").read_text())
    document["files"]["model.pte"]["methods"]["forward"]["memory_ids"]["x"] = 1
    (hidden / "pte-budget.json").write_text(json.dumps(document))
    capsys.readouterr()
    assert main(["budget", "check", "model.pte", "--budget", "pte-budget.json"]) == 2
    assert "not a memory id" in capsys.readouterr().err


def test_a_key_two_methods_read_is_said_to_load_per_method(tmp_path, monkeypatch):
    """XNNPACK's golden program merged with itself: both methods read the same two keys."""
    from pathlib import Path

    monkeypatch.chdir(tmp_path)
    golden = Path(__file__).resolve().parents[1] / "golden" / "xnnpack" / "pruned" / "model.pte"
    for name in ("a.pte", "b.pte"):
        (tmp_path / name).write_bytes(golden.read_bytes())
    merge = ["merge", "a.pte", "b.pte", "-o", "ab.pte"]
    assert main([*merge, "--method", "one=a.pte:forward", "--method", "two=b.pte:forward"]) == 0
    one, two = explain_file("ab.pte").to_json()["methods"]
    assert (one["method"], two["method"]) == ("one", "two")
    for method, other in ((one, "two"), (two, "one")):
        shared = [n for n in method["load_multipliers"] if "loaded once per method" in n]
        assert shared == [
            f"2 key(s), 60 B, also read by {other}: loaded once per method where the loader "
            "reads rather than maps (C++ Module's LoadMode::File; not counted)"
        ]
    (alone,) = explain_file(golden).to_json()["methods"]
    assert not [n for n in alone["load_multipliers"] if "loaded once per method" in n]
