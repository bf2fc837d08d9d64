"""A named-data key that programs of one set hold with different bytes: reported, gated, never written.

ExecuTorch resolves a key within a program, but XNNPACK's weights cache, when on, packs
a key once for every program of the process: a key with other bytes in a second program
computes with the first's weights. `audit` and `explain` of a set report such a key
(`audit --fail-on-key-clash` exits 1); `share` and `merge` never write one into one file.
Torch-free, on the golden files; the programs loaded side by side are in
`tests/inprocess/test_key_clash_load.py`.
"""

from __future__ import annotations

import json
import shutil

import pytest

from emitter_filter.cli import main
from emitter_filter.errors import PteFormatError
from emitter_filter.ondisk.audit_set import audit_set
from emitter_filter.ondisk.explain_set import explain_set
from emitter_filter.ondisk.merge import merge_files
from emitter_filter.ondisk.read.read_ptd import read_ptd
from emitter_filter.ondisk.read.read_pte import read_pte
from emitter_filter.ondisk.share import share_files
from tests.files import GOLDEN, saved

pytestmark = pytest.mark.filetools

KEY = "lin.weight"  # the golden external program's weight, as `head.weight` is a head's


def _flip(path, offset, to):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    to.write_bytes(bytes(data))
    return to


def _external_pair(tmp_path):
    """a.pte + a.ptd and b.pte + b.ptd: the golden external program twice, b's `KEY` other bytes."""
    pte, (ptd,) = saved(GOLDEN / "external" / "dirty")
    for name in ("a", "b"):
        shutil.copyfile(pte, tmp_path / f"{name}.pte")
    shutil.copyfile(ptd, tmp_path / "a.ptd")
    _flip(ptd, read_ptd(ptd).named_data[KEY].offset, tmp_path / "b.ptd")
    return [tmp_path / "a.pte", tmp_path / "b.pte"]


def _xnnpack_pair(tmp_path):
    """The golden XNNPACK program twice, its first named-data key with other bytes in b."""
    pte, _ = saved(GOLDEN / "xnnpack" / "pruned")
    a = shutil.copyfile(pte, tmp_path / "a.pte")
    entry = read_pte(a).named_data[0]
    return [a, _flip(a, entry.offset, tmp_path / "b.pte")], entry.key


def test_two_ptd_files_naming_one_key_with_other_bytes_are_a_clash(tmp_path):
    programs = _external_pair(tmp_path)
    (clash,) = audit_set(programs, []).key_clashes
    assert clash.key == KEY
    assert [path for path, _ in clash.copies] == [str(tmp_path / "a.ptd"), str(tmp_path / "b.ptd")]
    assert [clash.to_json() for clash in explain_set(programs).key_clashes] == [clash.to_json()]


def test_the_gate_fails_on_the_clash_and_passes_on_shares_output(tmp_path, capsys):
    programs = [str(p) for p in _external_pair(tmp_path)]
    assert main(["audit", *programs]) == 0  # each program judged alone without the gate
    assert capsys.readouterr().err == (  # but the clash is said
        f"emitter-filter: warning: {KEY!r} held with different bytes by programs given "
        "together: a weights cache shared by the programs, as XNNPACK's, would give the "
        "second the first's (--fail-on-key-clash: exit 1)\n"
    )
    assert main(["audit", *programs, "--fail-on-key-clash"]) == 1
    captured = capsys.readouterr()
    assert f"key {KEY!r} holds other bytes in" in captured.out
    assert captured.err.strip() == (
        f"emitter-filter: --fail-on-key-clash: {KEY!r} held with "
        "different bytes by programs of the set"
    )
    out = tmp_path / "out"
    share_files(programs, out, min_bytes=1)
    shared = [str(out / "a.pte"), str(out / "b.pte")]
    assert main(["audit", *shared, "--data", str(out / "shared.ptd"), "--fail-on-key-clash"]) == 0
    assert "key clashes: none" in capsys.readouterr().out
    assert not audit_set(shared, [str(out / "shared.ptd")]).key_clashes


def test_explain_of_the_set_says_so_in_text_and_json(tmp_path, capsys):
    programs = [str(p) for p in _external_pair(tmp_path)]
    assert main(["explain", *programs]) == 0
    assert f"key {KEY!r} holds other bytes in" in capsys.readouterr().out
    assert main(["explain", *programs, "--json"]) == 0
    (clash,) = json.loads(capsys.readouterr().out)["key_clashes"]
    assert clash["key"] == KEY and len(clash["copies"]) == 2


def test_the_gate_reads_programs_without_ptd_files_as_a_set(tmp_path, capsys):
    """XNNPACK's keys live in each .pte: several programs with the gate are one set."""
    programs, key = _xnnpack_pair(tmp_path)
    assert main(["audit", *map(str, programs), "--fail-on-key-clash", "--json"]) == 1
    (clash,) = json.loads(capsys.readouterr().out)["key_clashes"]
    assert clash["key"] == key
    assert [c["file"] for c in clash["copies"]] == [str(p) for p in programs]
    same = [programs[0], shutil.copyfile(programs[0], tmp_path / "c.pte")]
    assert main(["audit", *map(str, same), "--fail-on-key-clash"]) == 0
    capsys.readouterr()
    assert main(["audit", *map(str, programs), "--json"]) == 0  # no gate: a warning
    assert f"warning: {key!r} held with different bytes" in capsys.readouterr().err
    assert main(["audit", *map(str, same)]) == 0
    assert capsys.readouterr().err == ""


def test_share_writes_no_clash_into_one_file_and_hides_none(tmp_path):
    """share never puts a clashing key in its shared .ptd; what each .pte keeps under its
    name (delegate data) is still reported for the set, as it was for the inputs."""
    programs, key = _xnnpack_pair(tmp_path)
    out = tmp_path / "out"
    share_files(programs, out, min_bytes=1)
    assert key not in read_ptd(out / "shared.ptd").named_data
    written = [out / "a.pte", out / "b.pte"]
    for path in written:
        assert [
            e.key for e in read_pte(path, [out / "shared.ptd"]).named_data if e.file == str(path)
        ] == [key]
    (clash,) = audit_set(written, [out / "shared.ptd"]).key_clashes
    assert clash.key == key


def test_merge_refuses_a_clash_it_would_write_into_its_ptd(tmp_path, capsys):
    a, b = _external_pair(tmp_path)
    out = tmp_path / "merged.pte"
    with pytest.raises(PteFormatError, match=f"'{KEY}'"):
        merge_files(
            [a, b],
            out,
            data=[(str(a), str(tmp_path / "a.ptd")), (str(b), str(tmp_path / "b.ptd"))],
            ptd_out=tmp_path / "merged.ptd",
            methods=["b=b.pte:forward"],
        )
    assert not out.exists() and not (tmp_path / "merged.ptd").exists()
