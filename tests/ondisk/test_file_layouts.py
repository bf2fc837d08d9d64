"""`audit` and `prune` on every layout ExecuTorch has written, with `flatbuffers` alone.

The files are built in code (`tests/layouts.py`): the layout ExecuTorch 1.5.1
writes, and the same programs written as other producers write them (every
default field written out, the 24-byte extended header of older releases,
other segment alignments and header padding, no extended header with a
placeholder-only `constant_buffer`), plus `.ptd` files of the early-2025 schema.
Nothing here imports torch or executorch; `test_prune_file_layouts_run.py` runs the
same kind of files in ExecuTorch's runtime.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from emitter_filter._program_fbs.executorch_flatbuffer.Buffer import BufferT
from emitter_filter._program_fbs.executorch_flatbuffer.Program import ProgramT
from emitter_filter._program_fbs.flat_tensor_flatbuffer.FlatTensor import FlatTensorT
from emitter_filter.cli import main
from emitter_filter.errors import PteFormatError
from emitter_filter.ondisk.audit import audit_file
from emitter_filter.ondisk.prune import prune_file, read_layout
from emitter_filter.ondisk.read.read_pte import read_pte, read_pte_program
from emitter_filter.ondisk.write.ptd_writer import pack_flat_tensor
from emitter_filter.program.reachability import DataSpace
from tests.layouts import (
    LIVE,
    build_constants,
    build_program,
    old_flat_tensor,
    pack,
    ptd_file,
    relayout,
    without,
)

pytestmark = pytest.mark.filetools

# (kwargs of `relayout`, or None for the layout `build_program` writes), per producer.
PRODUCERS = {
    "executorch-1.5.1": None,
    "every-default-written": {"force_defaults": True},
    "24-byte-header": {"header_length": 24},
    "aligned-4096-header-64": {"segment_alignment": 4096, "padded": 64},
    "aligned-16-defaults-written": {"segment_alignment": 16, "force_defaults": True},
}
WHERE = ("segment", "external", "placeholder")
CASES = [
    pytest.param(where, producer, id=f"{where}-{producer}")
    for where in WHERE
    for producer in PRODUCERS
    # Without segment data there is no extended header and no segment to align.
    if where != "placeholder" or producer in ("executorch-1.5.1", "every-default-written")
]


def _files(tmp_path: Path, name: str, where: str, producer: str, dead: bool):
    built = build_program(dead=dead, where=where)
    layout = PRODUCERS[producer]
    pte = tmp_path / f"{name}.pte"
    pte.write_bytes(built.pte if layout is None else relayout(built.pte, **layout))
    ptds = []
    if built.ptd is not None:
        (tmp_path / name).mkdir()
        ptds = [tmp_path / name / "weights.ptd"]
        ptds[0].write_bytes(built.ptd)
    return pte, ptds


def _prune(tmp_path: Path, pte: Path, ptds, name: str):
    out = tmp_path / f"{name}-out"
    out.mkdir()
    report = prune_file(pte, out / "model.pte", ptds, out)
    return out / "model.pte", sorted(out.glob("*.ptd")), report


def _canonical(pte: bytes) -> bytes:
    """The program flatbuffer packed again by the generated object API: equal iff same program."""
    program = read_pte_program(pte).program
    program.segments = None
    return pack(ProgramT.InitFromPackedBuf(pack(program), 0))


def _bytes(*paths: Path) -> list[bytes]:
    return [p.read_bytes() for p in paths]


@pytest.mark.parametrize("where, producer", CASES)
def test_a_file_with_nothing_dead_is_written_byte_for_byte(tmp_path, where, producer):
    pte, ptds = _files(tmp_path, "clean", where, producer, dead=False)
    assert audit_file(pte, ptds).dead_bytes == 0
    out, out_ptds, report = _prune(tmp_path, pte, ptds, "clean")
    assert report.dropped == () and report.dropped_values == 0
    if where == "placeholder":
        _assert_constant_segment_layout(out)
    else:
        assert _bytes(out, *out_ptds) == _bytes(pte, *ptds)


def _assert_constant_segment_layout(out: Path) -> None:
    """What prune writes of a placeholder-only `constant_buffer`: the runtime takes that
    deprecated path only when the constant segment has no offsets, and ExecuTorch 1.5's
    wheels refuse it; so the placeholder is the constant segment's, as 1.5 writes it."""
    program = read_pte_program(out).program
    assert list(program.constantSegment.offsets) == [0] and not program.constantBuffer


@pytest.mark.parametrize("where, producer", CASES)
def test_a_file_with_something_dead_is_the_clean_file_in_the_layout_read_back(
    tmp_path, where, producer
):
    dirty, dirty_ptds = _files(tmp_path, "dirty", where, producer, dead=True)
    audit = audit_file(dirty, dirty_ptds)
    assert audit.dead_bytes == (24 if where != "placeholder" else 0)
    out, out_ptds, report = _prune(tmp_path, dirty, dirty_ptds, "dirty")
    assert report.dropped_values == 1
    assert audit_file(out, out_ptds).dead_bytes == 0

    # What prune keeps of the input's layout: segment alignment, header length
    # and padding, as read back; what it cannot: a producer's own field order
    # and vtables. Where the offsets allow other values than those it was
    # written with, those write this very input too.
    layout = PRODUCERS[producer] or {}
    read = read_layout(dirty, dirty_ptds)
    read_back = dict(
        layout,
        segment_alignment=read.segment_alignment,
        header_length=read.header_length,
        padded=read.header_padded_length,
    )
    if where != "placeholder":
        written = relayout(build_program(dead=True, where=where).pte, **read_back)
        assert written == dirty.read_bytes()
    clean = build_program(dead=False, where=where)
    if where == "placeholder":
        _assert_constant_segment_layout(out)
    else:
        expected = relayout(clean.pte, **dict(read_back, force_defaults=False))
        assert _canonical(out.read_bytes()) == _canonical(expected)
        assert out.read_bytes() == expected
    assert _bytes(*out_ptds) == ([clean.ptd] if clean.ptd else [])

    pte = read_pte(out, out_ptds)
    (plan,) = pte.plans
    assert plan.num_values == 3
    if where == "segment":
        (entry,) = [e for i, e in pte.entries[DataSpace.CONSTANT].items() if i]
        assert out.read_bytes()[entry.offset : entry.offset + entry.nbytes] == LIVE
    if where == "external":
        (entry,) = pte.entries[DataSpace.EXTERNAL].values()
        assert out_ptds[0].read_bytes()[entry.offset : entry.offset + entry.nbytes] == LIVE


@pytest.mark.parametrize("where, producer", CASES)
def test_prune_of_its_own_output_changes_nothing(tmp_path, where, producer):
    dirty, dirty_ptds = _files(tmp_path, "dirty", where, producer, dead=True)
    out, out_ptds, _ = _prune(tmp_path, dirty, dirty_ptds, "once")
    again, again_ptds, report = _prune(tmp_path, out, out_ptds, "twice")
    assert report.dropped == () and report.dropped_values == 0
    assert _bytes(again, *again_ptds) == _bytes(out, *out_ptds)


programs = st.lists(
    st.binary(min_size=1, max_size=24).map(lambda b: b * 4), min_size=1, max_size=6
).flatmap(
    lambda constants: st.tuples(
        st.just(constants),
        st.frozensets(st.integers(0, len(constants) - 1)),
        st.fixed_dictionaries(
            {
                "tensor_alignment": st.sampled_from([1, 4, 16, 64]),
                "segment_alignment": st.sampled_from([1, 8, 16, 128, 4096]),
                "header_length": st.sampled_from([24, 32]),
                "padded": st.sampled_from([32, 64]),
                "force_defaults": st.booleans(),
            }
        ),
    )
)


@settings(
    max_examples=200, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(programs)
def test_random_programs_in_random_layouts_prune_to_the_clean_program(tmp_path_factory, program):
    """Written by a producer (`build_constants`) with any layout, pruned: what it writes without
    the dead constants, with the layout read back, which writes the very same input."""
    constants, dead, layout = program
    directory = tmp_path_factory.mktemp("random")
    dirty = directory / "dirty.pte"
    dirty.write_bytes(build_constants(constants, dead, **layout))
    out, _, report = _prune(directory, dirty, [], "out")
    assert report.dropped_values == len(dead)
    if not dead:
        assert out.read_bytes() == dirty.read_bytes()
    assert audit_file(out).dead_bytes == 0
    clean = dict(layout, force_defaults=False)
    if layout["force_defaults"]:
        # Every default written is no layout ExecuTorch's serializer writes: same program.
        expected = build_constants(without(constants, dead), frozenset(), **clean)
        assert _canonical(out.read_bytes()) == _canonical(expected)
    elif dead:
        read = read_layout(dirty)
        read_back = dict(
            clean,
            tensor_alignment=read.tensor_alignment,
            header_length=read.header_length,
            segment_alignment=read.segment_alignment,
            padded=read.header_padded_length,
        )
        assert build_constants(constants, dead, **read_back) == dirty.read_bytes()
        expected = build_constants(without(constants, dead), frozenset(), **read_back)
        assert out.read_bytes() == expected
    again, _, _ = _prune(directory, out, [], "again")
    assert again.read_bytes() == out.read_bytes()


def test_a_placeholder_only_constant_buffer_is_a_program_without_constants(tmp_path):
    pte, _ = _files(tmp_path, "p", "placeholder", "executorch-1.5.1", dead=False)
    audit = audit_file(pte)
    assert audit.spaces["constant"].total == 0 and audit.dead_bytes == 0


def test_real_inline_constants_are_refused_in_one_line_naming_the_file(tmp_path):
    program = read_pte_program(build_program(dead=False, where="placeholder").pte).program
    inline = BufferT()
    inline.storage = LIVE
    program.constantBuffer.append(inline)
    path = tmp_path / "inline.pte"
    path.write_bytes(pack(program))
    with pytest.raises(PteFormatError, match="constants inline in Program.constant_buffer") as e:
        read_pte(path)
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_a_ptd_of_executorch_0_6_is_refused_naming_the_file_offset_and_layout(tmp_path):
    pte, _ = _files(tmp_path, "x", "external", "executorch-1.5.1", dead=False)
    ptd = tmp_path / "old.ptd"
    ptd.write_bytes(old_flat_tensor())
    with pytest.raises(PteFormatError) as error:
        audit_file(pte, [ptd])
    message = str(error.value)
    assert message.startswith(f"{ptd}: offset ") and "\n" not in message
    assert "FlatTensor table with 4 fields" in message and "ExecuTorch 0.6" in message
    assert error.value.offset is not None and 0 < error.value.offset < ptd.stat().st_size


def test_a_ptd_of_a_newer_version_is_refused(tmp_path):
    table = FlatTensorT()
    table.version = 1
    path = tmp_path / "new.ptd"
    path.write_bytes(ptd_file(pack_flat_tensor(table), [], [], 128))
    pte, _ = _files(tmp_path, "x", "external", "executorch-1.5.1", dead=False)
    with pytest.raises(PteFormatError, match="FlatTensor version 1 is newer than the supported 0"):
        audit_file(pte, [path])


# flatc's output for FlatTensor(version=0, segments=[(0, 16), (128, 24)], named_data=[
# ("lin.weight", 0, TensorLayout(FLOAT, [2, 2], [0, 1])), ("blob", 1, None), ("alias", 0, None)])
# from ExecuTorch 1.5.1's `_serialize_to_flatbuffer` (test_flat_tensor_writer.py compares
# many more inputs with it where executorch is installed).
FLATC_OUTPUT = bytes.fromhex(
    "140000004654303100000a000c000000040008000a000000a80000000400000003000000500000002c000000"
    "0c0000000000060008000400060000000400000005000000616c69617300000008000c000400080008000000"
    "080000000100000004000000626c6f6200000a000e000400000008000a000000380000001000000000000a00"
    "1000070008000c000a00000000000006100000000400000002000000000100000200000002000000020000000a"
    "0000006c696e2e776569676874000002000000300000000c0000000800180004000c00080000008000000000"
    "00000018000000000000000000000008000c0000000400080000001000000000000000"
)


def test_the_ptd_writer_writes_what_flatc_writes():
    assert pack_flat_tensor(FlatTensorT.InitFromPackedBuf(FLATC_OUTPUT, 0)) == FLATC_OUTPUT


@pytest.mark.parametrize("before", [True, False], ids=["before", "after"])
def test_verbose_is_accepted_before_and_after_the_subcommand(tmp_path, capsys, before):
    pte, _ = _files(tmp_path, "v", "segment", "executorch-1.5.1", dead=False)
    argv = ["-v", "audit", str(pte)] if before else ["audit", str(pte), "-v"]
    assert main(argv) == 0
    assert "0 dead" in capsys.readouterr().out


# Runs in a fresh interpreter in which torch and executorch cannot be imported,
# as in a venv with only flatbuffers installed.
_WITHOUT_TORCH = """
import importlib.machinery, sys
ABSENT = ("torch", "executorch", "numpy")
find_spec = importlib.machinery.PathFinder.find_spec
def absent(cls, name, *args, **kwargs):
    return None if name.split(".")[0] in ABSENT else find_spec(name, *args, **kwargs)
# What import and flatbuffers' own numpy probe consult.
importlib.machinery.PathFinder.find_spec = classmethod(absent)
from emitter_filter.cli import main
code = main(sys.argv[1:])
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ABSENT)
sys.exit(code if not loaded else f"loaded {loaded}")
"""


def _without_torch(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _WITHOUT_TORCH, *argv],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )


def test_audit_and_prune_with_a_ptd_need_neither_torch_nor_executorch(tmp_path):
    dirty, ptds = _files(tmp_path, "dirty", "external", "executorch-1.5.1", dead=True)
    ptd_args = ["--data", str(ptds[0])]
    audit = _without_torch("audit", str(dirty), *ptd_args, "--max-dead-bytes", "0")
    assert audit.returncode == 1, audit.stderr
    assert "24 dead" in audit.stdout
    # The same report as where torch and executorch can be imported.
    full = subprocess.run(
        [sys.executable, "-m", "emitter_filter", "audit", str(dirty), *ptd_args, "--json"],
        capture_output=True,
        text=True,
    )
    assert _without_torch("audit", str(dirty), *ptd_args, "--json").stdout == full.stdout
    out = tmp_path / "out"
    out.mkdir()
    prune = _without_torch(
        "prune", str(dirty), "-o", str(out / "model.pte"), *ptd_args, "--ptd-out", str(out)
    )
    assert prune.returncode == 0, prune.stderr
    clean = build_program(dead=False, where="external")
    assert _bytes(out / "model.pte", out / "weights.ptd") == [clean.pte, clean.ptd]
    gate = _without_torch(
        "audit", str(out / "model.pte"), "--data", str(out / "weights.ptd"), "--max-dead-bytes", "0"
    )
    assert gate.returncode == 0, gate.stderr
