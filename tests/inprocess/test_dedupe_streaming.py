"""Dedupe at the cost of one compare (issue 20): no weight copied, read whole or written twice.

- In process, the serializer's buffers are compared where they lie: no read of
  a weight's size goes through `ByteSource.read`.
- A named-data blob ExecuTorch keeps on disk (`FileBackedData`, its own class)
  goes through the hook with dedupe on without being loaded: read a chunk at a
  time where it is compared, and the new `Cord` holds the blob object itself.
- `prune --dedupe` decides the pruned file, deduplicates it and writes it once.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.exir._serialize import _cord
from executorch.exir._serialize._named_data_store import NamedDataStore
from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer

import emitter_filter
from emitter_filter.ondisk.prune import prune_file
from emitter_filter.ondisk.read.byte_source import ByteSource
from emitter_filter.ondisk.write import output

# executorch 1.5 lets a Cord hold named data kept on disk; 1.4 has no such class.
FileBackedData = getattr(_cord, "FileBackedData", None)
needs_file_backed = pytest.mark.skipif(
    FileBackedData is None, reason="this executorch has no FileBackedData (1.5 has)"
)

# 2048 x 256 fp32: 2 MiB, twice the chunk a file's range is compared in.
VOCAB, DIM = 2048, 256
TOKENS = torch.tensor([[1, 2, 3, 2047]])


class TiedWithHead(torch.nn.Module):
    """A tied embedding (its weight twice: constant and XNNPACK named data) and a second
    linear whose weight is stored once."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(VOCAB, DIM)
        self.head = torch.nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.embedding.weight
        self.mix = torch.nn.Linear(DIM, DIM, bias=False)

    def forward(self, tokens):
        return self.head(self.mix(self.embedding(tokens)))


def _export(config):
    torch.manual_seed(0)
    model = TiedWithHead().eval()
    exported = torch.export.export(model, (TOKENS,))
    edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
    return edge.to_executorch(config)


DEDUPE = dict(prune_constants=True, dedupe_constants=True)


def test_the_compare_reads_no_weight_through_the_byte_source(monkeypatch):
    reads = []
    real_read = ByteSource.read

    def spy(self, offset, size, what):
        reads.append(size)
        return real_read(self, offset, size, what)

    monkeypatch.setattr(ByteSource, "read", spy)
    manager = _export(emitter_filter.ExecutorchBackendConfig(**DEDUPE))
    assert emitter_filter.report(manager).dedupe.saved_bytes == VOCAB * DIM * 4
    # Headers, the program and 32-byte prefixes; before, the compare read 1 MiB at a time.
    assert reads and max(reads) < 64 << 10, sorted(reads)[-3:]


@pytest.fixture
def file_backed(tmp_path, monkeypatch):
    """Every named-data blob handed to the serializer is a `FileBackedData` in `tmp_path`;
    returns the blobs made, and every (path, bytes) read from their files."""
    made, reads = [], []
    real_output = NamedDataStore.get_named_data_store_output

    def on_disk(self):
        store = real_output(self)
        buffers = []
        for buffer in store.buffers:
            if isinstance(buffer, bytes):  # The store may be asked again: once is enough.
                path = tmp_path / f"blob{len(made)}.bin"
                path.write_bytes(buffer)
                made.append(FileBackedData(str(path)))
                buffer = made[-1]
            buffers.append(buffer)
        return dataclasses.replace(store, buffers=buffers)

    real_pread, real_preadv = os.pread, os.preadv

    def record(fd, count):
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path.startswith(str(tmp_path)):
            reads.append((path, count))

    def pread(fd, count, offset):
        record(fd, count)
        return real_pread(fd, count, offset)

    def preadv(fd, buffers, offset):
        record(fd, sum(len(b) for b in buffers))
        return real_preadv(fd, buffers, offset)

    def loaded(self, *args):
        raise AssertionError(f"{self._path} was loaded whole")

    monkeypatch.setattr(NamedDataStore, "get_named_data_store_output", on_disk)
    monkeypatch.setattr(os, "pread", pread)
    monkeypatch.setattr(os, "preadv", preadv)
    monkeypatch.setattr(FileBackedData, "to_bytes", loaded)
    monkeypatch.setattr(FileBackedData, "write_to_file", loaded)
    return made, reads


@needs_file_backed
def test_a_file_backed_blob_goes_through_the_hook_without_being_loaded(file_backed, monkeypatch):
    made, reads = file_backed
    manager = _export(emitter_filter.ExecutorchBackendConfig(**DEDUPE))
    report = emitter_filter.report(manager)
    assert report.dedupe.saved_bytes == VOCAB * DIM * 4
    # The tied blob was read a chunk at a time where it was compared (after its 32-byte
    # prefix); the other blob, whose length no constant has, was not read at all.
    assert reads and max(count for _, count in reads) <= 1 << 20
    by_file = {}
    for path, count in reads:
        by_file[path] = by_file.get(path, 0) + count
    # Twice: by the dedupe's compare, and by the proof of its output (`proof.py`).
    tied = [p for p, n in by_file.items() if n == 32 + 2 * VOCAB * DIM * 4]
    assert len(tied) == 1 and len(by_file) == 1, by_file
    # The kept blob is in the new Cord as itself, not as bytes.
    kept = [b for b in manager._pte_data._buffers if isinstance(b, FileBackedData)]
    assert len(kept) == 1 and kept[0] in made and kept[0]._path not in tied

    monkeypatch.undo()  # Now the file may be joined, as saving it does.
    data = manager.buffer
    plain = _export(emitter_filter.ExecutorchBackendConfig(**DEDUPE)).buffer
    assert data == plain
    reference = _export(emitter_filter.ExecutorchBackendConfig()).buffer
    # Both buffers stay alive while their programs run.
    got = _load_for_executorch_from_buffer(data).forward((TOKENS,))
    want = _load_for_executorch_from_buffer(reference).forward((TOKENS,))
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


def test_prune_dedupe_writes_the_file_once(tmp_path, monkeypatch):
    plain = tmp_path / "plain.pte"
    plain.write_bytes(_export(emitter_filter.ExecutorchBackendConfig()).buffer)
    writes = []
    real_write = output.write_operations

    def spy(writer, *args):
        writes.append(writer.fd)
        return real_write(writer, *args)

    monkeypatch.setattr(output, "write_operations", spy)
    report = prune_file(plain, tmp_path / "out.pte", dedupe=True)
    assert len(writes) == 1
    assert report.dedupe.saved_bytes == VOCAB * DIM * 4
    assert report.bytes_after == (tmp_path / "out.pte").stat().st_size
    assert (tmp_path / "out.pte").read_bytes() == _export(
        emitter_filter.ExecutorchBackendConfig(**DEDUPE)
    ).buffer
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.pte", "plain.pte"]


def test_the_program_keeps_its_bytes_but_the_numbers_that_change():
    from emitter_filter.ondisk.dedupe import dedupe_pte
    from emitter_filter.ondisk.read.read_pte import read_pte

    plain = _export(emitter_filter.ExecutorchBackendConfig()).buffer
    deduped, _ = dedupe_pte(plain)
    before, after = read_pte(plain), read_pte(deduped)
    assert after.program_size == before.program_size
    assert after.segment_base_offset == before.segment_base_offset
    # Only 8-byte numbers changed: the named data's segment offset, the data size.
    changed = [i for i in range(before.program_size) if plain[i] != deduped[i]]
    assert changed and len({i // 8 for i in changed}) <= 4, changed


def test_where_a_changed_number_is_not_stored_the_program_is_packed_again():
    from emitter_filter.ondisk.read.layout import patch_program
    from emitter_filter.ondisk.read.read_pte import read_pte_program

    plain = _export(emitter_filter.ExecutorchBackendConfig()).buffer
    read = read_pte_program(plain)
    pte, program = read.pte, read.program
    head = plain[: pte.segment_base_offset]
    first = pte.segments[0]
    assert first.offset == pte.segment_base_offset  # Offset 0: the packer leaves it out.
    ranges = {s.index: (s.offset - pte.segment_base_offset, s.size) for s in pte.segments}
    data_size = len(plain) - pte.segment_base_offset
    assert patch_program(head, program, ranges, [], data_size) == head
    moved = {**ranges, 0: (128, first.size)}
    assert patch_program(head, program, moved, [], data_size) is None


def test_the_packed_fallback_writes_the_same_program(monkeypatch):
    from emitter_filter.ondisk import dedupe, dedupe_rewrite

    plain = _export(emitter_filter.ExecutorchBackendConfig()).buffer
    patched, report = dedupe.dedupe_pte(plain)
    packs = []
    real_pack = dedupe_rewrite.pack_program
    monkeypatch.setattr(dedupe_rewrite, "patch_program", lambda *args: None)
    monkeypatch.setattr(dedupe_rewrite, "pack_program", lambda *a: packs.append(a) or real_pack(*a))
    packed, packed_report = dedupe.dedupe_pte(plain)
    assert len(packs) == 1 and packed_report.shared == report.shared
    want = _load_for_executorch_from_buffer(patched).forward((TOKENS,))
    got = _load_for_executorch_from_buffer(packed).forward((TOKENS,))
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
