"""`prune` of a deduplicated file keeps its segment alignment (issue 19, finding 8).

In a deduplicated file the named data that repeats a constant points into the
constant segment, so its offset follows no segment alignment. The alignment is
read from the segments that own their bytes (`layout.pte_segment_alignments`);
it used to be read from all of them, fit none, and fell back to 128.
"""

from __future__ import annotations

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer

import emitter_filter
from emitter_filter.ondisk.prune import prune_file
from emitter_filter.ondisk.read.read_pte import read_pte

TOKENS = torch.tensor([[1, 2, 3]])


class TiedWithUnusedBuffer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(256, 32)
        self.head = torch.nn.Linear(32, 256, bias=False)
        self.head.weight = self.embedding.weight
        self.register_buffer("unused", torch.arange(64, dtype=torch.float32))

    def forward(self, tokens):
        return self.head(self.embedding(tokens))


@pytest.mark.parametrize("segment_alignment", [4096, 1024])
def test_prune_of_a_deduplicated_file_keeps_its_segment_alignment(tmp_path, segment_alignment):
    torch.manual_seed(0)
    edge = to_edge_transform_and_lower(
        torch.export.export(TiedWithUnusedBuffer().eval(), (TOKENS,)),
        partitioner=[XnnpackPartitioner()],
    )
    config = emitter_filter.ExecutorchBackendConfig(
        segment_alignment=segment_alignment, dedupe_constants=True
    )
    deduped = edge.to_executorch(config).buffer
    assert read_pte(deduped).segment_base_offset % segment_alignment == 0
    source, out = tmp_path / "deduped.pte", tmp_path / "pruned.pte"
    source.write_bytes(deduped)
    report = prune_file(source, out)
    assert report.dropped_values == 1
    pruned = out.read_bytes()
    pte = read_pte(pruned)
    assert pte.segment_base_offset % segment_alignment == 0
    for segment in pte.segments:
        assert (segment.offset - pte.segment_base_offset) % segment_alignment == 0
    reference = _load_for_executorch_from_buffer(deduped).forward((TOKENS,))
    outputs = _load_for_executorch_from_buffer(pruned).forward((TOKENS,))
    assert all(torch.equal(got, want) for got, want in zip(outputs, reference, strict=True))


def test_prune_of_a_deduplicated_file_keeps_the_sharing_and_never_grows(tmp_path):
    """Issue 20: pruning used to write the aliased named data out again, doubling the file."""
    from emitter_filter.ondisk.analyse.stored_ranges import find_shared_ranges

    torch.manual_seed(0)
    edge = to_edge_transform_and_lower(
        torch.export.export(TiedWithUnusedBuffer().eval(), (TOKENS,)),
        partitioner=[XnnpackPartitioner()],
    )
    deduped = edge.to_executorch(emitter_filter.ExecutorchBackendConfig(dedupe_constants=True))
    source, out = tmp_path / "deduped.pte", tmp_path / "pruned.pte"
    source.write_bytes(deduped.buffer)
    report = prune_file(source, out)
    assert report.dropped_values == 1
    pruned = out.read_bytes()
    assert len(pruned) < len(deduped.buffer)
    assert find_shared_ranges(read_pte(pruned))
    reference = _load_for_executorch_from_buffer(deduped.buffer).forward((TOKENS,))
    outputs = _load_for_executorch_from_buffer(pruned).forward((TOKENS,))
    assert all(torch.equal(got, want) for got, want in zip(outputs, reference, strict=True))
