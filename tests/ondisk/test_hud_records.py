"""`explain --hud-json` and `budget check --hud-json`: v3 records PyTorch's benchmark dashboard
ingests, checked against the column types of test-infra's `benchmark.oss_ci_benchmark_v3`."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pytest

from emitter_filter.cli import main
from emitter_filter.ondisk.explain import explain_file
from emitter_filter.ondisk.hud_records import MIB, hud_records
from tests.layouts import build_constants, with_program_changed

pytestmark = pytest.mark.filetools

# The columns a record fills, with their ClickHouse types (schema.sql of
# benchmark.oss_ci_benchmark_v3; written here, not copied).
V3_COLUMNS = {
    "benchmark": (
        "Tuple",
        {
            "name": "String",
            "mode": "String",
            "dtype": "String",
            "extra_info": "Map(String, String)",
        },
    ),
    "model": (
        "Tuple",
        {
            "name": "String",
            "type": "String",
            "backend": "String",
            "origins": "Array(String)",
            "extra_info": "Map(String, String)",
        },
    ),
    "metric": (
        "Tuple",
        {
            "name": "String",
            "benchmark_values": "Array(Float32)",
            "target_value": "Float32",
            "extra_info": "Map(String, String)",
        },
    ),
    "runners": (
        "Array(Tuple)",
        {
            "name": "String",
            "type": "String",
            "cpu_info": "String",
            "cpu_count": "UInt32",
            "mem_info": "String",
            "avail_mem_in_gb": "UInt32",
            "gpu_info": "String",
            "gpu_count": "UInt32",
            "gpu_mem_info": "String",
            "avail_gpu_mem_in_gb": "UInt32",
            "extra_info": "Map(String, String)",
        },
    ),
}
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "hud_v3_shape.json"


def _float32(value) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    try:
        struct.pack("<f", value)
    except OverflowError:
        return False
    return True


def _fits(value, kind: str) -> bool:
    if kind == "String":
        return isinstance(value, str)
    if kind == "Float32":
        return _float32(value)
    if kind == "UInt32":
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**32
    if kind == "Map(String, String)":
        return isinstance(value, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        )
    if kind.startswith("Array(") and kind.endswith(")"):
        return isinstance(value, list) and all(_fits(v, kind[6:-1]) for v in value)
    raise AssertionError(f"no check for {kind}")


def v3_problems(record: dict) -> list[str]:
    """Where `record` does not fit the table's columns (absent fields take their defaults)."""
    problems = [f"unknown column {key}" for key in record if key not in V3_COLUMNS]
    for column, (kind, fields) in V3_COLUMNS.items():
        if column not in record:
            continue
        tuples = record[column] if kind == "Array(Tuple)" else [record[column]]
        if not isinstance(tuples, list):
            problems.append(f"{column} is no array")
            continue
        for value in tuples:
            if not isinstance(value, dict):
                problems.append(f"{column} is no tuple")
                continue
            problems += [f"{column}.{k} is no field" for k in value if k not in fields]
            problems += [
                f"{column}.{k}: {value[k]!r} is no {t}"
                for k, t in fields.items()
                if k in value and not _fits(value[k], t)
            ]
    return problems


def test_the_fixture_of_test_infras_shape_fits_the_columns():
    (record,) = json.loads(FIXTURE.read_text())
    assert v3_problems(record) == []
    assert v3_problems({"metric": {"benchmark_values": ["1"]}}) != []


@pytest.fixture
def model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    base = build_constants([bytes(range(1, 65)), bytes(200)], frozenset({1}))

    def plan(program) -> None:
        program.executionPlan[0].nonConstBufferSizes = [0, 20_000_000]

    (tmp_path / "tiny.pte").write_bytes(with_program_changed(base, plan))
    return tmp_path / "tiny.pte"


def test_each_part_of_the_file_is_one_record_that_fits_the_columns(model):
    explanation = explain_file(model)
    records = hud_records([explanation])
    fixture_keys = {k for r in json.loads(FIXTURE.read_text()) for k in r}
    for record in records:
        assert v3_problems(record) == []
        assert fixture_keys <= set(record)
        assert record["benchmark"]["name"] == "ExecuTorch"
        assert record["model"]["name"] == "tiny"
        assert record["model"]["backend"] == "portable"
        assert record["metric"]["name"].endswith("(mb)")
    by_name = {r["metric"]["name"]: r["metric"] for r in records}
    assert set(by_name) == {
        "pte_size(mb)",
        "program_size(mb)",
        "constant_size(mb)",
        "delegate_size(mb)",
        "named_data_size(mb)",
        "dead_size(mb)",
        "duplicated_size(mb)",
        "planned_memory(mb)",
    }
    # Exact bytes beside the MiB: past 2**24 a Float32 holds no byte count exactly.
    planned = by_name["planned_memory(mb)"]
    assert planned["extra_info"]["bytes"] == "20000000"
    assert planned["extra_info"]["method"] == "forward"
    assert planned["benchmark_values"] == [pytest.approx(20_000_000 / MIB)]
    assert by_name["pte_size(mb)"]["extra_info"]["bytes"] == str(model.stat().st_size)
    parts = ("program_size(mb)", "constant_size(mb)", "delegate_size(mb)", "named_data_size(mb)")
    assert sum(int(by_name[p]["extra_info"]["bytes"]) for p in parts) == model.stat().st_size
    assert by_name["dead_size(mb)"]["extra_info"]["bytes"] == str(explanation.audit.dead_bytes)


def test_explain_and_budget_check_write_them(model, capsys):
    assert main(["explain", "tiny.pte", "--hud-json", "hud.json", "--model-name", "m"]) == 0
    records = json.loads(Path("hud.json").read_text())
    assert {r["model"]["name"] for r in records} == {"m"}
    assert main(["budget", "write", "tiny.pte", "-o", "pte-budget.json"]) == 0
    assert (
        main(["budget", "check", "tiny.pte", "--budget", "pte-budget.json", "--hud-json", "b.json"])
        == 0
    )
    assert json.loads(Path("b.json").read_text()) == hud_records([explain_file(model)])
    capsys.readouterr()
    assert main(["explain", "tiny.pte", "--model-name", "m"]) == 2
    assert "give --hud-json" in capsys.readouterr().err


def test_an_xnnpack_program_names_its_backend_and_what_loading_multiplies():
    golden = Path(__file__).resolve().parents[1] / "golden" / "xnnpack" / "pruned" / "model.pte"
    explanation = explain_file(golden)
    records = hud_records([explanation])
    assert {r["model"]["backend"] for r in records} == {"XnnpackBackend"}
    (planned,) = [r["metric"] for r in records if r["metric"]["name"] == "planned_memory(mb)"]
    assert "XNNPACK packs" in planned["extra_info"]["load_multipliers"]
    (memory,) = explanation.to_json()["methods"]
    assert any("weights cache" in note for note in memory["load_multipliers"])
