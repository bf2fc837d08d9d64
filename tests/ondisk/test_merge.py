"""`merge` and `split` on files built in code and on the golden files, without torch.

What the runtime computes with merged files is `tests/inprocess/test_merge_load.py`'s.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from pathlib import Path

import pytest

from emitter_filter.cli import main
from emitter_filter.errors import MethodSetError, PteFormatError
from emitter_filter.ondisk.audit import audit_file
from emitter_filter.ondisk.merge import merge_files
from emitter_filter.ondisk.method_names import parse_method
from emitter_filter.ondisk.prune import prune_file
from emitter_filter.ondisk.read.read_pte import read_pte
from emitter_filter.ondisk.split import split_file
from emitter_filter.program.reachability import DataSpace
from tests.files import GOLDEN, saved
from tests.layouts import build_constants, with_program_changed

pytestmark = pytest.mark.filetools

# Two programs with the 256-byte weight W in common, each with a dead constant.
W, A, B = bytes(range(256)), bytes(range(1, 129)), bytes(range(2, 66))


def _program(path: Path, constants: list[bytes], dead=frozenset({0}), name="forward") -> Path:
    def rename(program):
        program.executionPlan[0].name = name

    data = build_constants([bytes(32 * [7 + len(constants)]), *constants], dead)
    path.write_bytes(with_program_changed(data, rename) if name != "forward" else data)
    return path


@pytest.fixture
def pair(tmp_path) -> list[Path]:
    return [_program(tmp_path / "a.pte", [W, A]), _program(tmp_path / "b.pte", [W, B], name="b")]


def _plans(path) -> list[str]:
    return [plan.name for plan in read_pte(path).plans]


def _constants(path) -> list[bytes]:
    data, pte = Path(path).read_bytes(), read_pte(path)
    return [
        data[e.offset : e.offset + e.nbytes]
        for i, e in sorted(pte.entries[DataSpace.CONSTANT].items())
        if i
    ]


def test_the_merged_file_has_every_method_and_each_constant_once(pair, tmp_path):
    out = tmp_path / "out.pte"
    report = merge_files(pair, out)
    assert _plans(out) == ["forward", "b"]
    assert sorted(_constants(out)) == sorted([W, A, B])
    assert audit_file(out).dead_bytes == 0
    assert report.stored_once == len(W)
    assert report.dropped == sum(audit_file(p).dead_bytes for p in pair) > 0
    assert report.bytes_after == out.stat().st_size < report.bytes_before


def test_a_method_name_two_inputs_use_is_refused_naming_both_and_the_fix(tmp_path, capsys):
    a = _program(tmp_path / "a.pte", [W])
    b = _program(tmp_path / "b.pte", [A])
    out = tmp_path / "out.pte"
    assert main(["merge", str(a), str(b), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(a) in err and str(b) in err
    assert not out.exists()
    command = shlex.split(err.split(": emitter-filter ")[1])
    assert command[:3] == ["merge", str(a), str(b)]
    assert main(command) == 0
    assert _plans(out) == ["forward", "forward_b"]


def test_method_renames_by_file_name_and_training_methods_follow(tmp_path):
    a = _program(tmp_path / "a.pte", [W])
    b = _program(tmp_path / "b.pte", [A], name="__et_training_fqn_forward")
    c = _program(tmp_path / "c.pte", [B])
    trained = tmp_path / "trained.pte"
    merge_files([a, b], trained)
    assert _plans(trained) == ["forward", "__et_training_fqn_forward"]
    out = tmp_path / "out.pte"
    # The runtime finds a method's training methods by its name: they are renamed with it.
    merge_files([trained, c], out, methods=["decode=trained.pte:forward"])
    assert _plans(out) == ["decode", "__et_training_fqn_decode", "forward"]
    split_file(out, tmp_path / "decode.pte", ["decode"])
    assert _plans(tmp_path / "decode.pte") == ["decode", "__et_training_fqn_decode"]
    # Where a training method is what clashes, the fix offered renames its method.
    with pytest.raises(MethodSetError, match=r"--method forward_trained=\S*trained.pte:forward$"):
        merge_files([b, trained], tmp_path / "clash.pte")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("x=nothere.pte:forward", "'nothere.pte' is none of the inputs"),
        ("x=a.pte:nothere", "has no method 'nothere'"),
        ("x:a.pte", "expected NEW=FILE:METHOD"),
    ],
)
def test_a_rename_of_what_is_not_there_is_refused(pair, tmp_path, spec, message, capsys):
    out = tmp_path / "out.pte"
    assert main(["merge", *map(str, pair), "-o", str(out), "--method", spec]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_programs_of_different_versions_are_refused(pair, tmp_path):
    def version(program):
        program.version = 1

    newer = tmp_path / "newer.pte"
    newer.write_bytes(with_program_changed(pair[1].read_bytes(), version))
    with pytest.raises(MethodSetError, match=r"different Program.version \(.*a.pte 0, .*1\)"):
        merge_files([pair[0], newer], tmp_path / "out.pte")


def _bad_inputs(tmp_path: Path, good: Path) -> dict[str, Path]:
    data = good.read_bytes()
    paths = {"empty": b"", "truncated": data[: len(data) // 2], "malformed": b"x" * 200}
    bad = {}
    for name, content in paths.items():
        bad[name] = tmp_path / f"{name}.pte"
        bad[name].write_bytes(content)
    bad["directory"] = tmp_path / "directory"
    bad["directory"].mkdir()
    bad["fifo"] = tmp_path / "fifo"
    os.mkfifo(bad["fifo"])
    return bad


@pytest.mark.parametrize("kind", ["empty", "truncated", "malformed", "directory", "fifo"])
def test_a_bad_input_is_one_line_exit_2_and_nothing_written(pair, tmp_path, kind, capsys):
    bad = _bad_inputs(tmp_path, pair[0])[kind]
    out = tmp_path / "out.pte"
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["merge", str(pair[0]), str(bad), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert main(["split", str(bad), "--method", "forward", "-o", str(out)]) == 2
    assert capsys.readouterr().err.count("\n") == 1 and not out.exists()


def test_the_output_onto_an_input_is_refused(pair, capsys):
    before = pair[1].read_bytes()
    assert main(["merge", *map(str, pair), "-o", str(pair[1])]) == 2
    assert "never overwrites its input" in capsys.readouterr().err
    assert pair[1].read_bytes() == before


def test_equal_named_data_keys_with_other_bytes_are_refused(tmp_path):
    pte, _ = saved(GOLDEN / "xnnpack" / "dirty")
    data = bytearray(pte.read_bytes())
    entry = next(e for e in read_pte(pte).named_data if e.nbytes)
    data[entry.offset] ^= 0xFF
    other = tmp_path / "other.pte"
    other.write_bytes(bytes(data))
    with pytest.raises(PteFormatError, match=f"named data '{entry.key}' holds other bytes"):
        merge_files([pte, other], tmp_path / "out.pte", methods=["other=other.pte:forward"])
    assert not (tmp_path / "out.pte").exists()


def test_equal_named_data_is_stored_once(tmp_path):
    pte, _ = saved(GOLDEN / "xnnpack" / "dirty")
    out = tmp_path / "out.pte"
    report = merge_files([pte, pte], out, methods=["again=#2:forward"])
    prune_file(pte, tmp_path / "pruned.pte")
    merged, alone = read_pte(out), read_pte(tmp_path / "pruned.pte")
    assert sorted(e.key for e in merged.named_data) == sorted(e.key for e in alone.named_data)
    assert len(merged.delegates) == len(alone.delegates)
    assert report.stored_once >= sum(e.nbytes for e in alone.named_data)


CASES = ("plain", "xnnpack", "mutated", "clean")


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("state", ["dirty", "pruned"])
def test_merge_of_one_file_is_its_prune(case, state, tmp_path):
    pte, _ = saved(GOLDEN / case / state)
    merge_files([pte], tmp_path / "merged.pte")
    prune_file(pte, tmp_path / "pruned.pte")
    assert (tmp_path / "merged.pte").read_bytes() == (tmp_path / "pruned.pte").read_bytes()


def test_golden_programs_merged_split_and_merged_again(tmp_path):
    inputs = []
    for case in CASES:
        pte, _ = saved(GOLDEN / case / "dirty")
        inputs.append(tmp_path / f"{case}.pte")
        shutil.copyfile(pte, inputs[-1])
    out = tmp_path / "out.pte"
    merge_files(inputs, out, methods=[f"{c}={c}.pte:forward" for c in CASES])
    assert _plans(out) == list(CASES) and audit_file(out).dead_bytes == 0
    merge_files([out], tmp_path / "alone.pte")
    assert (tmp_path / "alone.pte").read_bytes() == out.read_bytes()
    parts = []
    for case, original in zip(CASES, inputs, strict=True):
        parts.append(tmp_path / f"{case}.part.pte")
        split_file(out, parts[-1], [case])
        assert _plans(parts[-1]) == [case] and audit_file(parts[-1]).dead_bytes == 0
        # The method reads what its input's did: its constants, byte for byte.
        prune_file(original, tmp_path / f"{case}.pruned.pte")
        assert sorted(_constants(parts[-1])) == sorted(_constants(tmp_path / f"{case}.pruned.pte"))
    merge_files(parts, tmp_path / "again.pte")
    assert (tmp_path / "again.pte").read_bytes() == out.read_bytes()


def test_an_input_whose_ptd_is_not_given_is_refused(tmp_path, capsys):
    pte, _ = saved(GOLDEN / "external" / "dirty")
    assert main(["merge", str(pte), "-o", str(tmp_path / "out.pte")]) == 2
    assert re.search(
        r"reads \d+ tensor\(s\) from a .ptd: give the .ptd files", capsys.readouterr().err
    )


@pytest.mark.parametrize("specs", [["{ptd}"], ["a.pte={ptd}", "b.pte={ptd}"]])
def test_inputs_with_a_ptd_merge_into_one_ptd_or_inline(tmp_path, specs):
    golden, (ptd,) = saved(GOLDEN / "external" / "dirty")
    inputs = [tmp_path / "a.pte", tmp_path / "b.pte"]
    for path in inputs:
        shutil.copyfile(golden, path)
    data, methods = [spec.format(ptd=ptd) for spec in specs], ["b=b.pte:forward"]
    out, out_ptd, inline = tmp_path / "out.pte", tmp_path / "out.ptd", tmp_path / "inline.pte"
    report = merge_files(inputs, out, methods=methods, data=data, ptd_out=out_ptd)
    assert report.ptd_output == str(out_ptd) and _plans(out) == ["forward", "b"]
    assert audit_file(out, [out_ptd]).dead_bytes == 0
    # The .ptd holds what prune keeps of the input's, each key once.
    prune_file(golden, tmp_path / "pruned.pte", [ptd], tmp_path / "pruned")
    [pruned] = read_pte(tmp_path / "pruned.pte", [tmp_path / "pruned" / ptd.name]).ptd_files
    assert sorted(read_pte(out, [out_ptd]).ptd_files[0].named_data) == sorted(pruned.named_data)
    merge_files(inputs, inline, methods=methods, data=data, inline=True)
    merged = read_pte(inline)
    assert not merged.entries[DataSpace.EXTERNAL] and audit_file(inline).dead_bytes == 0
    # The tensors the .ptd held are now constants, once for both methods, byte for byte.
    weights = (tmp_path / "pruned" / ptd.name).read_bytes()
    held = [weights[e.offset : e.offset + e.nbytes] for e in pruned.named_data.values()]
    assert all(_constants(inline).count(blob) == 1 for blob in held)


def test_data_needs_one_place_to_go(tmp_path, capsys):
    pte, (ptd,) = saved(GOLDEN / "external" / "dirty")
    out = tmp_path / "out.pte"
    assert main(["merge", str(pte), "--data", str(ptd), "-o", str(out)]) == 2
    assert "give --ptd-out OUT.ptd or --inline" in capsys.readouterr().err
    assert (
        main(
            [
                "merge",
                str(pte),
                "--data",
                str(ptd),
                "-o",
                str(out),
                "--inline",
                "--ptd-out",
                str(tmp_path / "x.ptd"),
            ]
        )
        == 2
    )
    assert not out.exists()


def test_split_refuses_a_method_that_is_not_there_and_a_program_with_a_ptd(pair, tmp_path, capsys):
    assert main(["split", str(pair[0]), "--method", "nope", "-o", str(tmp_path / "o.pte")]) == 2
    assert "has no method 'nope' (it has forward)" in capsys.readouterr().err
    external, _ = saved(GOLDEN / "external" / "dirty")
    assert main(["split", str(external), "--method", "forward", "-o", str(tmp_path / "o.pte")]) == 2
    assert "merge --inline makes one" in capsys.readouterr().err
    assert not (tmp_path / "o.pte").exists()


def test_merge_json_lists_each_method_and_its_source(pair, tmp_path, capsys):
    assert main(["merge", *map(str, pair), "-o", str(tmp_path / "o.pte"), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["schema"] == "emitter-filter-merge/1"
    assert [(m["name"], m["source"]) for m in document["methods"]] == [
        ("forward", str(pair[0])),
        ("b", str(pair[1])),
    ]


def test_parse_method():
    assert parse_method("decode=dir/c:d.pte:forward") == ("decode", "dir/c:d.pte", "forward")


def test_explain_names_the_methods_that_read_each_constant(pair, tmp_path, capsys):
    from emitter_filter.ondisk.explain import explain_file

    out = tmp_path / "out.pte"
    merge_files(pair, out)
    data = out.read_bytes()
    methods = {
        data[p.offset : p.offset + p.nbytes]: p.methods
        for p in explain_file(out).parts
        if p.storage == "constant" and p.nbytes
    }
    assert methods == {W: ("forward", "b"), A: ("forward",), B: ("b",)}
    assert main(["explain", str(out), "--by", "method"]) == 0
    groups = capsys.readouterr().out.split("by method")[1]
    assert f"{len(W):>14,}  forward, b" in groups
    assert main(["explain", str(out), "--json"]) == 0
    parts = json.loads(capsys.readouterr().out)["parts"]
    assert {tuple(p["methods"]) for p in parts if p["storage"] == "values"} == {
        ("forward",),
        ("b",),
    }


def test_diff_of_two_merges_in_other_orders_matches_methods_by_name(pair, tmp_path):
    from emitter_filter.ondisk.diff import diff_files

    ab, ba = tmp_path / "ab.pte", tmp_path / "ba.pte"
    merge_files(pair, ab)
    merge_files(pair[::-1], ba)
    assert _plans(ab) == ["forward", "b"] and _plans(ba) == ["b", "forward"]
    changes = diff_files(ab, ba).changes
    # The same methods and constants, laid out in another order: nothing added or removed,
    # and each plan's sections matched with the section of the same name.
    assert all(c.old is not None and c.new is not None for c in changes)
    assert all(c.old.label == c.new.label for c in changes if c.old.storage == "values")


def test_constants_inline_in_constant_buffer_are_refused_by_name(pair, tmp_path, capsys):
    from emitter_filter._program_fbs.executorch_flatbuffer.Buffer import BufferT
    from emitter_filter.ondisk.read.read_pte import read_pte_program
    from tests.layouts import LIVE, build_program, pack

    program = read_pte_program(build_program(dead=False, where="placeholder").pte).program
    inline = BufferT()
    inline.storage = LIVE
    program.constantBuffer.append(inline)
    old = tmp_path / "old.pte"
    old.write_bytes(pack(program))
    out = tmp_path / "out.pte"
    assert (
        main(["merge", str(old), str(pair[0]), "-o", str(out), "--method", f"old={old}:forward"])
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(old) in err and "constant_buffer" in err
    assert not out.exists()


def test_a_placeholder_only_constant_buffer_input_comes_out_with_one_constant_segment(
    pair, tmp_path
):
    from emitter_filter.ondisk.read.read_pte import read_pte_program
    from tests.layouts import build_program

    old = tmp_path / "old.pte"
    old.write_bytes(build_program(dead=False, where="placeholder").pte)
    out = tmp_path / "out.pte"
    report = merge_files([old, pair[0]], out, methods=[f"old={old}:forward"])
    program = read_pte_program(out).program
    # The runtime refuses a program with both ("Only one should be used").
    assert not program.constantBuffer and len(program.constantSegment.offsets) == 3
    assert report.constant_buffer_inputs == (str(old),) and "constant_buffer" in report.summary()
    assert _constants(out) == [W, A]
