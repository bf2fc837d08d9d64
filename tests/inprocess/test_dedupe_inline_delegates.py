"""Dedupe of a program whose delegate blobs are inline (`extract_delegate_segments=False`).

The blobs then live in the program flatbuffer (`BackendDelegateInlineData.data`,
force-aligned to `delegate_alignment`), so repacking the program must honour that
alignment, as ExecuTorch's serializer does. The deduplicated file must keep every
blob where its alignment needs it and compute bit-identically in the runtime.
"""

from __future__ import annotations

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.extension.pybindings.portable_lib import (
    _load_for_executorch,
    _load_for_executorch_from_buffer,
)

import emitter_filter
from emitter_filter._program_fbs.executorch_flatbuffer.Program import Program
from emitter_filter.ondisk.analyse.stored_ranges import find_shared_ranges
from emitter_filter.ondisk.dedupe import dedupe_pte
from emitter_filter.ondisk.read.read_pte import read_pte

VOCAB, DIM = 256, 32
TOKENS = torch.tensor([[1, 2, 3, 255]])


class TiedEmbedding(torch.nn.Module):
    """An embedding tied to the output head: the weight is a constant and XNNPACK named data."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(VOCAB, DIM)
        self.head = torch.nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.embedding.weight

    def forward(self, tokens):
        return self.head(self.embedding(tokens))


def _export(delegate_alignment: int, **options) -> bytes:
    torch.manual_seed(0)
    model = TiedEmbedding().eval()
    edge = to_edge_transform_and_lower(
        torch.export.export(model, (TOKENS,)), partitioner=[XnnpackPartitioner()]
    )
    config = emitter_filter.ExecutorchBackendConfig(
        extract_delegate_segments=False, delegate_alignment=delegate_alignment, **options
    )
    return edge.to_executorch(config).buffer


def _inline_blob_offsets(data: bytes) -> list[int]:
    """Where each inline delegate blob's bytes start in the file."""
    program = Program.GetRootAs(data, 0)
    offsets = []
    for index in range(program.BackendDelegateDataLength()):
        blob = program.BackendDelegateData(index)
        if blob.DataLength():
            offsets.append(blob._tab.Vector(blob._tab.Offset(4)))
    return offsets


@pytest.fixture(
    scope="module", params=[16, 64], ids=["delegate_alignment_16", "delegate_alignment_64"]
)
def files(request):
    plain = _export(request.param)
    in_process = _export(request.param, dedupe_constants=True)
    return request.param, plain, in_process


def test_the_model_has_inline_blobs_and_something_to_deduplicate(files):
    _, plain, in_process = files
    assert _inline_blob_offsets(plain)
    assert len(in_process) < len(plain)
    assert find_shared_ranges(read_pte(in_process))


def test_dedupe_keeps_every_inline_blob_aligned(files):
    alignment, plain, in_process = files
    on_disk, _ = dedupe_pte(plain)
    assert on_disk == in_process
    before, after = _inline_blob_offsets(plain), _inline_blob_offsets(on_disk)
    assert [o % alignment for o in before] == [0] * len(before)
    assert len(after) == len(before)
    assert [o % alignment for o in after] == [0] * len(after), (before, after)


def test_dedupe_keeps_constants_and_named_data_aligned(files):
    _, plain, in_process = files
    pte = read_pte(in_process)
    for shared in find_shared_ranges(pte):
        assert (shared.offset - pte.segment_base_offset) % 128 == 0
    entries = read_pte(plain).entries
    for space, by_index in pte.entries.items():
        for index, entry in by_index.items():
            if entry.offset >= 0 and index in entries[space]:
                before = entries[space][index].offset - read_pte(plain).segment_base_offset
                assert (entry.offset - pte.segment_base_offset) % 16 == before % 16


def test_the_deduplicated_file_computes_bit_identically(files, tmp_path):
    _, plain, in_process = files
    reference = _load_for_executorch_from_buffer(plain).forward((TOKENS,))
    path = tmp_path / "deduped.pte"
    path.write_bytes(in_process)
    for outputs in (
        _load_for_executorch_from_buffer(in_process).forward((TOKENS,)),
        _load_for_executorch(str(path)).forward((TOKENS,)),
    ):
        assert len(outputs) == len(reference)
        for got, want in zip(outputs, reference, strict=True):
            assert got.dtype == want.dtype and torch.equal(got, want)
