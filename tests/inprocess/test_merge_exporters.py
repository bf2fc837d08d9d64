"""`merge`, `share` and `split` on programs as exporters write them (`tests.exporters`):
a base model and its fine-tunes from optimum-executorch (XNNPACK, tied embeddings, 12
constant methods, every file `model.pte`), and a KV-cache prefill and decode from
`export_llama` (7 constant methods; slow). Each method of an output computes bit for
bit what its input's computes, with every loader, each loaded afresh; KV-cache methods
over several steps; every output checked finite, so that equal means something.
"""

from __future__ import annotations

import inspect
import shlex
from pathlib import Path

import pytest
import torch
from executorch.extension.pybindings.portable_lib import (
    _load_for_executorch,
    _load_for_executorch_from_buffer,
)
from executorch.runtime import Runtime

from emitter_filter.cli import main
from emitter_filter.ondisk.audit import audit_file
from emitter_filter.ondisk.merge import merge_files
from emitter_filter.ondisk.read.read_pte import read_pte
from emitter_filter.ondisk.share import share_files
from emitter_filter.ondisk.split import split_file
from tests.exporters import (
    TOKENS,
    base_and_fine_tunes,
    export_with_methods,
    llama_methods,
    optimum_methods,
)

FOLDERS = ("base", "ft", "ft2")


@pytest.fixture(scope="module")
def optimum(tmp_path_factory) -> list[Path]:
    """base/model.pte, ft/model.pte, ft2/model.pte: XNNPACK, optimum's constant methods."""
    root = tmp_path_factory.mktemp("optimum")
    paths = []
    for folder, model in zip(FOLDERS, base_and_fine_tunes(len(FOLDERS)), strict=True):
        (root / folder).mkdir()
        paths.append(root / folder / "model.pte")
        paths[-1].write_bytes(export_with_methods(model, "xnnpack", TOKENS, optimum_methods()))
    return paths


def _runs(pte: Path, method: str, calls) -> list[list]:
    """`method` called with each of `calls` in turn, through every loader, each loading
    the file afresh: Runtime by path and by buffer, the pybindings' module by path and
    by buffer. One list of outputs per loader."""
    data = pte.read_bytes()  # alive while its program runs
    runtime, runs = Runtime.get(), []
    for program in (runtime.load_program(str(pte)), runtime.load_program(data)):
        loaded = program.load_method(method)
        runs.append([loaded.execute(list(inputs)) for inputs in calls])
    for module in (_load_for_executorch(str(pte)), _load_for_executorch_from_buffer(data)):
        runs.append([module.run_method(method, tuple(inputs)) for inputs in calls])
    return runs


def _want(pte: Path, method: str, calls) -> list:
    """What `pte`'s `method` returns for each of `calls`, in one fresh load; checked finite."""
    data = pte.read_bytes()
    module = _load_for_executorch_from_buffer(data)
    outputs = [module.run_method(method, tuple(inputs)) for inputs in calls]
    for output in outputs:
        for value in output:
            if isinstance(value, torch.Tensor):
                assert torch.isfinite(value).all(), f"{pte}:{method} is not finite"
    return outputs


def _same(got: list, want: list) -> bool:
    return len(got) == len(want) and all(
        torch.equal(g, w) if isinstance(w, torch.Tensor) else (type(g), g) == (type(w), w)
        for g, w in zip(got, want, strict=True)
    )


def _check_methods(out: Path, sources: dict[str, tuple[Path, str]], calls: dict) -> None:
    """Each method NAME of `out` computes what (input, method) of `sources` computes."""
    for name, (pte, method) in sources.items():
        want = _want(pte, method, calls.get(method, [()]))
        for run in _runs(out, name, calls.get(method, [()])):
            assert all(_same(g, w) for g, w in zip(run, want, strict=True)), f"{out}:{name}"


def _plans(path) -> list[str]:
    return [plan.name for plan in read_pte(path).plans]


def test_a_base_and_a_fine_tune_merge_with_two_method_flags(optimum, tmp_path, capsys):
    base, ft = optimum[:2]
    out = tmp_path / "merged.pte"
    assert (
        main(
            [
                "merge",
                str(base),
                str(ft),
                "-o",
                str(out),
                "--method",
                "base=base/model.pte:forward",
                "--method",
                "ft=#2:forward",
            ]
        )
        == 0
    )
    methods = list(optimum_methods())
    assert _plans(out) == ["base", *methods, "ft"]
    assert "12 the same in several inputs, written once" in capsys.readouterr().out
    calls = {"forward": [TOKENS]}
    _check_methods(
        out,
        {"base": (base, "forward"), "ft": (ft, "forward"), **{m: (ft, m) for m in methods}},
        calls,
    )
    assert audit_file(out).dead_bytes == 0


def test_three_inputs_named_model_pte_merge_and_share_by_number_or_tail(optimum, tmp_path):
    out = tmp_path / "merged.pte"
    merge_files(
        optimum, out, methods=["base=#1:forward", "ft=ft/model.pte:forward", "ft2=#3:forward"]
    )
    assert _plans(out) == ["base", *optimum_methods(), "ft", "ft2"]
    _check_methods(
        out,
        {n: (p, "forward") for n, p in zip(FOLDERS, optimum, strict=True)},
        {"forward": [TOKENS]},
    )
    shared = tmp_path / "shared"
    report = share_files(optimum, shared)
    assert [p.output for p in report.programs] == [str(shared / f / "model.pte") for f in FOLDERS]
    if "data_path" not in inspect.signature(Runtime.load_program).parameters:
        return  # share's outputs load with a .ptd: Runtime takes one from executorch 1.5 on
    runtime = Runtime.get()
    for folder, original in zip(FOLDERS, optimum, strict=True):
        want = _want(original, "forward", [TOKENS])[0]
        program = runtime.load_program(
            str(shared / folder / "model.pte"), data_path=str(shared / "shared.ptd")
        )
        assert _same(program.load_method("forward").execute(list(TOKENS)), want)


def test_merge_dedupe_of_a_base_and_fine_tune_is_no_larger_than_share(optimum, tmp_path):
    base, ft = optimum[:2]
    renames = ["base=#1:forward", "ft=#2:forward"]
    plain, deduplicated = tmp_path / "plain.pte", tmp_path / "dedupe.pte"
    merge_files([base, ft], plain, methods=renames)
    report = merge_files([base, ft], deduplicated, methods=renames, dedupe=True)
    shared = share_files([base, ft], tmp_path / "shared")
    # The tied embedding: the portable embedding's constant and XNNPACK's named data.
    embedding = 256 * 64 * 4
    assert report.deduplicated_bytes >= embedding
    assert deduplicated.stat().st_size <= plain.stat().st_size - embedding
    assert deduplicated.stat().st_size <= shared.bytes_after
    assert audit_file(deduplicated).dead_bytes == 0
    _check_methods(
        deduplicated, {"base": (base, "forward"), "ft": (ft, "forward")}, {"forward": [TOKENS]}
    )


def test_split_renames_a_merged_method_to_forward_for_an_app_that_calls_forward(optimum, tmp_path):
    base, ft = optimum[:2]
    merged = tmp_path / "merged.pte"
    merge_files([base, ft], merged, methods=["base=#1:forward", "ft=#2:forward"])
    out = tmp_path / "ft.pte"
    split_file(merged, out, ["forward=ft", *optimum_methods()])
    assert sorted(_plans(out)) == sorted(["forward", *optimum_methods()])
    data = out.read_bytes()  # alive while the module runs
    got = _load_for_executorch_from_buffer(data).forward(TOKENS)
    assert _same(got, _want(ft, "forward", [TOKENS])[0])
    _check_methods(out, {"forward": (ft, "forward")}, {"forward": [TOKENS]})


@pytest.fixture(scope="module")
def prefill_and_decode(tmp_path_factory) -> list[Path]:
    """prefill.pte and decode.pte of `tiny_llama`, as `export_llama` writes each."""
    from tests.model_sets import STEPS, tiny_llama

    root = tmp_path_factory.mktemp("llama")
    model = tiny_llama()
    paths = []
    for step, dynamic in (("prefill", True), ("decode", False)):
        paths.append(root / f"{step}.pte")
        paths[-1].write_bytes(
            export_with_methods(model, "portable", STEPS[step], llama_methods(dynamic=dynamic))
        )
    return paths


@pytest.mark.slow
def test_a_prefill_and_decode_merge_and_compute_as_before_over_several_steps(
    prefill_and_decode, tmp_path, capsys
):
    prefill, decode = prefill_and_decode
    out = tmp_path / "llama.pte"
    names = ["--method", f"prefill={prefill}:forward", "--method", f"decode={decode}:forward"]
    argv = ["merge", str(prefill), str(decode), "-o", str(out), *names]
    assert main(argv) == 2
    command = shlex.split(capsys.readouterr().err.split(": emitter-filter ")[1])
    # Only enable_dynamic_shape differs: one flag more keeps prefill's.
    assert command == [*argv, "--drop", f"{decode}:enable_dynamic_shape"]
    assert main(command) == 0
    methods = list(llama_methods(dynamic=True))
    assert _plans(out) == ["prefill", *methods, "decode"]
    tokens = torch.randint(0, 256, (1, 8), generator=torch.Generator().manual_seed(9))
    calls = {
        "prefill": [(tokens, torch.tensor([0])), (tokens, torch.tensor([8]))],
        "decode": [(tokens[:, i : i + 1], torch.tensor([16 + i])) for i in range(3)],
    }
    sources = {"prefill": (prefill, "forward"), "decode": (decode, "forward")}
    for name, (pte, method) in sources.items():
        want = _want(pte, method, calls[name])
        for run in _runs(out, name, calls[name]):
            assert all(_same(g, w) for g, w in zip(run, want, strict=True)), name
    _check_methods(out, {m: (prefill, m) for m in methods}, {})
    assert audit_file(out).dead_bytes == 0
