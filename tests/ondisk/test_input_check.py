"""Every writer refuses an input `audit` calls invalid, in audit's line (issue 56), and what
audit now calls invalid that it did not (issue 55).

The input: a program ExecuTorch wrote (with its `.ptd`), one kernel name's u32 length set
to 2, so that its bytes run on without a NUL after them. `audit` refuses it (the
flatbuffers Verifier does); merge and share used to read the name by its length (`at`),
write a well-formed `at.out`, and exit 0 with a program the runtime refuses.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from emitter_filter.cli import main
from emitter_filter.ondisk.analyse.validate import validate_bytes
from emitter_filter.ondisk.read.read_pte import read_pte_program
from emitter_filter.program.fbs_schemas import PROGRAM
from tests.files import GOLDEN
from tests.layouts import with_program_changed

pytestmark = pytest.mark.filetools

_EXTERNAL = GOLDEN / "external" / "dirty"
_PTD = "_default_external_constant.ptd"


def _name_length_cut(pte: bytes) -> bytes:
    """`pte` with its first operator's name said to be 2 bytes long."""
    data = bytearray(pte)
    operator = read_pte_program(pte).program.executionPlan[0].operators[0]
    at = PROGRAM.field_at(pte, operator, "name")
    string = at + int.from_bytes(data[at : at + 4], "little")
    assert int.from_bytes(data[string : string + 4], "little") > 2, "a name longer than 2"
    data[string : string + 4] = (2).to_bytes(4, "little")
    return bytes(data)


@pytest.fixture
def cut(tmp_path: Path) -> Path:
    """The cut program as a.pte with its .ptd as a.ptd, and a valid b.pte/b.ptd beside."""
    (tmp_path / "a.pte").write_bytes(_name_length_cut((_EXTERNAL / "model.pte").read_bytes()))
    shutil.copy(_EXTERNAL / _PTD, tmp_path / "a.ptd")
    shutil.copy(_EXTERNAL / "model.pte", tmp_path / "b.pte")
    shutil.copy(_EXTERNAL / _PTD, tmp_path / "b.ptd")
    return tmp_path


def _audit_line(cut: Path, capsys) -> str:
    assert main(["audit", str(cut / "a.pte")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "does not end in NUL" in line
    return line


#: Each writer's command on the cut program, and what it would write.
WRITERS = {
    "prune": (["prune", "a.pte", "-o", "p.pte"], ["p.pte", "p.ptd"]),
    "prune --dedupe": (["prune", "a.pte", "-o", "p.pte", "--dedupe"], ["p.pte", "p.ptd"]),
    "merge --inline": (["merge", "a.pte", "-o", "m.pte", "--inline"], ["m.pte"]),
    "merge two": (
        ["merge", "a.pte", "b.pte", "-o", "m.pte", "--ptd-out", "m.ptd", "--prefix", "#2=b_"],
        ["m.pte", "m.ptd"],
    ),
    "share": (["share", "a.pte", "b.pte", "--out", "sh"], ["sh"]),
    "share --prune": (["share", "a.pte", "b.pte", "--out", "sh", "--prune"], ["sh"]),
    "split": (["split", "a.pte", "--method", "forward", "-o", "s.pte"], ["s.pte"]),
}


@pytest.mark.parametrize("name", WRITERS)
def test_every_writer_refuses_what_audit_calls_invalid_in_audits_line(
    name, cut, capsys, monkeypatch
):
    monkeypatch.chdir(cut)
    line = _audit_line(cut, capsys)
    argv, outputs = WRITERS[name]
    if name == "split":  # split takes a program whose data is in the .pte
        (cut / "a.ptd").unlink()
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    if name != "split":
        assert err[0] == line.replace(str(cut / "a.pte"), "a.pte")
    assert "a.pte: invalid: " in err[0] and "does not end in NUL" in err[0]
    for output in outputs:
        assert not (cut / output).exists(), output
    inputs = {"a.pte", "b.pte", "b.ptd"} | (set() if name == "split" else {"a.ptd"})
    assert {p.name for p in cut.iterdir()} == inputs


def test_verify_refuses_it_before_any_runtime_loads_it(cut, capsys, monkeypatch):
    from emitter_filter.verify import compare

    def no_runtime(*args, **kwargs):
        raise AssertionError("the runtime was reached")

    monkeypatch.setattr(compare, "verify_programs", no_runtime)
    monkeypatch.chdir(cut)
    assert main(["verify", "b.pte", "a.pte"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("emitter-filter: a.pte: invalid: ") and "does not end in NUL" in line


def test_a_writer_still_repairs_a_program_on_the_constant_buffer_path(tmp_path, capsys):
    from tests.layouts import build_program

    placeholder = tmp_path / "placeholder.pte"
    placeholder.write_bytes(build_program(dead=False, where="placeholder").pte)
    assert main(["audit", str(placeholder)]) == 2
    capsys.readouterr()
    assert main(["prune", str(placeholder), "-o", str(tmp_path / "p.pte")]) == 0
    assert main(["audit", str(tmp_path / "p.pte")]) == 0


def _xnnpack_key_on_a_shorter_segment() -> tuple[bytes, str]:
    """The XNNPACK golden program with its 48-byte weight's key moved to the 12-byte
    segment of its other key, and that key."""
    pte = (GOLDEN / "xnnpack" / "dirty" / "model.pte").read_bytes()
    entries = sorted(read_pte_program(pte).pte.named_data, key=lambda e: -e.nbytes)
    large, small = entries[0], entries[-1]
    assert large.nbytes > small.nbytes

    def move(program) -> None:
        (entry,) = [e for e in program.namedData if e.key == large.key.encode()]
        entry.segmentIndex = small.segment_index

    return with_program_changed(pte, move), large.key


def test_an_xnnpack_constant_longer_than_its_named_data_is_invalid(tmp_path, capsys):
    """XNNPACK reads past the segment (issue 55, finding 1): what it reads depends on the
    layout, so a rewrite that moves segments computes other values."""
    pte, key = _xnnpack_key_on_a_shorter_segment()
    validity = validate_bytes(pte)
    assert f"XNNPACK constant {key!r} needs 48 B, its named data holds 12" in validity.problems
    (tmp_path / "a.pte").write_bytes(pte)
    assert main(["prune", str(tmp_path / "a.pte"), "-o", str(tmp_path / "p.pte")]) == 2
    assert "needs 48 B, its named data holds 12" in capsys.readouterr().err
    assert not (tmp_path / "p.pte").exists()


def test_the_xnnpack_golden_program_is_valid_as_written():
    assert validate_bytes((GOLDEN / "xnnpack" / "dirty" / "model.pte").read_bytes()).valid


def test_a_kernel_name_that_is_not_utf8_is_invalid_and_refused_by_every_writer(tmp_path, capsys):
    """The pybindings decode every kernel name and abort on one that is not UTF-8 (issue 55,
    finding 2): a method name is checked so, and an operator name now is too."""

    def garble(program) -> None:
        program.executionPlan[0].operators[0].name = b"aten::\xffadd"

    pte = with_program_changed((_EXTERNAL / "model.pte").read_bytes(), garble)
    (tmp_path / "a.pte").write_bytes(pte)
    shutil.copy(_EXTERNAL / _PTD, tmp_path / "a.ptd")
    problems = validate_bytes(pte, [tmp_path / "a.ptd"]).problems
    assert problems == ("plan 'forward': operator 0: name 'aten::\ufffdadd' is not UTF-8",)
    out = tmp_path / "m.pte"
    assert main(["merge", str(tmp_path / "a.pte"), "-o", str(out), "--inline"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith(
        "a.pte: invalid: plan 'forward': operator 0: name 'aten::\ufffdadd' is not UTF-8"
    )
    assert not out.exists()


def _xnnpack_key_renamed() -> tuple[bytes, str, str]:
    """The XNNPACK golden program with its 48-byte weight's named-data key changed: the
    delegate names a key held nowhere, and the blob is named by no delegate. (the file,
    the key the delegate names, the blob's new key)."""
    pte = (GOLDEN / "xnnpack" / "dirty" / "model.pte").read_bytes()
    entry = max(read_pte_program(pte).pte.named_data, key=lambda e: e.nbytes)
    orphan = "zzz" + entry.key[3:]

    def rename(program) -> None:
        (named,) = [e for e in program.namedData if e.key == entry.key.encode()]
        named.key = orphan.encode()

    return with_program_changed(pte, rename), entry.key, orphan


def test_a_blob_no_delegate_names_is_not_dead_while_a_delegate_key_is_held_nowhere(
    tmp_path, capsys, caplog
):
    """Issue 55, finding 6: the runtime refuses the method (0x20) whatever is dropped, and
    the blob no key names may be the one the changed key meant: audit warns and counts it
    kept, and prune keeps it."""
    from emitter_filter.ondisk.audit import audit_file

    pte, key, orphan = _xnnpack_key_renamed()
    (tmp_path / "a.pte").write_bytes(pte)
    report = audit_file(tmp_path / "a.pte")
    assert orphan not in {d.name for d in report.dead}
    assert [u.key for u in report.kept_unprovable_named_data] == [orphan]
    assert main(["audit", str(tmp_path / "a.pte")]) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and repr(key) in warnings[0], warnings
    assert "the runtime refuses the methods that read them" in warnings[0]
    assert main(["prune", str(tmp_path / "a.pte"), "-o", str(tmp_path / "p.pte")]) == 0
    kept = read_pte_program(str(tmp_path / "p.pte")).pte.named_data
    assert orphan in {e.key for e in kept}


def test_what_only_this_projects_reader_refuses_is_not_called_invalid(tmp_path, capsys):
    """Issue 55, finding 7: a constant's offset outside its segment, where no method reads
    that constant, is refused by the reader every tool shares, but the runtime loads and
    runs the file: the validator says it cannot read it, not that it is invalid, and audit
    and every writer refuse it in the reader's own line."""

    def dead_offset_out(program) -> None:
        program.constantSegment.offsets[4] = 1 << 20  # constant 4: dead in every plan

    pte = with_program_changed(
        (GOLDEN / "plain" / "dirty" / "model.pte").read_bytes(), dead_offset_out
    )
    (tmp_path / "a.pte").write_bytes(pte)
    validity = validate_bytes(pte)
    assert validity.problems == validity.unreadable and len(validity.problems) == 1
    assert validity.status == f"emitter-filter cannot read it: {validity.problems[0]}"
    assert "outside its segment" in validity.problems[0]
    lines = []
    for command, *output in (["audit"], ["prune", "p.pte"], ["merge", "m.pte"]):
        outputs = ["-o", str(tmp_path / output[0])] if output else []
        assert main([command, str(tmp_path / "a.pte"), *outputs]) == 2
        (line,) = capsys.readouterr().err.splitlines()
        lines.append(line)
    assert lines == [lines[0]] * 3, lines
    assert "invalid" not in lines[0] and "outside its segment" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pte"]


@pytest.mark.parametrize("name", ["merge --inline", "share", "split", "prune"])
def test_verify_never_gives_a_runtime_an_input_audit_refuses(name, cut, capsys, monkeypatch):
    """Issue 55, finding 2: with --verify, the runtime loaded each input before the tool's
    reader saw it, and some inputs crash it; now the input check comes first, whatever
    the flags: the same line, exit 2, nothing written, no runtime."""
    from emitter_filter.verify import compare

    def no_runtime(*args, **kwargs):
        raise AssertionError("the runtime was reached")

    monkeypatch.setattr(compare, "Verifier", no_runtime)
    monkeypatch.chdir(cut)
    argv, outputs = WRITERS[name]
    if name == "split":
        (cut / "a.ptd").unlink()
    assert main([*argv, "--verify"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("emitter-filter: a.pte: invalid: ") and "does not end in NUL" in line
    assert not any((cut / output).exists() for output in outputs)
