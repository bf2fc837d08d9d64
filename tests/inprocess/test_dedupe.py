"""`dedupe_constants`: tied weights stored once, loaded by ExecuTorch's own runtime.

Every case exports one seeded model three times (plain, `dedupe_constants=True`,
and with `prune_constants=True` too) and checks the deduplicated file against the
plain one in the portable runtime, with each loader users have.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.extension.pybindings.portable_lib import (
    _load_for_executorch,
    _load_for_executorch_from_buffer,
)
from executorch.runtime import Runtime

import emitter_filter
from emitter_filter._program_fbs.executorch_flatbuffer.DataSegment import DataSegmentT
from emitter_filter._program_fbs.executorch_flatbuffer.Program import Program
from emitter_filter.cli import main
from emitter_filter.errors import OutputFileError, PteFormatError
from emitter_filter.inprocess import hook
from emitter_filter.ondisk.analyse import dedupe_find
from emitter_filter.ondisk.analyse.stored_ranges import find_shared_ranges
from emitter_filter.ondisk.audit import audit_file
from emitter_filter.ondisk.dedupe import dedupe_file, dedupe_pte
from emitter_filter.ondisk.read.file_headers import extended_header_prefix, padded_header_length
from emitter_filter.ondisk.read.layout import pack_program
from emitter_filter.ondisk.read.read_pte import read_pte, read_pte_program
from emitter_filter.ondisk.write import output

VOCAB, DIM = 512, 64
TOKENS = torch.tensor([[1, 2, 3, 511]])


class TiedEmbedding(torch.nn.Module):
    """Embedding tied to the output head, as Gemma, Qwen, SmolLM and Llama 3.2 are.

    `portable_op` also reads the tied weight in a portable op (cumsum);
    `small_constant` puts a 20-byte constant before it in the constant segment, so
    the weight is not where its named-data alias needs it to be.
    """

    def __init__(self, portable_op: bool = False, small_constant: bool = False) -> None:
        super().__init__()
        self.small = torch.nn.Parameter(torch.randn(5)) if small_constant else None
        self.embedding = torch.nn.Embedding(VOCAB, DIM)
        self.head = torch.nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.embedding.weight
        self.portable_op = portable_op

    def forward(self, tokens):
        outputs = [self.head(self.embedding(tokens))]
        if self.portable_op:
            outputs.append(torch.cumsum(self.embedding.weight, 0)[tokens])
        if self.small is not None:
            outputs.append(torch.cumsum(self.small, 0))
        return tuple(outputs)


@dataclass(frozen=True)
class Exported:
    plain: bytes
    deduped: bytes
    pruned_deduped: bytes
    weight_bytes: int
    paths: dict[str, Path]
    report: emitter_filter.PruneReport


CASES = {
    "fp32": dict(dtype=torch.float32),
    "fp16": dict(dtype=torch.float16),
    "fp32_portable_op": dict(dtype=torch.float32, portable_op=True),
    "fp16_portable_op": dict(dtype=torch.float16, portable_op=True),
    "fp32_after_small_constant": dict(dtype=torch.float32, small_constant=True),
}
# Three exports each: the default run keeps one per concern, `-m slow` adds the rest.
_SLOW = {"fp16", "fp32_portable_op", "fp16_portable_op"}


def _export(model, config=None) -> object:
    exported = torch.export.export(model, (TOKENS,))
    edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
    return edge.to_executorch(config)


def _build(name: str, directory: Path) -> Exported:
    options = dict(CASES[name])
    dtype = options.pop("dtype")
    torch.manual_seed(0)
    model = TiedEmbedding(**options).to(dtype).eval()
    plain = _export(model).buffer
    deduped = _export(model, emitter_filter.ExecutorchBackendConfig(dedupe_constants=True))
    both = _export(
        model,
        emitter_filter.ExecutorchBackendConfig(prune_constants=True, dedupe_constants=True),
    )
    paths = {}
    for kind, data in (("plain", plain), ("deduped", deduped.buffer)):
        paths[kind] = directory / f"{name}.{kind}.pte"
        paths[kind].write_bytes(data)
    weight = model.embedding.weight
    return Exported(
        plain,
        deduped.buffer,
        both.buffer,
        weight.numel() * weight.element_size(),
        paths,
        emitter_filter.report(both),
    )


_built: dict[str, Exported] = {}


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """Builds a case once per module."""

    def get(name: str) -> Exported:
        if name not in _built:
            _built[name] = _build(name, tmp_path_factory.mktemp(name))
        return _built[name]

    yield get
    _built.clear()


@pytest.fixture(
    scope="module",
    params=[pytest.param(n, marks=pytest.mark.slow) if n in _SLOW else n for n in CASES],
)
def exported(request, build) -> Exported:
    return build(request.param)


def _outputs_by_loader(path: Path, data: bytes) -> dict[str, list[torch.Tensor]]:
    """forward(TOKENS) with the mmap file loader, a buffer (kept alive) and the Runtime API."""
    by_path = _load_for_executorch(str(path)).forward((TOKENS,))
    by_buffer = _load_for_executorch_from_buffer(data).forward((TOKENS,))
    program = Runtime.get().load_program(str(path))
    by_runtime = program.load_method("forward").execute([TOKENS])
    return {"path": list(by_path), "buffer": list(by_buffer), "runtime": list(by_runtime)}


def test_the_deduplicated_file_is_about_half_the_size(exported):
    saved = len(exported.plain) - len(exported.deduped)
    # The weight, give or take the segment alignment's padding (128 B).
    assert abs(saved - exported.weight_bytes) <= 128
    assert len(exported.deduped) < 0.55 * len(exported.plain)


def test_the_deduplicated_file_computes_bit_identically_with_every_loader(exported):
    reference = _outputs_by_loader(exported.paths["plain"], exported.plain)["path"]
    deduped = exported.deduped  # kept alive while the buffer loader runs
    for loader, outputs in _outputs_by_loader(exported.paths["deduped"], deduped).items():
        assert len(outputs) == len(reference), loader
        for got, want in zip(outputs, reference, strict=True):
            assert got.dtype == want.dtype and torch.equal(got, want), loader


def test_audit_reports_no_duplicated_bytes_and_the_shared_range(exported):
    before = audit_file(exported.plain)
    after = audit_file(exported.deduped)
    assert before.duplicated_bytes == exported.weight_bytes and before.shared == ()
    assert after.duplicated_bytes == 0
    assert after.shared_bytes == exported.weight_bytes
    (shared,) = after.shared
    assert [c.space for c in shared.copies] == ["constant", "named_data"]
    assert after.to_json()["shared"][0]["bytes"] == exported.weight_bytes


def test_every_aliased_range_keeps_the_segment_alignment(exported):
    pte = read_pte(exported.deduped)
    for shared in find_shared_ranges(pte):
        assert (shared.offset - pte.segment_base_offset) % 128 == 0


def test_prune_dedupe_on_disk_equals_the_in_process_file(exported, tmp_path, capsys):
    out = tmp_path / "out.pte"
    assert main(["prune", str(exported.paths["plain"]), "-o", str(out), "--dedupe"]) == 0
    assert out.read_bytes() == exported.pruned_deduped
    assert "deduplicated 1 named data" in capsys.readouterr().out
    alone = tmp_path / "alone.pte"
    dedupe_file(exported.paths["plain"], alone)
    assert alone.read_bytes() == exported.deduped


def test_the_report_gives_the_dedupe_saving_apart_from_the_pruning(exported):
    report = exported.report
    assert report.dropped_bytes == 0  # nothing dead in these models
    assert report.dedupe.saved_bytes == len(exported.plain) - len(exported.pruned_deduped)
    assert "deduplicated 1 named data" in report.summary()


def test_deduplicating_twice_changes_nothing(exported):
    again, report = dedupe_pte(exported.deduped)
    assert again is exported.deduped and report.shared == () and report.saved_bytes == 0


# --- files with nothing to deduplicate, and malformed aliasing -----------------------


class Untied(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(VOCAB, DIM)
        self.head = torch.nn.Linear(DIM, VOCAB)

    def forward(self, tokens):
        return self.head(self.embedding(tokens))


class LookAlike(torch.nn.Module):
    """A head whose weight equals the embedding's but for the last float of `row` (same
    length, prefix; the last row: the last bytes differ).

    With `tied`, the head is the embedding's weight after all and the look-alike is
    a second portable constant: the named data then has two candidates.
    """

    def __init__(self, tied: bool, row: int = -1) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(VOCAB, DIM)
        self.head = torch.nn.Linear(DIM, VOCAB, bias=False)
        with torch.no_grad():
            look_alike = self.embedding.weight.detach().clone()
            look_alike[row, -1] += 1.0
        if tied:
            self.head.weight = self.embedding.weight
            self.other = torch.nn.Parameter(look_alike)
        else:
            self.head.weight = torch.nn.Parameter(look_alike)
            self.other = None

    def forward(self, tokens):
        outputs = [self.head(self.embedding(tokens))]
        if self.other is not None:
            outputs.append(torch.cumsum(self.other, 0)[tokens])
        return tuple(outputs)


def test_bytes_that_differ_only_at_the_end_are_not_aliased():
    torch.manual_seed(0)
    model = LookAlike(tied=False).eval()
    plain = _export(model).buffer
    assert audit_file(plain).duplicated_bytes == 0
    deduped, report = dedupe_pte(plain)
    assert deduped is plain and report.shared == ()


def test_among_look_alike_constants_the_equal_one_is_aliased(tmp_path):
    torch.manual_seed(0)
    model = LookAlike(tied=True).eval()
    plain = _export(model).buffer
    deduped, report = dedupe_pte(plain)
    (shared,) = report.shared
    pte = read_pte(plain)
    weight = model.embedding.weight.detach().numpy().tobytes()
    constant = pte.entries[next(iter(pte.entries))][shared.copies[0].index]
    assert plain[constant.offset : constant.offset + constant.nbytes] == weight
    path = tmp_path / "model.pte"
    path.write_bytes(deduped)
    reference = _load_for_executorch_from_buffer(plain).forward((TOKENS,))
    for loader, outputs in _outputs_by_loader(path, deduped).items():
        for got, want in zip(outputs, reference, strict=True):
            assert torch.equal(got, want), loader


@pytest.fixture
def compare_while_writing(monkeypatch):
    """Every repeat is compared while the output is written (not only those of 1 MiB or
    more); yields the outcome of each write that did so (True: the repeats were equal)."""
    monkeypatch.setattr(dedupe_find, "_COMPARE_LATER", 1)
    outcomes = []
    real = output._write_confirmed

    def spy(*args, **kwargs):
        try:
            written = real(*args, **kwargs)
        except output.UnconfirmedOutput:
            outcomes.append(False)
            raise
        outcomes.append(True)
        return written

    monkeypatch.setattr(output, "_write_confirmed", spy)
    return outcomes


def test_a_repeat_compared_while_writing_gives_the_same_files(
    build, tmp_path, capsys, compare_while_writing
):
    built = build("fp32")
    out, alone = tmp_path / "out.pte", tmp_path / "alone.pte"
    assert main(["prune", str(built.paths["plain"]), "-o", str(out), "--dedupe"]) == 0
    dedupe_file(built.paths["plain"], alone)
    assert compare_while_writing == [True, True]
    assert out.read_bytes() == built.pruned_deduped
    assert alone.read_bytes() == built.deduped


def test_a_look_alike_found_different_while_writing_is_not_aliased(
    tmp_path, capsys, compare_while_writing
):
    # Same length, first and last bytes: only the compare made during the write sees
    # the difference; the file is then decided again and written as it is.
    torch.manual_seed(0)
    plain = _export(LookAlike(tied=False, row=VOCAB // 2).eval()).buffer
    src, out, alone = tmp_path / "in.pte", tmp_path / "out.pte", tmp_path / "alone.pte"
    src.write_bytes(plain)
    report = dedupe_file(src, alone)
    assert main(["prune", str(src), "-o", str(out), "--dedupe"]) == 0
    assert compare_while_writing == [False, False]
    assert report.shared == () and alone.read_bytes() == plain
    assert out.read_bytes() == plain
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alone.pte", "in.pte", "out.pte"]


@pytest.mark.parametrize("prune", [False, True], ids=["unpruned", "pruned"])
def test_a_model_with_nothing_duplicated_is_written_byte_for_byte(prune):
    torch.manual_seed(0)
    model = Untied().eval()
    plain = _export(model, emitter_filter.ExecutorchBackendConfig(prune_constants=prune))
    deduped = _export(
        model, emitter_filter.ExecutorchBackendConfig(prune_constants=prune, dedupe_constants=True)
    )
    assert deduped.buffer == plain.buffer
    assert emitter_filter.report(deduped).dedupe.saved_bytes == 0


def _set_segment(data: bytes, index: int, offset: int, size: int | None = None) -> bytes:
    """`data` with `Program.segments[index]` patched in place (its fields must be stored)."""
    segment = Program.GetRootAs(data, 0).Segments(index)
    for slot, value in ((4, offset), (6, size)):
        if value is not None:
            field = segment._tab.Offset(slot)
            assert field, f"field {slot} of segment {index} is not stored"
            at = segment._tab.Pos + field
            data = data[:at] + value.to_bytes(8, "little") + data[at + 8 :]
    return data


def test_ranges_that_overlap_without_being_the_same_are_malformed(build, tmp_path, capsys):
    deduped = build("fp32_after_small_constant").deduped
    pte = read_pte(deduped)
    (shared,) = find_shared_ranges(pte)
    named = next(c.index for c in shared.copies if c.space == "named_data")
    relative = shared.offset - pte.segment_base_offset
    broken = _set_segment(deduped, named, relative + 16)
    with pytest.raises(PteFormatError, match="overlaps .* without being the same range"):
        audit_file(broken)
    path = tmp_path / "broken.pte"
    path.write_bytes(broken)
    assert main(["audit", str(path)]) == 2
    assert "without being the same range" in capsys.readouterr().err
    # In the constant segment's padding (its first entry has 20 bytes), overlapping no entry.
    padding = _set_segment(deduped, named, 32, 16)
    with pytest.raises(PteFormatError, match="lies in the constant segment"):
        dedupe_pte(padding)


def _with_a_second_segment_over(data: bytes, index: int) -> bytes:
    """`data` with one more, unreferenced `Program.segments` entry: segment `index`'s range.

    A file whose writer already stored a segment once for two entries.
    """
    read = read_pte_program(data)
    pte, program, program_data = read.pte, read.program, read.program_data
    copy = DataSegmentT()
    copy.offset, copy.size = program.segments[index].offset, program.segments[index].size
    program.segments.append(copy)
    prefix, base = extended_header_prefix(
        pack_program(program, 16, 16),
        padded_header_length(program_data),
        128,
        len(data) - pte.segment_base_offset,
    )
    return prefix + bytes(base - len(prefix)) + data[pte.segment_base_offset :]


def test_a_segment_already_sharing_the_aliased_range_follows_it(build, tmp_path):
    plain = build("fp32").plain
    pte = read_pte(plain)
    (named,) = {e.segment_index for e in pte.named_data}
    shared_before = _with_a_second_segment_over(plain, named)
    (before,) = find_shared_ranges(read_pte(shared_before))
    assert [c.space for c in before.copies] == ["named_data", "segments"]

    deduped, _ = dedupe_pte(shared_before)
    (after,) = find_shared_ranges(read_pte(deduped))
    assert [c.space for c in after.copies] == ["constant", "named_data", "segments"]
    assert audit_file(deduped).duplicated_bytes == 0
    assert dedupe_pte(deduped)[0] is deduped
    path = tmp_path / "deduped.pte"
    path.write_bytes(deduped)
    want = _load_for_executorch_from_buffer(plain).forward((TOKENS,))
    for loader, outputs in _outputs_by_loader(path, deduped).items():
        assert all(torch.equal(a, b) for a, b in zip(outputs, want, strict=True)), loader


def test_dedupe_file_never_overwrites_its_input(build):
    path = build("fp32").paths["plain"]
    with pytest.raises(OutputFileError, match="never overwrites its input"):
        dedupe_file(path, path)


# --- the ways to turn it on -------------------------------------------------------------


def test_a_pruning_block_can_also_deduplicate():
    torch.manual_seed(0)
    model = TiedEmbedding().eval()
    with emitter_filter.pruning(dedupe_constants=True):
        inside = _export(model)
    with emitter_filter.pruning():
        pruned_only = _export(model)
    assert len(inside.buffer) < 0.55 * len(pruned_only.buffer)
    assert emitter_filter.report(inside).dedupe is not None
    assert emitter_filter.report(pruned_only).dedupe is None


def test_enable_dedupe_deduplicates_without_pruning_until_disabled():
    torch.manual_seed(0)
    model = TiedEmbedding().eval()
    hook.enable_dedupe()
    try:
        deduped = _export(model)
    finally:
        hook.disable_dedupe()
    plain = _export(model)
    assert len(deduped.buffer) < 0.55 * len(plain.buffer)
    report = emitter_filter.report(deduped)
    assert report.bytes_before == {} and report.summary() == report.dedupe.summary()
    with pytest.raises(LookupError):
        emitter_filter.report(plain)


@pytest.mark.slow
def test_the_environment_variable_deduplicates_every_program(tmp_path):
    script = (
        "import sys, torch, emitter_filter\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from tests.inprocess.test_dedupe import TiedEmbedding, _export\n"
        "torch.manual_seed(0)\n"
        "print(len(_export(TiedEmbedding().eval()).buffer))\n"
    )
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, emitter_filter.ENV_DEDUPE: "1"}
    result = subprocess.run(
        [sys.executable, "-c", script, root],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    size = int(result.stdout.split()[-1])
    torch.manual_seed(0)
    assert size < 0.55 * len(_export(TiedEmbedding().eval()).buffer)


def test_prune_dedupe_json_reports_the_shared_ranges(build, tmp_path, capsys):
    path = build("fp32").paths["plain"]
    out = tmp_path / "out.pte"
    assert main(["prune", str(path), "-o", str(out), "--dedupe", "--json"]) == 0
    form = json.loads(capsys.readouterr().out)
    assert form["bytes_after"] == out.stat().st_size
    assert form["dedupe"]["saved_bytes"] == form["bytes_before"] - form["bytes_after"]
    assert form["dedupe"]["shared"][0]["file"] == str(out)


def test_the_public_api_is_what_we_mean_it_to_be():
    from emitter_filter.ondisk import dedupe
    from emitter_filter.ondisk.analyse import stored_ranges

    assert set(dedupe.__all__) == {
        "DedupeReport",
        "dedupe_pte",
        "dedupe_pieces",
        "dedupe_output",
        "write_deduplicated",
        "dedupe_file",
    }
    assert {"SharedRange", "find_shared_ranges"} <= set(stored_ranges.__all__)
    assert {"dedupe_file", "DedupeReport", "ENV_DEDUPE"} <= set(emitter_filter.__all__)
    assert emitter_filter.dedupe_file is dedupe_file


class LinearWithDeadCopy(torch.nn.Module):
    """An XNNPACK linear whose weight an unused buffer repeats byte for byte (issue 19, 2)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(DIM, DIM)
        self.register_buffer("unused", self.linear.weight.detach().clone())

    def forward(self, x):
        return self.linear(x)


def test_dedupe_never_aliases_live_data_onto_a_dead_constant(tmp_path, capsys):
    torch.manual_seed(0)
    model = LinearWithDeadCopy().eval()
    inputs = (torch.randn(2, DIM),)
    data = _export_with(
        model, inputs, emitter_filter.ExecutorchBackendConfig(dedupe_constants=True)
    )
    # Nothing live repeats the dead buffer, so nothing is aliased.
    assert find_shared_ranges(read_pte(data)) == ()
    audit = audit_file(data)
    weight_bytes = DIM * DIM * 4
    assert audit.dead_bytes == weight_bytes
    path, pruned = tmp_path / "model.pte", tmp_path / "pruned.pte"
    path.write_bytes(data)
    assert main(["prune", str(path), "-o", str(pruned), "--json"]) == 0
    dropped = sum(d["bytes"] for d in json.loads(capsys.readouterr().out)["dropped"])
    assert dropped == audit.dead_bytes
    assert len(data) - pruned.stat().st_size >= dropped
    reference = model(*inputs)
    (got,) = _load_for_executorch(str(pruned)).forward(inputs)
    assert torch.allclose(got, reference, atol=1e-5)


def test_audit_never_counts_bytes_a_live_reference_shares_as_dead(tmp_path, capsys):
    """A file an older dedupe wrote: the live weight's segment reads the dead buffer's range."""
    torch.manual_seed(0)
    model = LinearWithDeadCopy().eval()
    inputs = (torch.randn(2, DIM),)
    plain = _export_with(model, inputs)
    pte = read_pte(plain)
    (unused,) = [e for i, e in pte.entries[next(iter(pte.entries))].items() if i]
    (named,) = {e.segment_index for e in pte.named_data if e.nbytes == unused.nbytes}
    data = _set_segment(plain, named, unused.offset - pte.segment_base_offset)
    assert find_shared_ranges(read_pte(data)) != ()
    audit = audit_file(data)
    assert audit.dead_bytes == 0
    path, pruned = tmp_path / "model.pte", tmp_path / "pruned.pte"
    path.write_bytes(data)
    assert main(["prune", str(path), "-o", str(pruned), "--json"]) == 0
    assert sum(d["bytes"] for d in json.loads(capsys.readouterr().out)["dropped"]) == 0
    (got,) = _load_for_executorch(str(pruned)).forward(inputs)
    assert torch.allclose(got, model(*inputs), atol=1e-5)


def _export_with(model, inputs, config=None) -> bytes:
    edge = to_edge_transform_and_lower(
        torch.export.export(model, inputs), partitioner=[XnnpackPartitioner()]
    )
    return edge.to_executorch(config).buffer


@pytest.mark.parametrize("alignment", [48, 96])
@pytest.mark.parametrize("prune", [False, True], ids=["unpruned", "pruned"])
def test_a_segment_alignment_not_a_power_of_two_is_kept(alignment, prune):
    """ExecuTorch takes any segment alignment; dedupe keeps it (issue 19, 3)."""
    torch.manual_seed(0)
    model = TiedEmbedding(small_constant=True).eval()
    options = dict(segment_alignment=alignment, prune_constants=prune)
    plain = _export(model, emitter_filter.ExecutorchBackendConfig(**options)).buffer
    deduped = _export(
        model, emitter_filter.ExecutorchBackendConfig(**options, dedupe_constants=True)
    ).buffer
    pte = read_pte(deduped)
    assert find_shared_ranges(pte) and len(deduped) < len(plain)
    assert pte.segment_base_offset % alignment == 0
    assert all(s.offset % alignment == 0 for s in pte.segments)
    want = _load_for_executorch_from_buffer(plain).forward((TOKENS,))
    got = _load_for_executorch_from_buffer(deduped).forward((TOKENS,))
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


@pytest.mark.parametrize("name", ["fp32", "fp32_after_small_constant"])
def test_upstream_round_trip_of_a_deduplicated_file_is_what_the_readme_says(build, name):
    """README: the plain file byte for byte unless dedupe inserted zeros (issue 19, 11)."""
    from executorch.exir._serialize._program import (
        deserialize_pte_binary,
        serialize_pte_binary,
    )

    exported = build(name)
    again = bytes(
        serialize_pte_binary(
            deserialize_pte_binary(exported.deduped), extract_delegate_segments=True
        )
    )
    plain, deduped = read_pte(exported.plain), read_pte(exported.deduped)
    inserted = (
        deduped.segments[deduped.constant_segment].size
        - plain.segments[plain.constant_segment].size
    )
    assert (inserted > 0) == (name == "fp32_after_small_constant")
    if inserted:
        assert again != exported.plain
    else:
        assert again == exported.plain
    want = _load_for_executorch_from_buffer(exported.plain).forward((TOKENS,))
    got = _load_for_executorch_from_buffer(again).forward((TOKENS,))
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


def test_the_hook_deduplicates_the_serializers_pieces_without_joining_them(build, monkeypatch):
    """Issue 20: no `bytes(cord)` of the whole file, and each weight piece reused, not copied."""
    from executorch.exir._serialize._cord import Cord

    joined = []
    real_bytes = Cord.__bytes__

    def spy(self):
        joined.append(len(self))
        return real_bytes(self)

    monkeypatch.setattr(Cord, "__bytes__", spy)
    torch.manual_seed(0)
    model = TiedEmbedding().eval()
    exported = torch.export.export(model, (TOKENS,))
    edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
    manager = edge.to_executorch(emitter_filter.ExecutorchBackendConfig(dedupe_constants=True))
    cord = manager._pte_data  # what the serializer returned; .buffer would join it
    assert joined == [], "the serialized file was joined into one bytes object"
    # The constant and the kept named data are the serializer's own pieces, not copies.
    weight = model.embedding.weight.numel() * 4
    assert [len(p) for p in cord._buffers].count(weight) == 1
    assert manager.buffer == build("fp32").deduped
