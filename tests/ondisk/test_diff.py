"""`emitter-filter diff`: which entries made a file grow, and `--max-growth`'s exit codes.

Torch-free programs from `tests/layouts.py` (one add per constant, so each
constant has its own reader), the golden files, and (with torch) a small MLP
with one layer widened and the same MLP in float16.
"""

from __future__ import annotations

import json

import pytest

from emitter_filter.cli import main
from emitter_filter.ondisk.diff import diff_files, growth_limit
from tests.files import GOLDEN, HAVE_EXECUTORCH, saved
from tests.layouts import build_constants

pytestmark = pytest.mark.filetools


def _constants(*sizes: int, seed: int = 1) -> list[bytes]:
    """Distinct, non-zero constants of these sizes (multiples of 4)."""
    return [
        bytes((seed * 31 + i * 7 + j) % 251 + 1 for j in range(size))
        for i, size in enumerate(sizes)
    ]


def _write(tmp_path, name, constants, dead=frozenset()):
    path = tmp_path / name
    path.write_bytes(build_constants(constants, frozenset(dead)))
    return path


def test_identical_files_are_no_change_and_exit_0(tmp_path, capsys):
    old = _write(tmp_path, "old.pte", _constants(64, 32))
    new = _write(tmp_path, "new.pte", _constants(64, 32))
    assert diff_files(old, new).unchanged
    assert main(["diff", str(old), str(new), "--max-growth", "0"]) == 0
    assert capsys.readouterr().out == f"{old} -> {new}: no change ({old.stat().st_size:,} bytes)\n"


def test_a_widened_constant_is_named_first_with_its_shape_change(tmp_path):
    old = _write(tmp_path, "old.pte", _constants(64, 32, 16))
    new = _write(tmp_path, "new.pte", _constants(64, 256, 16))
    result = diff_files(old, new)
    first = result.changes[0]
    assert (first.kind, first.old.label, first.delta) == ("grown", "constant[2]", 224)
    assert first.notes == ("shape [8] -> [64]",) and first.matched_by == "readers only"
    assert [c.old.label for c in result.changes if c.old and c.old.storage == "constant"] == [
        "constant[2]"
    ]


def test_a_constant_that_moved_is_matched_by_content(tmp_path):
    a, b = _constants(64, 32)
    old = _write(tmp_path, "old.pte", [a, b])
    new = _write(tmp_path, "new.pte", [b, a])
    changes = diff_files(old, new).changes
    assert {c.matched_by for c in changes if c.old and c.old.storage == "constant"} <= {"content"}


def test_an_added_constant_and_a_newly_dead_one_are_named(tmp_path):
    old = _write(tmp_path, "old.pte", _constants(64, 32))
    new = _write(tmp_path, "new.pte", _constants(64, 32, 128), dead={1})
    changes = {c.kind: c for c in diff_files(old, new).changes}
    assert changes["added"].new.label == "constant[3]" and changes["added"].delta == 128
    assert changes["added"].notes == ("FLOAT (float32) [32]",)
    assert changes["changed"].new.label == "constant[2]"
    assert changes["changed"].notes == ("newly dead",)


def test_max_growth_exits_1_naming_the_entries_that_grew(tmp_path, capsys):
    old = _write(tmp_path, "old.pte", _constants(64, 32))
    new = _write(tmp_path, "new.pte", _constants(64, 32, 512))
    growth = new.stat().st_size - old.stat().st_size
    assert main(["diff", str(old), str(new), "--max-growth", str(growth)]) == 0
    capsys.readouterr()
    assert main(["diff", str(old), str(new), "--max-growth", str(growth - 1)]) == 1
    err = capsys.readouterr().err
    assert f"grew {growth:+,} bytes" in err and "+512 B  added constant[3]" in err
    percent = 100 * growth / old.stat().st_size
    assert main(["diff", str(old), str(new), "--max-growth", f"{percent + 0.1:.1f}%"]) == 0
    assert main(["diff", str(old), str(new), "--max-growth", f"{percent - 0.1:.1f}%"]) == 1
    assert main(["diff", str(new), str(old), "--max-growth", "0"]) == 0
    assert main(["diff", str(old), str(new), "--max-growth", "lots"]) == 2


def test_a_negative_max_growth_asks_for_a_shrink_and_is_read_as_a_value(tmp_path, capsys):
    old = _write(tmp_path, "old.pte", _constants(64, 32, 512))
    new = _write(tmp_path, "new.pte", _constants(64, 32))
    shrink = old.stat().st_size - new.stat().st_size
    percent = 100 * shrink / old.stat().st_size
    for limit, code in [
        (f"-{shrink}", 0),
        (f"-{shrink + 1}", 1),
        (f"-{percent - 0.1:.1f}%", 0),
        (f"-{percent + 0.1:.1f}%", 1),
    ]:
        assert main(["diff", str(old), str(new), "--max-growth", limit]) == code, limit
    assert "expected one argument" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "text, limit",
    [("4096", (4096, None)), ("1.5%", (None, 1.5)), ("-5%", (None, -5.0)), ("-64", (-64, None))],
)
def test_growth_limits_are_bytes_or_percent(text, limit):
    assert growth_limit(text) == limit


def test_markdown_and_json_of_the_golden_pruned_and_dirty_files(capsys):
    pruned, _ = saved(GOLDEN / "plain" / "pruned")
    dirty, _ = saved(GOLDEN / "plain" / "dirty")
    assert main(["diff", str(pruned), str(dirty), "--markdown"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"**model.pte**: {pruned.stat().st_size:,} → {dirty.stat().st_size:,}")
    assert "| added | `constant[3]` |  | 128 | +128 | FLOAT (float32) [32]; dead |" in out
    assert main(["diff", str(pruned), str(dirty), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["schema"] == "emitter-filter-diff/1"
    assert document["delta"] == dirty.stat().st_size - pruned.stat().st_size
    assert document["delta"] == sum(c["delta"] for c in document["changes"]) + (
        document["new"]["totals"].get("padding", 0) - document["old"]["totals"].get("padding", 0)
    )


@pytest.mark.skipif(not HAVE_EXECUTORCH, reason="builds models with torch and executorch")
def test_a_model_with_one_layer_widened_names_that_layers_tensors_first(tmp_path):
    old = _export_mlp(tmp_path, "old", hidden=(32, 32))
    new = _export_mlp(tmp_path, "new", hidden=(32, 96))
    changes = diff_files(old[0], new[0], old[1], new[1]).changes
    assert [c.new.names for c in changes[:2]] == [("layers.1.weight",), ("layers.2.weight",)]
    assert [c.notes for c in changes[:2]] == [
        ("shape [32, 32] -> [96, 32]",),
        ("shape [8, 32] -> [8, 96]",),
    ]


@pytest.mark.skipif(not HAVE_EXECUTORCH, reason="builds models with torch and executorch")
def test_the_same_model_in_float16_names_the_dtype_changes(tmp_path):
    old = _export_mlp(tmp_path, "fp32", hidden=(32, 32))
    new = _export_mlp(tmp_path, "fp16", hidden=(32, 32), half=True)
    changes = diff_files(old[0], new[0], old[1], new[1]).changes
    weights = [c for c in changes if c.old and c.old.storage == "external"]
    assert weights and all("dtype FLOAT (float32) -> HALF (float16)" in c.notes for c in weights)
    assert weights[0].delta < 0


def _export_mlp(tmp_path, name, hidden, half=False):
    """An MLP with its weights external (named by FQN in the .ptd): (pte, ptds)."""
    import torch
    from executorch.exir import ExecutorchBackendConfig, to_edge

    torch.manual_seed(0)
    sizes = (16, *hidden, 8)
    # Neighbouring pairs: one fewer than the items, so zip stops early on purpose.
    layers = [torch.nn.Linear(a, b) for a, b in zip(sizes, sizes[1:], strict=False)]
    model = torch.nn.Sequential()
    model.add_module("layers", torch.nn.Sequential(*layers))
    model = model.half() if half else model
    dtype = torch.float16 if half else torch.float32
    exported = torch.export.export(model.eval(), (torch.randn(1, 16, dtype=dtype),))
    manager = to_edge(exported).to_executorch(ExecutorchBackendConfig(external_constants=True))
    out = tmp_path / name
    out.mkdir()
    manager.save(str(out / "model.pte"))
    manager.write_tensor_data_to_file(str(out))
    return out / "model.pte", sorted(out.glob("*.ptd"))


def test_xnnpack_named_data_has_the_type_xnnpack_reads_it_as():
    from emitter_filter.ondisk.explain import explain_file

    pte, _ = saved(GOLDEN / "xnnpack" / "dirty")
    named = [p for p in explain_file(pte).parts if p.storage == "named_data"]
    assert named and all(p.dtype == "FLOAT" and p.shape for p in named)
    assert sorted(p.nbytes for p in named) == sorted(4 * _numel(p.shape) for p in named)


def _numel(shape) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


@pytest.mark.skipif(not HAVE_EXECUTORCH, reason="builds models with torch and executorch")
def test_fp32_against_8da4w_names_the_dtype_changes_of_the_weights(tmp_path):
    import copy

    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    quant_api = pytest.importorskip("torchao.quantization.quant_api")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8)).eval()
    paths = {}
    for name in ("fp32", "8da4w"):
        quantized = copy.deepcopy(model)
        if name == "8da4w":
            quantized = quant_api.Int8DynActInt4WeightQuantizer(groupsize=32).quantize(quantized)
        exported = torch.export.export(quantized, (torch.randn(1, 64),))
        lowered = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
        paths[name] = tmp_path / f"{name}.pte"
        paths[name].write_bytes(lowered.to_executorch().buffer)
    changes = diff_files(paths["fp32"], paths["8da4w"]).changes
    weights = [c for c in changes if c.old and c.new and c.new.storage == "named_data"]
    assert [(c.old.shape, c.notes) for c in weights[:2]] == [
        ((64, 64), ("dtype FLOAT (float32) -> QUINT4X2",)),
        ((8, 64), ("dtype FLOAT (float32) -> QUINT4X2",)),
    ]
    assert weights[0].delta == 64 * 64 // 2 - 64 * 64 * 4
    assert {c.new.dtype for c in changes if c.kind == "added"} == {"scales"}
