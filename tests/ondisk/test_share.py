"""`share` on the committed golden files, with or without torch.

The golden programs are small (their constants are tens of bytes), so the tests
that expect moves pass `min_bytes=1`. Loading the results into the runtime, on
exported models, is in `tests/inprocess/test_share_load.py`.
"""

from __future__ import annotations

import json
import shutil

import pytest

from emitter_filter.cli import main
from emitter_filter.errors import OutputFileError, PteFormatError
from emitter_filter.ondisk.audit import audit_file
from emitter_filter.ondisk.audit_set import audit_set
from emitter_filter.ondisk.read_ptd import read_ptd
from emitter_filter.ondisk.read_pte import read_pte, read_pte_program
from emitter_filter.ondisk.share import share_files
from emitter_filter.reachability import DataSpace
from tests.files import GOLDEN, saved

pytestmark = pytest.mark.filetools


def _copy(case: str, state: str, to):
    """The golden `case` copied to `to` (a path ending in .pte); returns it."""
    pte, _ = saved(GOLDEN / case / state)
    shutil.copyfile(pte, to)
    return to


def _bytes(directory) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_a_set_with_nothing_in_common_is_copied_byte_for_byte(tmp_path):
    a = _copy("plain", "dirty", tmp_path / "a.pte")
    b = _copy("mutated", "dirty", tmp_path / "b.pte")
    pte, ptds = saved(GOLDEN / "external" / "dirty")
    c = tmp_path / "c.pte"
    shutil.copyfile(pte, c)
    report = share_files([a, b, c], tmp_path / "out", ptd_paths=ptds)
    assert report.shared_contents == 0 and report.saved_bytes == 0
    out = _bytes(tmp_path / "out")
    assert out == {
        "a.pte": a.read_bytes(), "b.pte": b.read_bytes(), "c.pte": c.read_bytes(),
        ptds[0].name: ptds[0].read_bytes(),
    }


def test_common_constants_move_to_the_shared_ptd_as_external_tensors(tmp_path):
    a = _copy("plain", "dirty", tmp_path / "a.pte")
    b = _copy("clean", "dirty", tmp_path / "b.pte")
    before = {p: p.read_bytes() for p in (a, b)}
    report = share_files([a, b], tmp_path / "out", min_bytes=1)
    assert {p: p.read_bytes() for p in (a, b)} == before, "an input was modified"
    assert report.shared_contents == 2 and report.shared_bytes == 48 + 12
    shared = tmp_path / "out" / "shared.ptd"
    ptd = read_ptd(shared)
    for name in ("a.pte", "b.pte"):
        pte = read_pte(tmp_path / "out" / name, [shared])
        constants = {i for i, e in pte.entries[DataSpace.CONSTANT].items() if i}
        external = {t.name for t in pte.tensors if t.ref.space is DataSpace.EXTERNAL}
        assert len(external) == 2 and external <= set(ptd.named_data)
        # Each layout the tensors have is in the .ptd, as the runtime checks it.
        for tensor in pte.tensors:
            if tensor.ref.space is DataSpace.EXTERNAL:
                assert ptd.layouts[tensor.name][1] == tensor.shape
        assert len(constants) == (2 if name == "a.pte" else 0)  # a's unused entries stay
    # Each content is stored once: two segments for the two contents.
    assert len(ptd.segments) == 2
    assert report.bytes_after == sum(len(v) for v in _bytes(tmp_path / "out").values())


def test_share_again_on_its_own_output_changes_nothing(tmp_path):
    a = _copy("plain", "dirty", tmp_path / "a.pte")
    b = _copy("clean", "dirty", tmp_path / "b.pte")
    first, second = tmp_path / "first", tmp_path / "second"
    share_files([a, b], first, min_bytes=1)
    report = share_files(
        [first / "a.pte", first / "b.pte"], second, ptd_paths=[first / "shared.ptd"],
        min_bytes=1,
    )
    assert report.shared_contents == 0
    assert _bytes(second) == _bytes(first)


def test_xnnpack_named_data_common_to_two_programs_moves_with_its_key(tmp_path):
    a = _copy("xnnpack", "pruned", tmp_path / "a.pte")
    b = _copy("xnnpack", "pruned", tmp_path / "b.pte")
    keys = {e.key for e in read_pte(a).named_data}
    report = share_files([a, b], tmp_path / "out", min_bytes=1)
    assert [p.moved_named_data for p in report.programs] == [len(keys)] * 2
    shared = tmp_path / "out" / "shared.ptd"
    assert set(read_ptd(shared).named_data) == keys
    for name in ("a.pte", "b.pte"):
        read = read_pte_program(tmp_path / "out" / name)
        assert not read.program.namedData
        # The delegate blob is untouched: it still names the keys, now in the .ptd.
        (blob,) = read.pte.delegates
        assert blob.named_keys == keys


def test_one_key_with_different_bytes_in_two_programs_is_refused_leaving_nothing(tmp_path):
    a = _copy("xnnpack", "pruned", tmp_path / "a.pte")
    data = bytearray(a.read_bytes())
    entry = read_pte(a).named_data[0]
    data[entry.offset] ^= 0xFF
    b = tmp_path / "b.pte"
    b.write_bytes(bytes(data))
    out = tmp_path / "out"
    with pytest.raises(PteFormatError, match=rf"{entry.key}.*other bytes.*a\.pte|a\.pte"):
        share_files([a, b], out, min_bytes=1)
    assert not out.exists() or not list(out.iterdir())
    assert main(["share", str(a), str(b), "--out", str(out), "--min-bytes", "1"]) == 2
    assert not out.exists() or not list(out.iterdir())


def test_an_output_that_would_replace_an_input_is_refused(tmp_path):
    a = _copy("plain", "dirty", tmp_path / "a.pte")
    b = _copy("clean", "dirty", tmp_path / "b.pte")
    with pytest.raises(OutputFileError, match="never overwrites its input"):
        share_files([a, b], tmp_path)
    with pytest.raises(OutputFileError, match="several inputs are named"):
        share_files([a, a], tmp_path / "out")


def test_cli_share_prints_the_report_as_json(tmp_path, capsys):
    a = _copy("plain", "dirty", tmp_path / "a.pte")
    b = _copy("clean", "dirty", tmp_path / "b.pte")
    argv = ["share", str(a), str(b), "--out", str(tmp_path / "out"), "--min-bytes", "1"]
    assert main([*argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    # 60 shared bytes cost more than they save (keys, layouts, padding): the default
    # --min-bytes leaves such contents where they are.
    assert report["shared_contents"] == 2 and report["saved_bytes"] < 0
    assert report["bytes_after"] == sum(len(v) for v in _bytes(tmp_path / "out").values())
    assert report["ptd_outputs"] == [str(tmp_path / "out" / "shared.ptd")]
    assert main(argv) == 0
    assert "stored once in" in capsys.readouterr().out


def test_constants_equal_to_an_input_ptd_entry_point_at_it(tmp_path):
    a = _copy("plain", "dirty", tmp_path / "a.pte")
    pte, ptds = saved(GOLDEN / "external" / "dirty")
    b = tmp_path / "b.pte"
    shutil.copyfile(pte, b)
    report = share_files([a, b], tmp_path / "out", ptd_paths=ptds, min_bytes=1)
    ptd = read_ptd(tmp_path / "out" / "shared.ptd")
    # b's .ptd entries are all kept; a's four constants equal four of them, and the
    # two of those a live value reads move: the two dead ones stay in a.pte, dead.
    assert set(read_ptd(ptds[0]).named_data) < set(ptd.named_data)
    assert len(ptd.segments) == len(read_ptd(ptds[0]).segments) == 4
    assert [p.moved_constants for p in report.programs] == [2, 0]
    assert (tmp_path / "out" / "b.pte").read_bytes() == b.read_bytes()
    before = audit_file(a)
    after = audit_file(tmp_path / "out" / "a.pte", [tmp_path / "out" / "shared.ptd"])
    assert after.spaces["constant"].dead == before.dead_bytes > 0
    assert report.dead_bytes == before.dead_bytes


def test_the_audit_of_a_shared_set_counts_a_ptd_entry_dead_only_if_no_program_reads_it(
    tmp_path,
):
    a = _copy("plain", "pruned", tmp_path / "a.pte")
    b = _copy("clean", "dirty", tmp_path / "b.pte")
    before = audit_set([a, b], [], min_bytes=1)
    assert before.duplicated_bytes == 48 + 12 and before.dead_bytes == 0
    share_files([a, b], tmp_path / "out", min_bytes=1)
    out = tmp_path / "out"
    ptd = out / "shared.ptd"
    report = audit_set([out / "a.pte", out / "b.pte"], [ptd], min_bytes=1)
    assert report.dead_bytes == 0 and report.shared == ()
    assert [p.ptd_bytes for p in report.programs] == [60, 60]
    # Alone, each program reads the whole .ptd: a third program reading none of it
    # makes nothing dead, but a .ptd entry no program reads is.
    alone = audit_set([out / "a.pte"], [ptd], min_bytes=1)
    assert alone.dead_bytes == 0
    c = _copy("mutated", "pruned", tmp_path / "c.pte")
    d = _copy("mutated", "pruned", tmp_path / "d.pte")
    assert audit_set([c, d], [ptd]).dead_bytes == 60
    code = main(["audit", str(out / "a.pte"), str(out / "b.pte"), "--ptd", str(ptd),
                 "--max-dead-bytes", "0"])
    assert code == 0


def test_prune_first_drops_what_no_plan_reads_then_shares(tmp_path):
    a = _copy("plain", "dirty", tmp_path / "a.pte")
    b = _copy("plain", "dirty", tmp_path / "b.pte")
    out = tmp_path / "out"
    assert audit_set([a, b], []).dead_bytes > 0
    report = share_files([a, b], out, min_bytes=1, prune=True)
    assert [p.path for p in report.programs] == [str(a), str(b)]
    assert report.bytes_before == 2 * a.stat().st_size
    after = audit_set([out / "a.pte", out / "b.pte"], [out / "shared.ptd"], min_bytes=1)
    assert after.dead_bytes == 0 and after.shared == ()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temporary left"
    with pytest.raises(OutputFileError, match="prune with .ptd files"):
        share_files([a, b], tmp_path / "other", ptd_paths=[tmp_path / "c.ptd"], prune=True)


def test_a_program_with_nothing_in_common_with_the_others_is_written_byte_for_byte(tmp_path):
    a = _copy("plain", "dirty", tmp_path / "a.pte")
    b = _copy("clean", "dirty", tmp_path / "b.pte")
    c = _copy("mutated", "pruned", tmp_path / "c.pte")
    report = share_files([a, b, c], tmp_path / "out", min_bytes=1)
    assert [p.moved_constants for p in report.programs] == [2, 2, 0]
    assert (tmp_path / "out" / "c.pte").read_bytes() == c.read_bytes()
    assert (tmp_path / "out" / "a.pte").read_bytes() != a.read_bytes()
