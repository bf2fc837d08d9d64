"""The hook proves its dedupe of what it serialized (`hook._prove_deduplicated`): a dedupe
that would make a method read other bytes is caught without a runtime, and the program
is written pruned only, under the fail-safe."""

from __future__ import annotations

import logging

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower

import emitter_filter
import emitter_filter.ondisk.dedupe
from emitter_filter.errors import InvalidOutputError

VOCAB, DIM = 64, 16


class _Tied(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(VOCAB, DIM)
        self.head = torch.nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.embedding.weight

    def forward(self, tokens):
        return self.head(self.embedding(tokens))


def _export(**fields):
    torch.manual_seed(0)
    tokens = torch.tensor([[1, 2, 3]])
    exported = torch.export.export(_Tied().eval(), (tokens,))
    edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
    return edge.to_executorch(emitter_filter.ExecutorchBackendConfig(**fields))


def _flipped(original):
    """`dedupe_pieces` whose output's largest part (the constant segment) has its first
    byte flipped: every index and offset right, one weight wrong."""

    def dedupe(pieces, alignment, compared=None, **read):
        parts, report = original(pieces, alignment, compared, **read)
        largest = max(range(len(parts)), key=lambda n: len(parts[n]))
        changed = bytearray(parts[largest])
        changed[0] ^= 0xFF
        return [*parts[:largest], bytes(changed), *parts[largest + 1 :]], report

    return dedupe


def test_the_hooks_dedupe_is_proven(caplog):
    with caplog.at_level(logging.WARNING, logger="emitter_filter"):
        manager = _export(prune_constants=True, dedupe_constants=True)
    assert emitter_filter.report(manager).dedupe.shared
    assert not [r for r in caplog.records if r.name.startswith("emitter_filter")]


def test_a_dedupe_that_reads_other_bytes_is_written_pruned_only(monkeypatch, caplog):
    pruned = _export(prune_constants=True).buffer
    dedupe = emitter_filter.ondisk.dedupe
    monkeypatch.setattr(dedupe, "dedupe_pieces", _flipped(dedupe.dedupe_pieces))
    with caplog.at_level(logging.WARNING, logger="emitter_filter"):
        manager = _export(prune_constants=True, dedupe_constants=True)
    assert manager.buffer == pruned
    [warning] = [r.getMessage() for r in caplog.records if r.name.startswith("emitter_filter")]
    assert "written pruned only" in warning and "method 'forward' reads other bytes" in warning


def test_strict_mode_raises_the_proofs_refusal(monkeypatch):
    dedupe = emitter_filter.ondisk.dedupe
    monkeypatch.setattr(dedupe, "dedupe_pieces", _flipped(dedupe.dedupe_pieces))
    with pytest.raises(InvalidOutputError, match="reads other bytes"):
        _export(prune_constants=True, dedupe_constants=True, prune_strict=True)
