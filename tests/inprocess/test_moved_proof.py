"""`moved_proof.moved_only`, the hook's proof of its dedupe: a program whose only changed
bytes are the numbers that place data is proven from the ranges they place, and anything
else is left to the full proof (`proof.prove_rewrite`), which never disagrees with it."""

from __future__ import annotations

import random
import struct

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

import emitter_filter
from emitter_filter.errors import InvalidOutputError
from emitter_filter.ondisk.analyse import moved_proof, proof
from emitter_filter.ondisk.analyse.moved_proof import moved_only
from emitter_filter.ondisk.analyse.proof import Side, key_sizes, prove_rewrite
from emitter_filter.ondisk.dedupe import dedupe_pte
from emitter_filter.ondisk.read.byte_source import ByteSource
from emitter_filter.ondisk.read.read_pte import read_pte_program
from emitter_filter.program.fbs_schemas import PROGRAM
from emitter_filter.program.reachability import DataSpace

VOCAB, DIM = 64, 16


class _Tied(torch.nn.Module):
    """A tied embedding and head, with a biased layer between: XNNPACK named data that
    repeats a constant, and named data that does not."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(VOCAB, DIM)
        self.mix = torch.nn.Linear(DIM, DIM)
        self.head = torch.nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.embedding.weight

    def forward(self, tokens):
        return self.head(self.mix(self.embedding(tokens)))


class _TiedCounting(_Tied):
    """`_Tied` with a buffer it adds to: its initial state is mutable data, in a segment of
    its own that a dedupe moves too."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("count", torch.arange(4, dtype=torch.float32))

    def forward(self, tokens):
        self.count.add_(1)
        return super().forward(tokens) + self.count.sum()


def _lowered(model: type[_Tied] = _Tied):
    torch.manual_seed(0)
    exported = torch.export.export(model().eval(), (torch.tensor([[1, 2, 3]]),))
    return to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])


@pytest.fixture(scope="module", params=["tied", "tied with mutable data"])
def files(request) -> tuple[bytes, bytes]:
    """(the program as ExecuTorch serializes it, its dedupe)."""
    if request.param == "tied":
        serialized = _lowered().to_executorch(ExecutorchBackendConfig()).buffer
    else:
        config = ExecutorchBackendConfig(passes=[InitializedMutableBufferPass(["count"])])
        serialized = _lowered(_TiedCounting).to_executorch(config).buffer
        pte = read_pte_program(ByteSource([serialized], "x")).pte
        assert pte.mutable_segment is not None and pte.entries[DataSpace.MUTABLE]
    deduplicated, report = dedupe_pte(serialized)
    assert report.shared
    return serialized, deduplicated


def _moved_only(serialized: bytes, new: bytes, sizes=None) -> bool:
    source, output = ByteSource([serialized], "in"), ByteSource([new], "out")
    read = read_pte_program(source)
    return moved_only(read, source, output, key_sizes(read, source) if sizes is None else sizes)


def _full_proof_refuses(serialized: bytes, new: bytes) -> bool:
    try:
        prove_rewrite([Side(ByteSource([serialized], "in"))], Side(ByteSource([new], "out")))
    except InvalidOutputError:
        return True
    return False


def test_a_dedupe_is_proven_from_the_ranges_it_moved(files):
    serialized, deduplicated = files
    assert _moved_only(serialized, deduplicated)
    assert not _full_proof_refuses(serialized, deduplicated)


def test_the_hook_proves_its_dedupe_without_the_full_proof(monkeypatch):
    def refused(*args, **kwargs):
        raise AssertionError("the full proof ran")

    monkeypatch.setattr(proof, "prove_rewrite", refused)
    manager = _lowered().to_executorch(
        emitter_filter.ExecutorchBackendConfig(prune_constants=True, dedupe_constants=True)
    )
    assert emitter_filter.report(manager).dedupe.shared


def _segment_places(data: bytes) -> list[tuple[int | None, int | None]]:
    read = read_pte_program(ByteSource([data], "x"))
    return PROGRAM.fields_at(data, read.program.segments, ("offset", "size"))


def _changed(data: bytes, at: int, value: bytes) -> bytes:
    return data[:at] + value + data[at + len(value) :]


def _cases(deduplicated: bytes) -> dict[str, bytes]:
    """Outputs a dedupe gone wrong could write, each reading other bytes than its input."""
    read = read_pte_program(ByteSource([deduplicated], "x"))
    pte = read.pte
    constant = pte.entries[next(s for s in pte.entries if s.value == "constant")]
    weight = max(constant.values(), key=lambda e: e.nbytes)
    named = [e for e in pte.named_data if pte.segments[e.segment_index].offset != weight.offset]
    operator = deduplicated.index(b"aten::")
    aliased = next(e.segment_index for e in pte.named_data if e not in named)
    offset_at = _segment_places(deduplicated)[aliased][0]
    assert offset_at is not None
    moved = struct.unpack_from("<Q", deduplicated, offset_at)[0] + 4
    mutable = list(pte.entries[DataSpace.MUTABLE].values())
    cases = {
        "a weight byte": _changed(
            deduplicated, weight.offset, bytes([~deduplicated[weight.offset] & 0xFF])
        ),
        "a named-data byte": _changed(deduplicated, named[0].offset, b"\xff\xff\xff\xff"),
        "an aliased segment 4 bytes off": _changed(
            deduplicated, offset_at, struct.pack("<Q", moved)
        ),
        "an operator's name": _changed(deduplicated, operator, b"prim::"),
    }
    if mutable:
        at = mutable[0].offset
        cases["a mutable initial value"] = _changed(
            deduplicated, at, bytes([~deduplicated[at] & 0xFF])
        )
    return cases


@pytest.mark.parametrize(
    "case",
    [
        "a weight byte",
        "a named-data byte",
        "an aliased segment 4 bytes off",
        "an operator's name",
        "a mutable initial value",
    ],
)
def test_what_reads_other_bytes_is_not_proven_and_the_full_proof_refuses_it(files, case):
    serialized, deduplicated = files
    cases = _cases(deduplicated)
    if case not in cases:
        pytest.skip("no mutable data in this program")
    wrong = cases[case]
    assert not _moved_only(serialized, wrong)
    assert _full_proof_refuses(serialized, wrong)


def test_a_key_read_past_its_segment_is_left_to_the_full_proof(files):
    serialized, deduplicated = files
    source = ByteSource([serialized], "in")
    read = read_pte_program(source)
    sizes = {e.key: e.nbytes + 1 for e in read.pte.named_data}
    assert not _moved_only(serialized, deduplicated, sizes)


def test_a_place_that_does_not_hold_the_decoded_number_is_not_trusted(files, monkeypatch):
    serialized, deduplicated = files
    fields_at = PROGRAM.fields_at

    def shifted(buffer, tables, fields):
        return [
            tuple(None if at is None else at + 8 for at in pair)
            for pair in fields_at(buffer, tables, fields)
        ]

    monkeypatch.setattr(PROGRAM, "fields_at", shifted)
    assert not _moved_only(serialized, deduplicated)


def test_the_fast_proof_never_accepts_what_the_full_proof_refuses(files):
    """Seeded single-byte changes anywhere in the deduplicated file (the head four times
    as often): wherever `moved_only` proves one, the full proof accepts it too."""
    serialized, deduplicated = files
    base = read_pte_program(ByteSource([deduplicated], "x")).pte.segment_base_offset
    generator = random.Random(49)
    proven = refused = 0
    for _ in range(250):
        at = (
            generator.randrange(base)
            if generator.random() < 0.8
            else generator.randrange(len(deduplicated))
        )
        wrong = _changed(
            deduplicated, at, bytes([deduplicated[at] ^ (1 << generator.randrange(8))])
        )
        if _moved_only(serialized, wrong):
            proven += 1
            assert not _full_proof_refuses(serialized, wrong), f"byte {at}"
        else:
            refused += 1
    assert proven and refused


def test_the_numbers_it_reads_are_where_the_dedupe_writes_them(files):
    """The places `moved_only` reads the new numbers from are the only bytes of the
    program a dedupe changed."""
    serialized, deduplicated = files
    read = read_pte_program(ByteSource([serialized], "x"))
    base = read.pte.segment_base_offset
    places = moved_proof._places(read, serialized[:base])
    assert places is not None
    changed = {i for i in range(base) if serialized[i] != deduplicated[i]}
    assert changed and changed <= {p + i for p in places.positions() for i in range(8)}
