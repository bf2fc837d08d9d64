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
from emitter_filter.errors import MethodSetError, OutputFileError, PteFormatError
from emitter_filter.ondisk.audit import audit_file
from emitter_filter.ondisk.audit_set import audit_set
from emitter_filter.ondisk.explain_set import explain_set
from emitter_filter.ondisk.read.read_ptd import read_ptd
from emitter_filter.ondisk.read.read_pte import read_pte, read_pte_program
from emitter_filter.ondisk.share import share_files
from emitter_filter.program.reachability import DataSpace
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
        "a.pte": a.read_bytes(),
        "b.pte": b.read_bytes(),
        "c.pte": c.read_bytes(),
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
        [first / "a.pte", first / "b.pte"],
        second,
        ptd_paths=[first / "shared.ptd"],
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


def _flip(path, offset, to):
    """`path` with the byte at `offset` changed, written to `to`; returns it."""
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    to.write_bytes(bytes(data))
    return to


def test_one_named_data_key_with_other_bytes_in_two_programs_stays_in_each(tmp_path):
    a = _copy("xnnpack", "pruned", tmp_path / "a.pte")
    entry = read_pte(a).named_data[0]
    b = _flip(a, entry.offset, tmp_path / "b.pte")
    out = tmp_path / "out"
    report = share_files([a, b], out, min_bytes=1)
    keys = {e.key for e in read_pte(a).named_data}
    assert set(read_ptd(out / "shared.ptd").named_data) == keys - {entry.key}
    for path in (a, b):
        # The runtime finds the key in the .pte, after the .ptd (which has none).
        kept = {e.key: e for e in read_pte(out / path.name).named_data}
        assert set(kept) == {entry.key}
        with open(out / path.name, "rb") as written, open(path, "rb") as original:
            written.seek(kept[entry.key].offset)
            original.seek(entry.offset)
            assert written.read(entry.nbytes) == original.read(entry.nbytes)
    assert report.shared_contents == len(keys) - 1


def test_one_key_with_two_contents_for_one_program_is_refused_leaving_nothing(tmp_path):
    pte, (ptd,) = saved(GOLDEN / "external" / "dirty")
    a = shutil.copyfile(pte, tmp_path / "a.pte")
    key, entry = next(iter(read_ptd(ptd).named_data.items()))
    other = _flip(ptd, entry.offset, tmp_path / "other.ptd")
    out = tmp_path / "out"
    with pytest.raises(PteFormatError, match=rf"{key!r} .*other bytes.*a\.pte loads with both"):
        share_files([a], out, ptd_paths=[ptd, other])
    assert not out.exists()
    assert main(["share", str(a), "--data", str(ptd), "--data", str(other), "--out", str(out)]) == 2
    assert not out.exists()


def _external_pair(tmp_path, name, flip=None):
    """The golden external program and its .ptd as `name`.pte and `name`.ptd, with the
    bytes of the .ptd's key `flip` changed."""
    pte, (ptd,) = saved(GOLDEN / "external" / "dirty")
    shutil.copyfile(pte, tmp_path / f"{name}.pte")
    if flip is None:
        shutil.copyfile(ptd, tmp_path / f"{name}.ptd")
    else:
        _flip(ptd, read_ptd(ptd).named_data[flip].offset, tmp_path / f"{name}.ptd")
    return tmp_path / f"{name}.pte", tmp_path / f"{name}.ptd"


def test_programs_with_their_own_ptd_keep_the_keys_whose_bytes_differ(tmp_path):
    _, (ptd,) = saved(GOLDEN / "external" / "dirty")
    read = read_pte(_external_pair(tmp_path, "probe")[0], [tmp_path / "probe.ptd"])
    live = [t.name for t in read.tensors if t.ref.space is DataSpace.EXTERNAL]
    flipped = live[0]
    a, a_ptd = _external_pair(tmp_path, "a")
    b, b_ptd = _external_pair(tmp_path, "b", flip=flipped)
    out = tmp_path / "out"
    report = share_files([a, b], out, ptd_paths=[f"{a}={a_ptd}", f"b.pte={b_ptd}"], min_bytes=1)
    assert [p.own_keys for p in report.programs] == [(flipped,)] * 2
    shared = read_ptd(out / "shared.ptd")
    assert flipped not in shared.named_data and set(live) - {flipped} <= set(shared.named_data)
    for path, ptd_in in ((a, a_ptd), (b, b_ptd)):
        written = read_pte(out / path.name, [out / "shared.ptd"])
        tensors = {t.name: t for t in written.tensors}
        assert tensors[flipped].ref.space is DataSpace.CONSTANT  # its name kept
        entry = written.entries[DataSpace.CONSTANT][tensors[flipped].ref.index]
        want = read_ptd(ptd_in).named_data[flipped]
        with open(out / path.name, "rb") as f, open(ptd_in, "rb") as g:
            f.seek(entry.offset)
            g.seek(want.offset)
            assert f.read(want.nbytes) == g.read(want.nbytes)
    # What the inputs' own .ptd holds dead (`unused`, `odd`) stays, once: share prunes nothing.
    after = audit_set([out / "a.pte", out / "b.pte"], [out / "shared.ptd"])
    assert after.dead_bytes == audit_set([a], [a_ptd]).dead_bytes > 0


def test_without_data_each_program_reads_the_ptd_beside_it(tmp_path):
    a, a_ptd = _external_pair(tmp_path, "a")
    b, b_ptd = _external_pair(tmp_path, "b", flip=next(iter(read_ptd(a_ptd).named_data)))
    report = share_files([a, b], tmp_path / "beside", min_bytes=1)
    assert report.ptd_inputs == (str(a_ptd), str(b_ptd))
    share_files(
        [a, b],
        tmp_path / "given",
        min_bytes=1,
        ptd_paths=[(str(a), str(a_ptd)), (str(b), str(b_ptd))],
    )
    assert _bytes(tmp_path / "beside") == _bytes(tmp_path / "given")


def test_explain_and_audit_read_the_set_as_share_does_and_agree_on_its_count(tmp_path):
    """Each program with the .ptd beside it: what explain calls duplicated is what audit
    says is stored in two files and share stores once; the dead stay dead in all three."""
    (tmp_path / "probe").mkdir()
    probe, probe_ptd = _external_pair(tmp_path / "probe", "probe")
    read = read_pte(probe, [probe_ptd])
    flipped = next(t.name for t in read.tensors if t.ref.space is DataSpace.EXTERNAL)
    a, a_ptd = _external_pair(tmp_path, "a")
    b, b_ptd = _external_pair(tmp_path, "b", flip=flipped)
    explanation, audit = explain_set([a, b], min_bytes=1), audit_set([a, b], [], min_bytes=1)
    report = share_files([a, b], tmp_path / "out", min_bytes=1)
    duplicated = sum(p.nbytes for p in explanation.parts if p.status == "duplicated")
    dead = sum(p.nbytes for p in explanation.parts if p.status == "dead")
    assert explanation.file_bytes == sum(p.stat().st_size for p in (a, b, a_ptd, b_ptd))
    assert 0 < duplicated == audit.duplicated_bytes == report.shared_bytes
    assert 0 < dead == audit.dead_bytes
    # The set given as share writes it, and as `FILE=IN.ptd`: the same counts.
    given = audit_set([a, b], [f"a.pte={a_ptd}", f"{b}={b_ptd}"], min_bytes=1)
    assert given.to_json() == audit.to_json()
    out = [tmp_path / "out" / "a.pte", tmp_path / "out" / "b.pte"]
    after = explain_set(out, [tmp_path / "out" / "shared.ptd"], min_bytes=1)
    assert not [p for p in after.parts if p.status == "duplicated"]
    assert (
        sum(p.nbytes for p in after.parts if p.status == "dead")
        == audit_set(out, [tmp_path / "out" / "shared.ptd"]).dead_bytes
        == audit_set([a], [a_ptd]).dead_bytes
    )


@pytest.mark.parametrize("command", ["explain", "audit"])
@pytest.mark.parametrize("programs", [("a", "b"), ("a",)], ids=["set", "one"])
@pytest.mark.parametrize(
    "spec, message",
    [
        ("c.pte={}", "'c.pte' is none of the inputs"),
        ("={}", "expected IN.ptd or FILE=IN.ptd"),
    ],
    ids=["other-file", "no-file"],
)
def test_a_bad_ptd_spec_is_one_line(tmp_path, capsys, command, programs, spec, message):
    pairs = [_external_pair(tmp_path, name) for name in programs]
    argv = [command, *(str(pte) for pte, _ in pairs), "--data", spec.format(pairs[0][1])]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize("command", ["explain", "audit"])
def test_one_program_reads_its_ptd_as_a_program_of_a_set_does(tmp_path, capsys, command):
    """`--ptd IN.ptd`, `--ptd MODEL.pte=IN.ptd`, `--data` (share's word) and, with none, the
    `.ptd` beside it with its stem say the same; a `.ptd` of another stem is not read."""
    a, a_ptd = _external_pair(tmp_path, "a")
    outputs = []
    for option in (
        ["--data", str(a_ptd)],
        ["--data", f"{a}={a_ptd}"],
        ["--data", f"a.pte={a_ptd}"],
        [],
    ):
        assert main([command, str(a), *option, "--json"]) == 0
        outputs.append(json.loads(capsys.readouterr().out))
    assert outputs[1:] == outputs[:1] * 3
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copyfile(a, alone / "a.pte")
    shutil.copyfile(a_ptd, alone / "other.ptd")
    assert main([command, str(alone / "a.pte"), "--json"]) == 0
    assert "other.ptd" not in capsys.readouterr().out  # read only when given
    assert main([command, str(alone / "a.pte"), "--data", str(alone / "other.ptd"), "--json"]) == 0
    assert "other.ptd" in capsys.readouterr().out


def test_diff_of_two_programs_reads_the_ptd_beside_each(tmp_path, capsys):
    """As `diff` of two directories pairs each program with its `.ptd`: each side's bytes
    are its `.pte` and `.ptd`, as if both were given."""
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    old, _ = _external_pair(tmp_path / "old", "a")
    new, _ = _external_pair(tmp_path / "new", "a")
    assert main(["diff", str(old), str(new), "--json"]) == 0
    beside = json.loads(capsys.readouterr().out)
    assert (
        main(
            [
                "diff",
                str(old),
                str(new),
                "--old-data",
                str(tmp_path / "old" / "a.ptd"),
                "--new-data",
                str(tmp_path / "new" / "a.ptd"),
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out) == beside
    for side, pte in (("old", old), ("new", new)):  # each with its .ptd
        assert beside[side]["bytes"] == pte.stat().st_size + pte.with_suffix(".ptd").stat().st_size


@pytest.mark.parametrize(
    "data, message",
    [
        (["nothere.pte=x.ptd"], "'nothere.pte' is none of the inputs"),
        (["a.pte="], "expected IN.ptd or FILE=IN.ptd"),
    ],
)
def test_a_bad_data_spec_is_one_line_and_writes_nothing(tmp_path, capsys, data, message):
    a, _ = _external_pair(tmp_path, "a")
    out = tmp_path / "out"
    argv = ["share", str(a), "--out", str(out)]
    for spec in data:
        argv += ["--data", spec]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not out.exists()


def test_ptd_files_of_one_name_are_copied_under_the_tails_that_tell_them_apart(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    a, a_ptd = _external_pair(tmp_path / "x", "a")
    pte, _ = saved(GOLDEN / "plain" / "dirty")
    b = shutil.copyfile(pte, tmp_path / "y" / "b.pte")
    other = shutil.copyfile(a_ptd, tmp_path / "y" / "a.ptd")
    share_files([a, b], tmp_path / "out", ptd_paths=[f"{a}={a_ptd}", f"{b}={other}"])
    assert (tmp_path / "out" / "x" / "a.ptd").read_bytes() == a_ptd.read_bytes()
    assert (tmp_path / "out" / "y" / "a.ptd").read_bytes() == other.read_bytes()


def test_programs_of_one_name_in_other_folders_are_written_under_their_tails(tmp_path):
    programs = []
    for folder, case in (("x", "plain"), ("y", "clean"), ("z", "plain")):
        (tmp_path / folder).mkdir()
        programs.append(_copy(case, "dirty", tmp_path / folder / "model.pte"))
    report = share_files(programs, tmp_path / "out", min_bytes=1)
    written = sorted(
        p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*.pte")
    )
    assert written == ["x/model.pte", "y/model.pte", "z/model.pte"]
    assert [p.output for p in report.programs] == [
        str(tmp_path / "out" / f / "model.pte") for f in "xyz"
    ]


def test_programs_of_one_name_take_their_ptd_by_number_or_by_tail(tmp_path):
    _, (ptd,) = saved(GOLDEN / "external" / "dirty")
    (tmp_path / "probe").mkdir()
    read = read_pte(_external_pair(tmp_path / "probe", "p")[0], [tmp_path / "probe" / "p.ptd"])
    flipped = next(t.name for t in read.tensors if t.ref.space is DataSpace.EXTERNAL)
    pairs = []
    for folder in "xyz":
        (tmp_path / folder).mkdir()
        pairs.append(
            _external_pair(tmp_path / folder, "model", flip=flipped if folder == "z" else None)
        )
    data = [f"#1={pairs[0][1]}", f"y/model.pte={pairs[1][1]}", f"#3={pairs[2][1]}"]
    report = share_files([p for p, _ in pairs], tmp_path / "out", ptd_paths=data, min_bytes=1)
    assert [p.output for p in report.programs] == [
        str(tmp_path / "out" / f / "model.pte") for f in "xyz"
    ]
    # Only z's .ptd holds other bytes under `flipped`: each program keeps its own, as
    # the FILE of its --data named it.
    for folder, (_, ptd_in) in zip("xyz", pairs, strict=True):
        written = tmp_path / "out" / folder / "model.pte"
        tensors = {t.name: t for t in read_pte(written, [tmp_path / "out" / "shared.ptd"]).tensors}
        entry = read_pte(written, [tmp_path / "out" / "shared.ptd"]).entries[DataSpace.CONSTANT][
            tensors[flipped].ref.index
        ]
        want = read_ptd(ptd_in).named_data[flipped]
        got = written.read_bytes()[entry.offset : entry.offset + want.nbytes]
        assert got == ptd_in.read_bytes()[want.offset : want.offset + want.nbytes], folder
    with pytest.raises(MethodSetError, match="'model.pte' names 3 inputs"):
        share_files(
            [p for p, _ in pairs], tmp_path / "again", ptd_paths=[f"model.pte={pairs[0][1]}"]
        )


def test_an_output_that_would_replace_an_input_is_refused(tmp_path):
    a = _copy("plain", "dirty", tmp_path / "a.pte")
    b = _copy("clean", "dirty", tmp_path / "b.pte")
    with pytest.raises(OutputFileError, match="never overwrites its input"):
        share_files([a, b], tmp_path)
    with pytest.raises(OutputFileError, match="given twice"):
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
    code = main(
        [
            "audit",
            str(out / "a.pte"),
            str(out / "b.pte"),
            "--data",
            str(ptd),
            "--max-dead-bytes",
            "0",
        ]
    )
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
