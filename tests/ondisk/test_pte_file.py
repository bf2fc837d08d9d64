"""The file reader: same references as the in-memory program, cheap, strict about bad files."""

from __future__ import annotations

import subprocess
import sys

import pytest

from emitter_filter.errors import PteFormatError
from emitter_filter.ondisk.read.read_pte import read_pte
from emitter_filter.program.reachability import DataSpace

CASES = ("plain", "external", "xnnpack", "mutated")


def _program_of(pte_path):
    from executorch.exir._serialize._program import deserialize_pte_binary

    return deserialize_pte_binary(pte_path.read_bytes())


@pytest.mark.parametrize("case", CASES)
def test_plan_refs_match_those_of_the_deserialized_program(built, case):
    from emitter_filter.inprocess.prune_emitted import collect_plan_refs

    program = _program_of(built[case].pte).program
    expected = [collect_plan_refs(plan) for plan in program.execution_plan]
    found = read_pte(built[case].pte, built[case].ptds).plans
    assert [p.name for p in found] == [p.name for p in expected]
    for got, want in zip(found, expected, strict=True):
        assert got.num_values == want.num_values
        assert list(got.roots) == list(want.roots)
        assert {k: list(v) for k, v in got.list_items.items()} == {
            k: list(v) for k, v in want.list_items.items()
        }
        assert dict(got.data_refs) == dict(want.data_refs)


@pytest.mark.parametrize("case", ["plain", "xnnpack", "mutated"])
def test_constant_entry_sizes_are_the_bytes_the_serializer_wrote(built, case):
    pte = read_pte(built[case].pte)
    storage = [len(b.storage) for b in _program_of(built[case].pte).program.constant_buffer]
    sizes = [pte.entries[DataSpace.CONSTANT][i].nbytes for i in range(len(storage))]
    # The deserializer keeps the alignment padding; entries a tensor uses are exact.
    used = {t.ref.index for t in pte.tensors if t.ref.space is DataSpace.CONSTANT}
    for index in used:
        assert storage[index] - 16 < sizes[index] <= storage[index]
    assert len(pte.entries[DataSpace.CONSTANT]) == len(storage)


def test_external_entries_are_sized_and_located_from_the_ptd(built):
    case = built["external"]
    pte = read_pte(case.pte, case.ptds)
    ptd_bytes = case.ptds[0].read_bytes()
    names = {t.ref.index: t.name for t in pte.tensors}
    import torch

    state = {
        "lin.weight": None,
        "lin.bias": None,
        "unused": torch.arange(32.0),
        "odd": torch.ones(5),
    }
    for index, entry in pte.entries[DataSpace.EXTERNAL].items():
        assert entry.file == str(case.ptds[0])
        blob = ptd_bytes[entry.offset : entry.offset + entry.nbytes]
        expected = state[names[index]]
        if expected is not None:
            assert blob == expected.numpy().tobytes()


def test_xnnpack_delegate_uses_exactly_the_named_data_keys(built):
    pte = read_pte(built["xnnpack"].pte)
    (delegate,) = pte.delegates
    assert [user.backend_id for user in delegate.users] == ["XnnpackBackend"]
    assert delegate.named_keys == {entry.key for entry in pte.named_data}
    assert pte.unreferenced_segments == ()


def test_reading_a_pte_imports_neither_torch_nor_executorch(built):
    code = (
        "import sys\n"
        "from emitter_filter.ondisk.audit import audit_file\n"
        f"audit_file({str(built['xnnpack'].pte)!r})\n"
        f"audit_file({str(built['external'].pte)!r},"
        f" {[str(p) for p in built['external'].ptds]!r})\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'executorch'))\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _corrupt(data: bytes, offset: int, value: bytes) -> bytes:
    return data[:offset] + value + data[offset + len(value) :]


BAD_FILES = {
    "not a pte": (lambda d: b"hello, this is not a flatbuffer at all" * 4, "not a PTE file"),
    "truncated": (lambda d: d[: len(d) // 2], "truncated"),
    "wrong identifier": (lambda d: _corrupt(d, 4, b"ET99"), "wrong flatbuffer identifier"),
    "segment outside file": (
        # Cut the segment short, and the extended header's total with it.
        lambda d: _corrupt(d, 32, bytes(8))[:-64],
        "outside the file",
    ),
    "empty": (lambda d: b"", "not a PTE file"),
}


@pytest.mark.parametrize("damage, message", BAD_FILES.values(), ids=BAD_FILES.keys())
def test_malformed_file_is_rejected_with_the_file_and_the_problem(built, tmp_path, damage, message):
    path = tmp_path / "bad.pte"
    path.write_bytes(damage(built["plain"].pte.read_bytes()))
    with pytest.raises(PteFormatError, match=message) as error:
        read_pte(path)
    assert str(path) in str(error.value)
    assert "\n" not in str(error.value)


def test_ptd_without_the_programs_external_constants_is_rejected(built):
    # The pruned .ptd lacks the dead buffers the dirty .pte still names.
    with pytest.raises(PteFormatError, match="does not match"):
        read_pte(built["external"].pte, built["external"].pruned_ptds)


def test_a_pte_is_not_accepted_as_a_ptd(built):
    with pytest.raises(PteFormatError, match="a .pte program, not a .ptd data file"):
        read_pte(built["plain"].pte, [built["plain"].pte])
