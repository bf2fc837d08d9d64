"""Programs exported separately, merged into one multi-method `.pte`, loaded and run.

The sets of `tests.model_sets`: (a) two heads on one backbone, (c) a base with two
LoRA-style adapters, each portable and lowered to XNNPACK, and (d) the heads lowered
with their delegate blobs inline; (b) the tiny llama's prefill and decode is slow.
Each method of the merged file, run by every loader the release has (by name), computes
bit for bit what its input's `forward` computes; so does each method `split` gives back.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
from pathlib import Path

import pytest
import torch
from executorch.extension.pybindings.portable_lib import (
    _load_for_executorch,
    _load_for_executorch_from_buffer,
)
from executorch.runtime import Runtime

from emitter_filter.cli import main
from emitter_filter.errors import PteFormatError
from emitter_filter.ondisk.audit import audit_file
from emitter_filter.ondisk.merge import merge_files
from emitter_filter.ondisk.read.file_headers import aligned
from emitter_filter.ondisk.read.read_pte import read_pte
from emitter_filter.ondisk.split import split_file
from emitter_filter.program.reachability import DataSpace
from tests.model_sets import INPUT, SETS, STEPS, export, export_step, tiny_llama, twin_heads

#: `Runtime.load_program` takes a data file from executorch 1.5 on; the pybindings in 1.4 too.
_RUNTIME_TAKES_DATA = "data_path" in inspect.signature(Runtime.load_program).parameters

CASES = {
    "heads-portable": ("heads", "portable", {}),
    "heads-xnnpack": ("heads", "xnnpack", {}),
    "lora-portable": ("lora", "portable", {}),
    "lora-xnnpack": ("lora", "xnnpack", {}),
    "heads-xnnpack-inline": ("heads", "xnnpack", {"extract_delegate_segments": False}),
}


@pytest.fixture(scope="module", params=list(CASES))
def merged(request, tmp_path_factory):
    """(the inputs, the merged file, its report): each input's `forward` as `m<i>`."""
    name, backend, config = CASES[request.param]
    root = tmp_path_factory.mktemp(request.param)
    inputs = []
    for number, model in enumerate(SETS[name]()):
        path = root / f"program{number}.pte"
        path.write_bytes(export(model, backend, **config))
        inputs.append(path)
    out = root / "merged.pte"
    renames = [f"m{i}={p}:forward" for i, p in enumerate(inputs)]
    return inputs, out, merge_files(inputs, out, methods=renames)


def _run_every_loader(pte, method: str, inputs) -> list[torch.Tensor]:
    """`method` on `inputs` through every loader: Runtime by path and by buffer, the
    pybindings' module by path and by buffer."""
    data = pte.read_bytes()  # kept alive, with each program, while its method runs
    runtime = Runtime.get()
    outputs = []
    for program in (runtime.load_program(str(pte)), runtime.load_program(data)):
        outputs.append(program.load_method(method).execute(list(inputs))[0])
    for module in (_load_for_executorch(str(pte)), _load_for_executorch_from_buffer(data)):
        outputs.append(module.run_method(method, tuple(inputs))[0])
    return outputs


def _want(path, inputs) -> torch.Tensor:
    data = path.read_bytes()  # alive while the module runs
    return _load_for_executorch_from_buffer(data).forward(tuple(inputs))[0]


def test_every_method_computes_what_its_input_computes_with_every_loader(merged):
    inputs, out, report = merged
    assert [m.name for m in report.methods] == [f"m{i}" for i in range(len(inputs))]
    for number, path in enumerate(inputs):
        want = _want(path, INPUT)
        for got in _run_every_loader(out, f"m{number}", INPUT):
            assert torch.equal(got, want), path.name


def _distinct_contents(paths) -> int:
    """The bytes of the inputs' data, each content once: constant entries, delegate blobs
    (segments and inline), named data."""
    seen: dict[bytes, int] = {}
    for path in paths:
        data, pte = path.read_bytes(), read_pte(path)
        ranges = [(e.offset, e.nbytes) for i, e in pte.entries[DataSpace.CONSTANT].items() if i]
        ranges += [(b.offset, b.nbytes) for b in pte.delegates]
        ranges += [(e.offset, e.nbytes) for e in pte.named_data]
        for offset, nbytes in ranges:
            seen[hashlib.sha256(data[offset : offset + nbytes]).digest()] = nbytes
    return sum(seen.values())


def test_the_merged_file_holds_each_content_once(merged):
    inputs, out, report = merged
    reads = [read_pte(p) for p in inputs]
    # Every program table, and per stored piece at most one alignment of padding.
    pieces = sum(
        len(r.entries[DataSpace.CONSTANT]) + len(r.delegates) + len(r.named_data) + len(r.segments)
        for r in reads
    )
    bound = (
        _distinct_contents(inputs)
        + sum(aligned(r.program_size, 16) for r in reads)
        + pieces * 128
        + 4096
    )
    assert out.stat().st_size <= bound
    assert report.stored_once > 0 and report.bytes_after < report.bytes_before
    # The backbone's weights are in every input once and in the merged file once.
    backbone = (64 * 128 + 128 * 128) * 4
    assert report.bytes_before - report.bytes_after >= backbone * (len(inputs) - 1) * 0.9


def test_the_merged_file_audits_clean(merged):
    _, out, _ = merged
    assert audit_file(out).dead_bytes == 0


def test_split_gives_back_each_method_and_merging_the_parts_gives_the_file(merged, tmp_path):
    inputs, out, report = merged
    parts = []
    for number, path in enumerate(inputs):
        part = tmp_path / f"m{number}.pte"
        split_file(out, part, [f"m{number}"])
        assert [p.name for p in read_pte(part).plans] == [f"m{number}"]
        assert audit_file(part).dead_bytes == 0
        assert part.stat().st_size < out.stat().st_size
        for got in _run_every_loader(part, f"m{number}", INPUT):
            assert torch.equal(got, _want(path, INPUT)), path.name
        parts.append(part)
    again = tmp_path / "again.pte"
    merge_files(parts, again)
    assert again.read_bytes() == out.read_bytes()


def test_merging_the_merged_file_alone_changes_nothing(merged, tmp_path):
    _, out, _ = merged
    merge_files([out], tmp_path / "again.pte")
    assert (tmp_path / "again.pte").read_bytes() == out.read_bytes()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["portable", "xnnpack"])
def test_prefill_and_decode_merged_compute_as_before(backend, tmp_path):
    model = tiny_llama()
    inputs = []
    for step in STEPS:
        path = tmp_path / f"{step}.pte"
        path.write_bytes(export_step(model, step, backend))
        inputs.append(path)
    out = tmp_path / "llama.pte"
    report = merge_files(inputs, out, methods=[f"{s}={s}.pte:forward" for s in STEPS])
    weights = sum(p.numel() * 4 for p in model.parameters())
    assert report.bytes_before - report.bytes_after > weights * 0.8
    runtime = Runtime.get()
    module = _load_for_executorch(str(out))
    for path, (step, step_inputs) in zip(inputs, STEPS.items(), strict=True):
        want = runtime.load_program(str(path)).load_method("forward").execute(list(step_inputs))
        # A program of its own per method: `Runtime` gives every host-only method of one
        # program the same arenas, so a KV cache there is not the method's own (its
        # load_method says so); the pybindings' module keeps each method's memory apart.
        got = runtime.load_program(str(out)).load_method(step).execute(list(step_inputs))
        assert torch.equal(want[0], got[0]), step
        assert torch.equal(want[0], module.run_method(step, step_inputs)[0]), step
    assert audit_file(out).dead_bytes == 0


def _export_external(model, directory) -> tuple:
    """`model` exported portable with its weights in a `.ptd` (`external_constants`)."""
    from executorch.exir import ExecutorchBackendConfig, to_edge

    directory.mkdir()
    manager = to_edge(torch.export.export(model.eval(), INPUT)).to_executorch(
        ExecutorchBackendConfig(external_constants=True)
    )
    (directory / "model.pte").write_bytes(manager.buffer)
    manager.write_tensor_data_to_file(str(directory))
    return directory / "model.pte", [*directory.glob("*.ptd")]


def test_inputs_with_ptd_files_inline_into_one_file_that_loads_alone(tmp_path):
    inputs, data = [], []
    for number, model in enumerate(SETS["heads"]()):
        pte, ptds = _export_external(model, tmp_path / f"in{number}")
        inputs.append(pte)
        data += [f"{pte}={ptd}" for ptd in ptds]  # each input its own: the keys are alike
    renames = [f"m{i}={p}:forward" for i, p in enumerate(inputs)]
    # Both heads name their weight `head.weight`: one .ptd cannot hold both.
    with pytest.raises(PteFormatError, match="'head.weight' holds other bytes.*--inline"):
        merge_files(
            inputs, tmp_path / "out.pte", methods=renames, data=data, ptd_out=tmp_path / "out.ptd"
        )
    out = tmp_path / "inline.pte"
    merge_files(inputs, out, methods=renames, data=data, inline=True)
    assert not read_pte(out).entries[DataSpace.EXTERNAL] and audit_file(out).dead_bytes == 0
    for number, (pte, spec) in enumerate(zip(inputs, data, strict=True)):
        ptd = Path(spec.rpartition("=")[2])
        program, weights = pte.read_bytes(), ptd.read_bytes()  # alive while the module runs
        want = _load_for_executorch_from_buffer(program, weights).forward(INPUT)[0]
        for got in _run_every_loader(out, f"m{number}", INPUT):
            assert torch.equal(got, want)


@pytest.mark.parametrize("backend", ["portable", "xnnpack"])
def test_shares_outputs_merge_with_their_ptd_and_inline(backend, tmp_path):
    from emitter_filter.ondisk.share import share_files

    originals = []
    for number, model in enumerate(SETS["lora"]()):
        originals.append(tmp_path / f"program{number}.pte")
        originals[-1].write_bytes(export(model, backend))
    share_files(originals, tmp_path / "shared")
    shared = [tmp_path / "shared" / p.name for p in originals]
    ptd = tmp_path / "shared" / "shared.ptd"
    renames = [f"m{i}={p}:forward" for i, p in enumerate(shared)]
    out, out_ptd, inline = tmp_path / "m.pte", tmp_path / "m.ptd", tmp_path / "inline.pte"
    merge_files(shared, out, methods=renames, data=[ptd], ptd_out=out_ptd)
    merge_files(shared, inline, methods=renames, data=[ptd], inline=True)
    assert audit_file(out, [out_ptd]).dead_bytes == 0 and audit_file(inline).dead_bytes == 0
    assert inline.stat().st_size < out.stat().st_size + out_ptd.stat().st_size + 4096
    runtime = Runtime.get()
    for number, original in enumerate(originals):
        want = _want(original, INPUT)
        for got in _run_every_loader(inline, f"m{number}", INPUT):
            assert torch.equal(got, want), original.name
        program, weights = out.read_bytes(), out_ptd.read_bytes()  # alive while they run
        modules = [
            _load_for_executorch(str(out), str(out_ptd)),
            _load_for_executorch_from_buffer(program, weights),
        ]
        got = [module.run_method(f"m{number}", INPUT)[0] for module in modules]
        if _RUNTIME_TAKES_DATA:
            loaded = runtime.load_program(str(out), data_path=str(out_ptd))
            got.append(loaded.load_method(f"m{number}").execute(list(INPUT))[0])
        assert all(torch.equal(g, want) for g in got), original.name


@pytest.fixture
def twins(tmp_path) -> list[tuple[Path, Path]]:
    """Two heads of one shape exported with `external_constants`: (the .pte, its .ptd) each,
    both .ptd files with a `head.weight` of other bytes."""
    pairs = []
    for number, model in enumerate(twin_heads()):
        pte, (ptd,) = _export_external(model, tmp_path / f"in{number}")
        # Named apart: `share` writes each program under its file name.
        pairs.append(
            (
                pte.rename(pte.with_name(f"head{number}.pte")),
                ptd.rename(ptd.with_name(f"head{number}.ptd")),
            )
        )
    return pairs


@pytest.mark.parametrize("mode", ["--inline", "--ptd-out"])
def test_a_key_two_data_files_give_with_other_bytes_is_refused_naming_it(
    twins, mode, tmp_path, capsys
):
    (a, a_ptd), (c, c_ptd) = twins
    out = tmp_path / "every.pte"
    written = ["--inline"] if mode == "--inline" else ["--ptd-out", str(tmp_path / "every.ptd")]
    assert (
        main(
            [
                "merge",
                str(a),
                str(c),
                "-o",
                str(out),
                "--method",
                f"c={c}:forward",
                "--data",
                str(a_ptd),
                "--data",
                str(c_ptd),
                *written,
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'head.weight'" in err and str(a_ptd) in err and str(c_ptd) in err
    assert not out.exists() and not (tmp_path / "every.ptd").exists()


def test_share_refuses_a_key_two_data_files_give_with_other_bytes(twins, tmp_path, capsys):
    (a, a_ptd), (c, c_ptd) = twins
    assert (
        main(
            [
                "share",
                str(a),
                str(c),
                "--out",
                str(tmp_path / "shared"),
                "--data",
                str(a_ptd),
                "--data",
                str(c_ptd),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'head.weight'" in err and str(a_ptd) in err and str(c_ptd) in err
    assert not any((tmp_path / "shared").glob("*"))


def test_each_program_given_its_own_data_file_computes_with_its_own_weights(twins, tmp_path):
    out = tmp_path / "own.pte"
    data = [f"{pte}={ptd}" for pte, ptd in twins]
    merge_files(
        [pte for pte, _ in twins],
        out,
        data=data,
        inline=True,
        methods=[f"m{i}={pte}:forward" for i, (pte, _) in enumerate(twins)],
    )
    for number, (pte, ptd) in enumerate(twins):
        program, weights = pte.read_bytes(), ptd.read_bytes()  # alive while the module runs
        want = _load_for_executorch_from_buffer(program, weights).forward(INPUT)[0]
        for got in _run_every_loader(out, f"m{number}", INPUT):
            assert torch.equal(got, want)
    first, second = (_want_with(pte, ptd) for pte, ptd in twins)
    assert not torch.equal(first, second)  # the heads differ: a mix-up would show


def _want_with(pte: Path, ptd: Path) -> torch.Tensor:
    program, weights = pte.read_bytes(), ptd.read_bytes()  # alive while the module runs
    return _load_for_executorch_from_buffer(program, weights).forward(INPUT)[0]


class _Xor(torch.nn.Module):
    """ExecuTorch's XOR training example (`extension/training/examples/XOR`): a net and
    its loss, exported forward and backward."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(2, 10)
        self.linear2 = torch.nn.Linear(10, 2)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, label):
        pred = self.linear2(torch.sigmoid(self.linear(x)))
        return self.loss(pred, label), pred.detach().argmax(dim=1)


XOR_INPUTS = (
    torch.randn(1, 2, generator=torch.Generator().manual_seed(7)),
    torch.ones(1, dtype=torch.int64),
)


def _export_training(model: torch.nn.Module, directory: Path) -> tuple[Path, Path]:
    """`model` (an `_Xor`) exported for training with its weights mutable in a `.ptd`
    (`external_mutable_weights`), as ExecuTorch's Android test's xor.pte and xor.ptd
    are: (the .pte, the .ptd), named after `directory`."""
    from executorch.exir import ExecutorchBackendConfig, to_edge
    from torch.export.experimental import _export_forward_backward

    exported = _export_forward_backward(torch.export.export(model, XOR_INPUTS, strict=True))
    manager = to_edge(exported).to_executorch(
        ExecutorchBackendConfig(external_mutable_weights=True)
    )
    directory.mkdir()
    pte = directory / f"{directory.name}.pte"
    pte.write_bytes(manager.buffer)
    manager.write_tensor_data_to_file(str(directory))
    (ptd,) = directory.glob("*.ptd")
    return pte, ptd.rename(pte.with_suffix(".ptd"))


def _seeded_xor(seed: int) -> _Xor:
    torch.manual_seed(seed)
    return _Xor()


def _check_trains_as_before(inputs, out, methods) -> list:
    """Each of `methods` of `out` computes, through every loader, every output its input
    (with its .ptd) computes; returns the inputs' outputs."""
    wants = []
    for (pte, ptd), method in zip(inputs, methods, strict=True):
        program, weights = pte.read_bytes(), ptd.read_bytes()  # alive while the module runs
        want = _load_for_executorch_from_buffer(program, weights).forward(XOR_INPUTS)
        wants.append(want)
        for got in _run_every_loader_all(out, method, XOR_INPUTS):
            assert len(got) == len(want) and all(
                torch.equal(g, w) for g, w in zip(got, want, strict=True)
            )
    return wants


def test_mutable_weights_in_a_ptd_inline_as_mutable_data_and_train_as_before(tmp_path):
    inputs = [_export_training(_seeded_xor(seed), tmp_path / f"xor{seed}") for seed in (0, 1)]
    assert any(t.ref.space is DataSpace.EXTERNAL for t in read_pte(inputs[0][0]).tensors)
    out = tmp_path / "inline.pte"
    # Both name their weights `linear.weight`...: each input its own .ptd.
    merge_files(
        [pte for pte, _ in inputs],
        out,
        inline=True,
        data=[f"{pte}={ptd}" for pte, ptd in inputs],
        methods=[f"m{i}={pte}:forward" for i, (pte, _) in enumerate(inputs)],
    )
    merged = read_pte(out)
    assert not merged.entries[DataSpace.EXTERNAL] and audit_file(out).dead_bytes == 0
    # The initial weights are mutable data: the runtime copies them into the arena.
    assert sum(e.nbytes for e in merged.entries[DataSpace.MUTABLE].values()) == 2 * 208
    wants = _check_trains_as_before(inputs, out, ["m0", "m1"])
    assert not torch.equal(wants[0][2], wants[1][2])  # other weights: a mix-up would show


def test_share_keeps_a_training_weight_of_its_own_as_mutable_data(tmp_path):
    from emitter_filter.ondisk.share import share_files

    first = _seeded_xor(0)
    second = copy.deepcopy(first)
    with torch.no_grad():
        second.linear2.bias.add_(1.0)  # one weight of other bytes under the same name
    inputs = [_export_training(m, tmp_path / n) for m, n in ((first, "a"), (second, "b"))]
    share_files(
        [pte for pte, _ in inputs],
        tmp_path / "shared",
        min_bytes=1,
        ptd_paths=[f"{pte}={ptd}" for pte, ptd in inputs],
    )
    shared_ptd = tmp_path / "shared" / "shared.ptd"
    for pte, ptd in inputs:
        out = tmp_path / "shared" / pte.name
        # 'linear2.bias' is each program's own, in its .pte: its initial bytes mutable data.
        assert read_pte(out).entries[DataSpace.MUTABLE]
        # The bytes alive while their modules run.
        program, weights, old, old_weights = (
            out.read_bytes(),
            shared_ptd.read_bytes(),
            pte.read_bytes(),
            ptd.read_bytes(),
        )
        got = _load_for_executorch_from_buffer(program, weights).forward(XOR_INPUTS)
        want = _load_for_executorch_from_buffer(old, old_weights).forward(XOR_INPUTS)
        assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


def _run_every_loader_all(pte, method: str, inputs) -> list[list[torch.Tensor]]:
    """`_run_every_loader`, every output of the method."""
    data = pte.read_bytes()  # kept alive, with each program, while its method runs
    runtime = Runtime.get()
    outputs = [
        program.load_method(method).execute(list(inputs))
        for program in (runtime.load_program(str(pte)), runtime.load_program(data))
    ]
    for module in (_load_for_executorch(str(pte)), _load_for_executorch_from_buffer(data)):
        outputs.append(module.run_method(method, tuple(inputs)))
    return outputs


class _Add(torch.nn.Module):
    """ExecuTorch's hello-world model: x + y, no constants."""

    def forward(self, x, y):
        return x + y


ADD_INPUTS = (
    torch.randn(2, 64, generator=torch.Generator().manual_seed(5)),
    torch.randn(2, 64, generator=torch.Generator().manual_seed(6)),
)


def _in_constant_buffer_layout(pte: bytes) -> bytes:
    """`pte` as releases before 0.7 wrote a program without constants (executorch-rs's
    hello_world_add model.pte): the placeholder in `constant_buffer`, no constant segment
    offsets, so the runtime takes the deprecated path, off in ExecuTorch 1.5's wheels."""
    from emitter_filter.program.fbs_schemas import PROGRAM
    from tests.layouts import with_program_changed

    def change(program):
        program.constantSegment = PROGRAM.SubsegmentOffsets(segmentIndex=0, offsets=[])
        program.constantBuffer = [PROGRAM.Buffer(storage=[])]

    return with_program_changed(pte, change)


def test_an_input_in_the_constant_buffer_layout_merges_into_a_program_that_loads(tmp_path):
    add = export(_Add(), "portable", ADD_INPUTS)
    old = tmp_path / "add.pte"
    old.write_bytes(_in_constant_buffer_layout(add))
    with pytest.raises(RuntimeError):  # the runtime refuses the input itself
        _load_for_executorch_from_buffer(old.read_bytes()).forward(ADD_INPUTS)
    head = tmp_path / "head.pte"
    head.write_bytes(export(SETS["heads"]()[0], "portable"))
    out = tmp_path / "merged.pte"
    report = merge_files([old, head], out, methods=[f"add={old}:forward", f"head={head}:forward"])
    assert report.constant_buffer_inputs == (str(old),)
    assert "constant_buffer" in report.summary() and report.to_json()["constant_buffer_inputs"]
    fresh = tmp_path / "fresh.pte"
    fresh.write_bytes(add)  # the same program as ExecuTorch 1.5 writes it
    for method, inputs, want in (
        ("add", ADD_INPUTS, _want(fresh, ADD_INPUTS)),
        ("head", INPUT, _want(head, INPUT)),
    ):
        for got in _run_every_loader(out, method, inputs):
            assert torch.equal(got, want), method
    # prune, split and share of it write the layout the runtime accepts too.
    from emitter_filter.ondisk.prune import prune_file
    from emitter_filter.ondisk.share import share_files

    prune_file(old, tmp_path / "pruned.pte")
    split_file(out, tmp_path / "split.pte", ["add"])
    share_files([old, head], tmp_path / "shared")
    for path, method in (
        (tmp_path / "pruned.pte", "forward"),
        (tmp_path / "split.pte", "add"),
        (tmp_path / "shared" / "add.pte", "forward"),
    ):
        for got in _run_every_loader(path, method, ADD_INPUTS):
            assert torch.equal(got, _want(fresh, ADD_INPUTS)), path.name
