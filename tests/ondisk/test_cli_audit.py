"""`emitter-filter audit`: exit codes, JSON on stdout, one-line errors on stderr."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from emitter_filter.cli import main
from emitter_filter.ondisk.audit import audit_file

pytestmark = pytest.mark.filetools


def _run(capsys, *argv):
    code = main(["audit", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_dirty_file_fails_the_gate_with_exit_1(built, capsys):
    code, out, err = _run(capsys, built["plain"].pte, "--max-dead-bytes", "0")
    assert code == 1
    assert "148 dead" in out
    assert (
        err.strip() == f"emitter-filter: {built['plain'].pte}: 148 dead bytes > --max-dead-bytes 0"
    )


@pytest.mark.parametrize("which", ["clean", "pruned"])
def test_clean_and_pruned_files_pass_the_gate(built, capsys, which):
    pte = built["clean"].pte if which == "clean" else built["xnnpack"].pruned_pte
    code, out, err = _run(capsys, pte, "--max-dead-bytes", "0")
    assert (code, err) == (0, "")


def test_dead_bytes_within_the_allowance_pass_and_no_gate_means_exit_0(built, capsys):
    assert _run(capsys, built["plain"].pte, "--max-dead-bytes", "148")[0] == 0
    assert _run(capsys, built["plain"].pte)[0] == 0


def test_json_output_is_the_reports_json_form(built, capsys):
    case = built["external"]
    ptd_args = [a for p in case.ptds for a in ("--data", p)]
    code, out, err = _run(capsys, case.pte, *ptd_args, "--json")
    assert code == 0 and err == ""
    assert json.loads(out) == audit_file(case.pte, case.ptds).to_json()


def test_table_lists_every_space_and_the_dead_entries(built, capsys):
    code, out, _ = _run(capsys, built["plain"].pte)
    lines = out.splitlines()
    assert [line.split()[0] for line in lines[2:8]] == [
        "constant",
        "mutable",
        "external",
        "named_data",
        "delegate",
        "segments",
    ]
    assert lines[-2].split()[:8] == [
        "128",
        "constant",
        "3",
        "forward",
        "2",
        "FLOAT",
        "(float32)",
        "[32]",
    ]


BAD = {
    "not a pte": (lambda d: b"#!/bin/sh\necho not a program\n" * 8, "not a PTE file"),
    "truncated": (lambda d: d[:100], "truncated"),
    "wrong identifier": (lambda d: d[:4] + b"ET07" + d[8:], "wrong flatbuffer identifier"),
    "segment outside file": (lambda d: d[:32] + bytes(8) + d[40:-64], "outside the file"),
}


@pytest.mark.parametrize("damage, message", BAD.values(), ids=BAD.keys())
def test_bad_file_exits_2_with_one_line_naming_the_file(built, tmp_path, capsys, damage, message):
    path = tmp_path / "bad.pte"
    path.write_bytes(damage(built["plain"].pte.read_bytes()))
    code, out, err = _run(capsys, path, "--max-dead-bytes", "0")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"emitter-filter: {path}: ")
    assert message in err and "Traceback" not in err


def test_missing_ptd_key_exits_2(built, capsys):
    case = built["external"]
    code, out, err = _run(capsys, case.pte, "--data", case.pruned_ptds[0])
    assert (code, out) == (2, "") and "does not match" in err


def test_usage_errors_exit_2(capsys):
    assert main(["audit"]) == 2
    assert main(["audit", "x.pte", "--max-dead-bytes", "-1"]) == 2


def test_verbose_shows_the_traceback_and_keeps_exit_code_2(tmp_path, capsys):
    path = tmp_path / "bad.pte"
    path.write_bytes(b"nope")
    code = main(["-v", "audit", str(path)])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert "Traceback" in err and "PteFormatError" in err
    assert err.splitlines()[-1].startswith(f"emitter-filter: {path}: ")


def test_verbose_keeps_exit_code_2_from_the_command_line(tmp_path):
    """The installed command, not `main`: a raised error would exit 1, the gate's code."""
    path = tmp_path / "bad.pte"
    path.write_bytes(b"#!/bin/sh\n" * 8)
    for argv in (["-v", "audit", str(path)], ["audit", str(path), "-vv"]):
        result = subprocess.run(
            [sys.executable, "-m", "emitter_filter", *argv],
            capture_output=True,
            text=True,
        )
        assert result.returncode == 2, result.stderr
        assert "Traceback" in result.stderr and "not a PTE file" in result.stderr


def test_several_files_are_audited_in_turn(capsys, built):
    clean, dirty = built["clean"].pte, built["plain"].pte
    code, out, err = _run(capsys, clean, dirty, "--json", "--max-dead-bytes", "0")
    assert code == 1 and [r["path"] for r in json.loads(out)] == [str(clean), str(dirty)]
    assert err.count("dead bytes > --max-dead-bytes 0") == 1 and str(dirty) in err
    # With a .ptd, several programs are one set (tests/ondisk/test_share.py): a .ptd
    # none of them reads is dead as a whole.
    ptd = built["external"].ptds[0]
    code, out, err = _run(capsys, clean, dirty, "--data", ptd, "--max-dead-bytes", "0")
    assert code == 1 and "the set has" in err and "no program reads" in out
