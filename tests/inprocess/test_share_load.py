"""Programs exported separately, written by `share` with one `.ptd`, loaded and run.

Each set (`tests.model_sets`) is exported from random weights (fixed seeds): (a) one backbone
with two different heads, (c) one base model with two LoRA-style adapters,
each portable and lowered to XNNPACK. Every program of the shared set, loaded
with the shared `.ptd` by every loader the release has, computes bit for bit
what its original computes; the backbone is stored once.
"""

from __future__ import annotations

import inspect

import pytest
import torch
from executorch.extension.pybindings.portable_lib import (
    _load_for_executorch,
    _load_for_executorch_from_buffer,
)
from executorch.runtime import Runtime

from emitter_filter.ondisk.audit_set import audit_set
from emitter_filter.ondisk.read.read_pte import read_pte
from emitter_filter.ondisk.share import share_files
from emitter_filter.program.reachability import DataSpace
from tests.model_sets import INPUT, SETS, export


@pytest.fixture(
    scope="module",
    params=[(s, b) for s in SETS for b in ("portable", "xnnpack")],
    ids=lambda p: f"{p[0]}-{p[1]}",
)
def shared_set(request, tmp_path_factory):
    """The set's originals, and `share`'s output for them."""
    name, backend = request.param
    root = tmp_path_factory.mktemp(f"{name}-{backend}")
    originals = []
    for number, model in enumerate(SETS[name]()):
        path = root / f"program{number}.pte"
        path.write_bytes(export(model, backend))
        originals.append(path)
    report = share_files(originals, root / "out")
    return originals, root / "out", report, backend


#: `Runtime.load_program` takes a data file from executorch 1.5 on; the pybindings in 1.4 too.
_RUNTIME_TAKES_DATA = "data_path" in inspect.signature(Runtime.load_program).parameters


def _run_all_loaders(pte, ptd) -> list[torch.Tensor]:
    """`forward` on INPUT through every loader the release has, the shared .ptd as data."""
    program_bytes, data_bytes = pte.read_bytes(), ptd.read_bytes()  # kept alive while used
    outputs = []
    if _RUNTIME_TAKES_DATA:
        method = Runtime.get().load_program(str(pte), data_path=str(ptd)).load_method("forward")
        outputs.append(method.execute(list(INPUT))[0])
    outputs.append(_load_for_executorch(str(pte), str(ptd)).forward(INPUT)[0])
    module = _load_for_executorch_from_buffer(program_bytes, data_bytes)
    outputs.append(module.forward(INPUT)[0])
    return outputs


def test_every_program_loaded_with_the_shared_ptd_computes_what_its_original_computes(
    shared_set,
):
    originals, out, report, _ = shared_set
    ptd = out / "shared.ptd"
    assert ptd.exists() and report.shared_contents > 0
    for original in originals:
        data = original.read_bytes()
        want = _load_for_executorch_from_buffer(data).forward(INPUT)[0]
        for got in _run_all_loaders(out / original.name, ptd):
            assert torch.equal(got, want), original.name


def test_the_backbone_is_stored_once(shared_set):
    originals, out, report, backend = shared_set
    weights = 64 * 128 * 4 + 128 * 128 * 4  # the two backbone weights, fp32
    # Every program stored the backbone; now the .ptd stores it once.
    assert report.shared_bytes >= weights
    assert report.saved_bytes >= weights * (len(originals) - 1) - 4096
    for original in originals:
        pte = read_pte(out / original.name, [out / "shared.ptd"])
        if backend == "portable":
            assert sum(1 for t in pte.tensors if t.ref.space is DataSpace.EXTERNAL) >= 2
        kept = [e for e in pte.named_data if e.file == pte.path]
        assert sum(e.nbytes for e in kept) < weights


def test_the_audit_of_the_set_is_clean(shared_set):
    originals, out, _, _ = shared_set
    before = audit_set(originals, [])
    assert before.duplicated_bytes >= 64 * 128 * 4 + 128 * 128 * 4
    after = audit_set([out / p.name for p in originals], [out / "shared.ptd"])
    assert after.dead_bytes == 0 and after.shared == ()


def test_share_again_on_its_output_changes_nothing(shared_set, tmp_path):
    originals, out, _, _ = shared_set
    again = share_files([out / p.name for p in originals], tmp_path, ptd_paths=[out / "shared.ptd"])
    assert again.shared_contents == 0
    for path in [*(out / p.name for p in originals), out / "shared.ptd"]:
        assert (tmp_path / path.name).read_bytes() == path.read_bytes()


def test_a_program_loaded_without_the_shared_ptd_fails_in_the_runtime(shared_set):
    originals, out, _, backend = shared_set
    program = Runtime.get().load_program(str(out / originals[0].name))
    with pytest.raises(RuntimeError, match="Failed to load method forward"):
        program.load_method("forward")


def test_explain_of_the_set_shows_what_share_stores_once(shared_set):
    from emitter_filter.ondisk.explain_set import explain_set

    originals, out, report, _ = shared_set
    before = explain_set(originals)
    # Exactly the contents share moves (at least --min-bytes, 1,024, long), stored again in
    # another file: the one count explain, audit and share give.
    twice = sum(
        p.nbytes
        for p in before.parts
        if p.status == "duplicated"
        and any(not c.startswith(p.file.rsplit("/", 1)[-1] + ":") for c in p.copies)
    )
    assert twice == audit_set(originals, []).duplicated_bytes == report.shared_bytes
    assert twice > 64 * 128 * 4
    after = explain_set([out / p.name for p in originals], [out / "shared.ptd"])
    assert sum(p.nbytes for p in after.parts) == after.file_bytes
    assert not [p for p in after.parts if p.status == "duplicated"]
    assert audit_set([out / p.name for p in originals], [out / "shared.ptd"]).duplicated_bytes == 0


class _KeywordSpotting(torch.nn.Module):
    """A small DS-CNN as ExecuTorch's Arduino KeywordSpotting example has: a first
    convolution, depthwise and pointwise blocks, then a classifier; weights of a few KB,
    biases and the depthwise kernels under share's 1,024 B."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        torch.manual_seed(5)
        self.first = torch.nn.Conv2d(1, 64, (10, 4), stride=(2, 2), padding=(5, 1))
        self.depthwise = torch.nn.Conv2d(64, 64, 3, padding=1, groups=64)
        self.pointwise = torch.nn.Conv2d(64, 64, 1)
        torch.manual_seed(5 + classes)
        self.classify = torch.nn.Linear(64, classes)

    def forward(self, x):
        x = self.pointwise(self.depthwise(self.first(x).relu()).relu()).relu()
        return self.classify(x.mean(dim=(2, 3)))


def test_explain_audit_and_share_count_the_same_bytes_on_a_keyword_spotting_pair(tmp_path, capsys):
    """Two versions of a keyword spotter with one feature extractor: explain and audit count
    as stored twice exactly what share stores once, and 0 on share's output."""
    from emitter_filter.cli import main
    from emitter_filter.ondisk.explain_set import explain_set

    inputs = (torch.randn(1, 1, 49, 10, generator=torch.Generator().manual_seed(2)),)
    ptes = []
    for name, classes in (("model", 12), ("model_v2", 4)):
        ptes.append(tmp_path / f"{name}.pte")
        ptes[-1].write_bytes(export(_KeywordSpotting(classes), "portable", inputs))
    before = explain_set(ptes)
    report = share_files(ptes, tmp_path / "out")
    twice = sum(p.nbytes for p in before.parts if p.status == "duplicated")
    small = [p for p in before.parts if p.storage == "constant" and 0 < p.nbytes < 1024]
    assert small, "the pair has contents under --min-bytes, which share leaves where they are"
    assert 0 < twice == audit_set(ptes, []).duplicated_bytes == report.shared_bytes
    assert main(["audit", *map(str, ptes)]) == 0
    assert f"the 2 programs: {twice:,} B stored in more than one file" in capsys.readouterr().out
    out = [tmp_path / "out" / p.name for p in ptes]
    after = explain_set(out, [tmp_path / "out" / "shared.ptd"])
    assert not [p for p in after.parts if p.status == "duplicated"]
    assert audit_set(out, [tmp_path / "out" / "shared.ptd"]).duplicated_bytes == 0


def _export_with_ptd(model, root, name) -> tuple:
    """`model` exported portable with its weights in a `.ptd` of its own
    (`external_constants=True`), as `root/name.pte` and `root/name.ptd`."""
    from executorch.exir import ExecutorchBackendConfig, to_edge

    manager = to_edge(torch.export.export(model.eval(), INPUT)).to_executorch(
        ExecutorchBackendConfig(external_constants=True)
    )
    pte = root / f"{name}.pte"
    pte.write_bytes(manager.buffer)
    (root / name).mkdir()
    manager.write_tensor_data_to_file(str(root / name))
    (ptd,) = (root / name).glob("*.ptd")  # ExecuTorch's own name: the same for both
    return pte, ptd


@pytest.fixture(scope="module")
def heads_with_their_ptd(tmp_path_factory):
    """Two heads on one backbone, exported apart, each with its `.ptd`: both name their
    weights alike (`head.weight` is a [10, 128] tensor in one, [3, 128] in the other)."""
    root = tmp_path_factory.mktemp("heads-ptd")
    return [_export_with_ptd(model, root, f"head{n}") for n, model in enumerate(SETS["heads"]())]


def test_programs_with_their_own_ptd_share_what_is_equal_and_keep_what_differs(
    heads_with_their_ptd, tmp_path
):
    from emitter_filter.ondisk.read.read_ptd import read_ptd

    before = {p: p.read_bytes() for pair in heads_with_their_ptd for p in pair}
    data = [f"{pte}={ptd}" for pte, ptd in heads_with_their_ptd]
    report = share_files([pte for pte, _ in heads_with_their_ptd], tmp_path, ptd_paths=data)
    assert {p: p.read_bytes() for p in before} == before, "an input was modified"
    backbone = 64 * 128 * 4 + 128 * 128 * 4
    assert report.saved_bytes >= backbone
    assert [p.own_keys for p in report.programs] == [("head.bias", "head.weight")] * 2
    shared = read_ptd(tmp_path / "shared.ptd")
    assert not [key for key in shared.named_data if key.startswith("head.")]
    assert sum(e.nbytes for e in shared.named_data.values()) == backbone + 2 * 128 * 4
    for (pte, ptd), _program in zip(heads_with_their_ptd, report.programs, strict=True):
        want = _load_for_executorch(str(pte), str(ptd)).forward(INPUT)[0]
        for got in _run_all_loaders(tmp_path / pte.name, tmp_path / "shared.ptd"):
            assert torch.equal(got, want), pte.name
        # The head is in the program now, under the name it was exported with.
        kept = read_pte(tmp_path / pte.name, [tmp_path / "shared.ptd"])
        names = {t.name for t in kept.tensors if t.ref.space is DataSpace.CONSTANT}
        assert names == {"head.weight", "head.bias"}
    audit = audit_set(
        [tmp_path / pte.name for pte, _ in heads_with_their_ptd], [tmp_path / "shared.ptd"]
    )
    assert audit.dead_bytes == 0 and audit.shared == ()


def test_the_ptd_beside_each_program_is_its_own(heads_with_their_ptd, tmp_path):
    paired = tmp_path / "paired"
    share_files(
        [pte for pte, _ in heads_with_their_ptd],
        paired,
        ptd_paths=[f"{pte}={ptd}" for pte, ptd in heads_with_their_ptd],
    )
    beside = []
    for pte, ptd in heads_with_their_ptd:
        (tmp_path / pte.name).write_bytes(pte.read_bytes())
        (tmp_path / pte.with_suffix(".ptd").name).write_bytes(ptd.read_bytes())
        beside.append(tmp_path / pte.name)
    share_files(beside, tmp_path / "out")
    assert _bytes_of(tmp_path / "out") == _bytes_of(paired)


def test_explain_and_audit_of_such_a_set_count_what_share_stores_once(
    heads_with_their_ptd, tmp_path
):
    """Each program with its own `.ptd` (given, or beside it): the tools agree on the count."""
    from emitter_filter.ondisk.explain_set import explain_set
    from emitter_filter.ondisk.read.read_ptd import read_ptd

    ptes = [pte for pte, _ in heads_with_their_ptd]
    data = [f"{pte}={ptd}" for pte, ptd in heads_with_their_ptd]
    before, audit = explain_set(ptes, data), audit_set(ptes, data)
    report = share_files(ptes, tmp_path / "out", ptd_paths=data)
    twice = sum(p.nbytes for p in before.parts if p.status == "duplicated")
    assert twice == audit.duplicated_bytes == report.shared_bytes > 64 * 128 * 4
    assert (
        sum(p.nbytes for p in before.parts)
        == before.file_bytes
        == sum(path.stat().st_size for pair in heads_with_their_ptd for path in pair)
    )
    # Each program reads all of its own .ptd: `head.weight` of one is not the other's.
    assert [p.ptd_bytes for p in audit.programs] == [
        sum(e.nbytes for e in read_ptd(ptd).named_data.values()) for _, ptd in heads_with_their_ptd
    ]
    assert audit.dead_bytes == 0
    for pte, ptd in heads_with_their_ptd:
        (tmp_path / pte.name).write_bytes(pte.read_bytes())
        (tmp_path / pte.with_suffix(".ptd").name).write_bytes(ptd.read_bytes())
    beside = explain_set([tmp_path / pte.name for pte in ptes])
    assert sum(p.nbytes for p in beside.parts if p.status == "duplicated") == twice
    out = [tmp_path / "out" / pte.name for pte in ptes]
    after = explain_set(out, [tmp_path / "out" / "shared.ptd"])
    assert not [p for p in after.parts if p.status == "duplicated"]


def _bytes_of(directory) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


class _TiedWithShared(torch.nn.Module):
    """An embedding tied to the output head (its own weights), on a projection every
    program of the set has: lowered to XNNPACK, the embedding is stored twice in it."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.projection = torch.nn.Linear(32, 32)
        torch.manual_seed(seed)
        self.embedding = torch.nn.Embedding(256, 32)
        self.head = torch.nn.Linear(32, 256, bias=False)
        self.head.weight = self.embedding.weight

    def forward(self, tokens):
        return self.head(self.projection(self.embedding(tokens)))


def test_share_dedupe_also_stores_what_repeats_within_a_program_once(tmp_path):
    tokens = (torch.tensor([[1, 2, 3, 255]]),)
    originals = []
    for seed in (1, 2):
        originals.append(tmp_path / f"tied{seed}.pte")
        originals[-1].write_bytes(export(_TiedWithShared(seed), "xnnpack", tokens))
    plain = share_files(originals, tmp_path / "plain")
    report = share_files(originals, tmp_path / "out", dedupe=True)
    embedding = 256 * 32 * 4
    assert plain.shared_contents > 0 and plain.deduplicated_bytes == 0
    assert report.deduplicated_bytes >= 2 * embedding
    assert report.bytes_after == plain.bytes_after - report.deduplicated_bytes
    assert f"{report.deduplicated_bytes:,} B stored once within programs" in report.summary()
    for original in originals:
        data = original.read_bytes()  # alive while the module runs
        want = _load_for_executorch_from_buffer(data).forward(tokens)[0]
        pte, ptd = tmp_path / "out" / original.name, tmp_path / "out" / "shared.ptd"
        program_bytes, data_bytes = pte.read_bytes(), ptd.read_bytes()
        got = [
            _load_for_executorch(str(pte), str(ptd)).forward(tokens)[0],
            _load_for_executorch_from_buffer(program_bytes, data_bytes).forward(tokens)[0],
        ]
        if _RUNTIME_TAKES_DATA:
            method = Runtime.get().load_program(str(pte), data_path=str(ptd)).load_method("forward")
            got.append(method.execute(list(tokens))[0])
        assert all(torch.equal(g, want) for g in got), original.name
    audit = audit_set(
        [tmp_path / "out" / p.name for p in originals], [tmp_path / "out" / "shared.ptd"]
    )
    assert audit.dead_bytes == 0 and audit.duplicated_bytes == 0
