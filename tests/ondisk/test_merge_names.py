"""Which methods `merge` writes and how it names them (`merge_names`), without torch.

Programs as exporters write them: `forward` and constant methods (no instruction,
their value a constant), exported once per shape or per fine-tune, so most method
names are in every input and most of those methods are equal. What the runtime
computes with such files is `tests/inprocess/test_merge_exporters.py`'s.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest

from emitter_filter.cli import main
from emitter_filter.errors import MethodSetError
from emitter_filter.ondisk.audit import audit_file
from emitter_filter.ondisk.merge import merge_files
from emitter_filter.ondisk.merge_names import MethodClashes, choose_methods, resolving_flags
from emitter_filter.ondisk.read.data_files import input_of, unique_tails
from emitter_filter.ondisk.read.read_pte import read_pte
from emitter_filter.ondisk.split import split_file
from tests.layouts import build_constants, with_program_changed

pytestmark = pytest.mark.filetools

W, A, B = bytes(range(256)), bytes(range(1, 129)), bytes(range(2, 130))


def _one(path: Path, name: str, constants: list[bytes], *, constant: bool = False) -> Path:
    """A program of one method `name`: adding `constants` to its input, or (`constant`)
    returning the first of them as it is, as ExecuTorch writes a constant method."""

    def change(program):
        plan = program.executionPlan[0]
        plan.name = name
        if constant:
            plan.chains[0].instructions = []
            plan.outputs = plan.chains[0].outputs = [1]

    path.write_bytes(with_program_changed(build_constants(constants, frozenset()), change))
    return path


def _export(directory: Path, weights: list[bytes], dynamic: int, n_layers: int = 2) -> Path:
    """What an exporter writes: `forward` and two constant methods, one file."""
    directory.mkdir(parents=True, exist_ok=True)
    parts = [
        _one(directory / "f.part", "forward", weights),
        _one(directory / "n.part", "get_n_layers", [bytes(16 * [n_layers])], constant=True),
        _one(directory / "d.part", "enable_dynamic_shape", [bytes(16 * [dynamic])], constant=True),
    ]
    out = directory / "model.pte"
    merge_files(parts, out)
    for part in parts:
        part.unlink()
    return out


def _plans(path) -> list[str]:
    return [plan.name for plan in read_pte(path).plans]


@pytest.fixture
def pair(tmp_path) -> list[Path]:
    """A prefill and a decode: forward differs, get_n_layers is equal, enable_dynamic_shape
    differs."""
    prefill = shutil.move(_export(tmp_path / "p", [W, A], 1), tmp_path / "prefill.pte")
    decode = shutil.move(_export(tmp_path / "d", [W, B], 0), tmp_path / "decode.pte")
    return [Path(prefill), Path(decode)]


def test_equal_methods_are_written_once_and_the_report_says_so(pair, tmp_path, capsys):
    out = tmp_path / "out.pte"
    report = merge_files(
        pair,
        out,
        methods=["prefill=prefill.pte:forward", "decode=decode.pte:forward"],
        drops=["decode.pte:enable_dynamic_shape"],
    )
    assert _plans(out) == ["prefill", "get_n_layers", "enable_dynamic_shape", "decode"]
    assert [(m.name, m.same_in) for m in report.methods] == [
        ("prefill", ()),
        ("get_n_layers", (str(pair[1]),)),
        ("enable_dynamic_shape", ()),
        ("decode", ()),
    ]
    assert report.dropped_methods == ((str(pair[1]), "enable_dynamic_shape"),)
    assert "the same in several inputs, written once: get_n_layers" in report.summary()
    assert audit_file(out).dead_bytes == 0


def test_every_clash_is_in_one_line_whose_command_runs_as_printed(pair, tmp_path, capsys):
    out = tmp_path / "out.pte"
    assert main(["merge", *map(str, pair), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and not out.exists()
    assert "'forward' in" in err and "'enable_dynamic_shape' in" in err
    assert "get_n_layers" not in err.split(": emitter-filter ")[0]
    command = shlex.split(err.split(": emitter-filter ")[1])
    assert command[command.index("--drop") + 1] == f"{pair[1]}:enable_dynamic_shape"
    assert main(command) == 0
    assert _plans(out) == ["forward", "get_n_layers", "enable_dynamic_shape", "forward_decode"]


def test_a_prefill_and_decode_merge_with_their_two_names_and_one_flag_more(pair, tmp_path, capsys):
    out = tmp_path / "out.pte"
    names = ["--method", "prefill=prefill.pte:forward", "--method", "decode=decode.pte:forward"]
    assert main(["merge", *map(str, pair), "-o", str(out), *names]) == 2
    command = shlex.split(capsys.readouterr().err.split(": emitter-filter ")[1])
    assert len(command) == len(["merge", *pair, "-o", out, *names]) + 2
    assert main(command) == 0


@pytest.mark.parametrize("spell", ["#{n}", "{folder}/model.pte", "{path}"])
def test_inputs_of_one_name_are_named_by_number_or_by_tail(tmp_path, spell):
    inputs = [
        _export(tmp_path / folder, [W, blob], 1)
        for folder, blob in (("base", A), ("ft", B), ("ft2", bytes(range(3, 131))))
    ]
    spelled = [spell.format(n=n, folder=p.parent.name, path=p) for n, p in enumerate(inputs, 1)]
    out = tmp_path / "out.pte"
    report = merge_files(
        inputs,
        out,
        methods=[f"{p.parent.name}={s}:forward" for p, s in zip(inputs, spelled, strict=True)],
    )
    assert _plans(out) == ["base", "get_n_layers", "enable_dynamic_shape", "ft", "ft2"]
    assert report.methods[1].same_in == (str(inputs[1]), str(inputs[2]))


def test_a_prefix_names_every_method_not_written_once(pair, tmp_path):
    out = tmp_path / "out.pte"
    merge_files(pair, out, prefixes=["decode_=#2"])
    assert _plans(out) == [
        "forward",
        "get_n_layers",
        "enable_dynamic_shape",
        "decode_forward",
        "decode_enable_dynamic_shape",
    ]


def test_one_file_given_twice_is_one_method_or_named_apart_by_number(pair, tmp_path):
    once = tmp_path / "once.pte"
    report = merge_files([pair[0], pair[0]], once)
    assert _plans(once) == _plans(pair[0]) and len(report.methods) == 3
    twice = tmp_path / "twice.pte"
    merge_files([pair[0], pair[0]], twice, methods=["again=#2:forward"])
    assert _plans(twice) == [*_plans(pair[0]), "again"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--method", "one=prefill.pte:forward", "--method", "two=prefill.pte:forward"],
            "method 'forward' of {prefill} is named twice: by --method one=prefill.pte:forward and "
            "--method two=prefill.pte:forward",
        ),
        (["--method", "x=#1:forward", "--drop", "prefill.pte:forward"], "is named twice"),
        (
            ["--prefix", "p_=#2", "--method", "decode=decode.pte:forward"],
            "a method of {decode} is named twice: by --prefix p_=#2 and --method decode=",
        ),
        (["--prefix", "p_=#2", "--prefix", "q_=decode.pte"], "{decode} is named twice"),
        (
            ["--method", "get_n_layers=#1:forward"],
            "--method get_n_layers=#1:forward: {prefill} has a method 'get_n_layers' already",
        ),
        (
            ["--method", "enable_dynamic_shape=#2:forward"],
            "--method enable_dynamic_shape=#2:forward: {prefill} has a different method "
            "'enable_dynamic_shape'",
        ),
        (["--method", "x=nothere.pte:forward"], "'nothere.pte' is none of the inputs"),
        (["--drop", "#3:forward"], "'#3': there are 2 input(s), #1 to #2"),
        (["--method", "x=#1:nothere"], "{prefill} has no method 'nothere' (it has forward, "),
        (["--drop", "#1:nothere"], "--drop #1:nothere: {prefill} has no method 'nothere'"),
        (["--prefix", "p_"], "expected PREFIX=FILE"),
        (["--drop", "forward"], "expected FILE:METHOD"),
    ],
    ids=[
        "method-twice",
        "method-and-drop",
        "prefix-and-method",
        "prefix-twice",
        "onto-its-own-input",
        "onto-another-input",
        "no-file",
        "no-number",
        "no-method",
        "drop-no-method",
        "bad-prefix",
        "bad-drop",
    ],
)
def test_what_a_flag_cannot_mean_is_one_line_exit_2_nothing_written(
    pair, tmp_path, capsys, flags, message
):
    out = tmp_path / "out.pte"
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["merge", *map(str, pair), "-o", str(out), *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert message.format(prefill=pair[0], decode=pair[1]) in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_tail_that_names_several_inputs_is_refused_naming_them(tmp_path):
    inputs = [_export(tmp_path / folder, [W, A], 1) for folder in ("a", "b")]
    with pytest.raises(MethodSetError, match=r"'model.pte' names 2 inputs \(#1 .*, #2 .*\)"):
        merge_files(inputs, tmp_path / "out.pte", methods=["x=model.pte:forward"])


def test_input_of_reads_a_number_the_path_a_unique_tail():
    inputs = ["base/model.pte", "ft/model.pte", "/abs/ft2/model.pte", "x.pte"]
    assert [
        input_of(s, inputs)
        for s in (
            "#1",
            "#4",
            "ft/model.pte",
            "ft2/model.pte",
            "x.pte",
            "/abs/ft2/model.pte",
            "abs/ft2/model.pte",
        )
    ] == [0, 3, 1, 2, 3, 2, 2]
    for spec in ("model.pte", "#0", "#5", "t/model.pte", "../ft/model.pte"):
        with pytest.raises(MethodSetError):
            input_of(spec, inputs)
    assert unique_tails(inputs) == ["base/model.pte", "ft/model.pte", "ft2/model.pte", "x.pte"]


def _choose(originals, same=(), constant=(), **flags):
    inputs = [f"{n}.pte" for n in "abc"[: len(originals)]]
    return inputs, choose_methods(
        inputs,
        originals,
        same=lambda x, y: frozenset((x, y)) in same,
        constant=lambda m: m in constant,
        **flags,
    )


def test_equal_later_methods_that_clash_are_given_the_name_of_the_one_they_equal():
    # c's forward equals b's, both differ from a's: the fix names both alike, and then
    # writes them once.
    originals = [["forward"], ["forward"], ["forward"]]
    same = {frozenset({(1, 0), (2, 0)})}
    with pytest.raises(MethodClashes) as clash:
        _choose(originals, same)
    flags = resolving_flags(["a.pte", "b.pte", "c.pte"], originals, clash.value.clashes)
    assert flags == ["--method", "forward_b=b.pte:forward", "--method", "forward_b=c.pte:forward"]
    _, choice = _choose(
        originals,
        same,
        renames=[(f.split("=")[0], *f.split("=")[1].split(":")) for f in flags[1::2]],
    )
    assert choice.names[2] == [None] and choice.same_as[2, 0] == (1, 0)


def test_training_methods_follow_their_method_when_prefixed_or_dropped():
    originals = [["forward", "__et_training_fqn_forward"], ["forward", "__et_training_fqn_forward"]]
    _, choice = _choose(originals, prefixes=[("ft_", "b.pte")])
    assert choice.names[1] == ["ft_forward", "__et_training_fqn_ft_forward"]
    _, choice = _choose(originals, drops=[("b.pte", "forward")])
    assert choice.names[1] == [None, None]


def test_split_renames_as_it_cuts(pair, tmp_path, capsys):
    merged = tmp_path / "merged.pte"
    merge_files(pair, merged, prefixes=["decode_=#2"])
    out = tmp_path / "decode.pte"
    assert (
        main(
            [
                "split",
                str(merged),
                "--method",
                "forward=decode_forward",
                "--method",
                "get_n_layers",
                "-o",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    json.loads(capsys.readouterr().out)
    assert _plans(out) == ["get_n_layers", "forward"]
    # The cut method reads what decode's forward read, as decode.pte's forward does.
    alone = tmp_path / "alone.pte"
    split_file(pair[1], alone, ["forward", "get_n_layers"])
    assert out.stat().st_size == alone.stat().st_size


@pytest.mark.parametrize(
    ("methods", "message"),
    [
        (["forward=decode_forward", "forward"], "would both be named 'forward'"),
        (["a=forward", "b=forward"], "method 'forward' of {merged} is named twice"),
        (["forward=nothere"], "has no method 'nothere'"),
    ],
)
def test_split_refuses_renames_that_clash(pair, tmp_path, capsys, methods, message):
    merged = tmp_path / "merged.pte"
    merge_files(pair, merged, prefixes=["decode_=#2"])
    out = tmp_path / "out.pte"
    flags = [w for m in methods for w in ("--method", m)]
    assert main(["split", str(merged), *flags, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message.format(merged=merged) in err
    assert not out.exists()


def test_the_fix_for_inputs_of_one_name_names_them_by_their_folders(tmp_path, capsys):
    weights = (("base", A), ("ft", B), ("ft2", bytes(range(3, 131))))
    inputs = [_export(tmp_path / folder, [W, blob], 1) for folder, blob in weights]
    out = tmp_path / "out.pte"
    assert main(["merge", *map(str, inputs), "-o", str(out)]) == 2
    command = shlex.split(capsys.readouterr().err.split(": emitter-filter ")[1])
    assert command[-4:] == [
        "--method",
        f"forward_ft={inputs[1]}:forward",
        "--method",
        f"forward_ft2={inputs[2]}:forward",
    ]
    assert main(command) == 0
    assert _plans(out) == [
        "forward",
        "get_n_layers",
        "enable_dynamic_shape",
        "forward_ft",
        "forward_ft2",
    ]


def test_a_delegate_reading_other_named_data_is_another_method(tmp_path):
    from tests.files import GOLDEN, saved

    pte, _ = saved(GOLDEN / "xnnpack" / "dirty")
    copy = shutil.copyfile(pte, tmp_path / "copy.pte")
    report = merge_files([pte, copy], tmp_path / "once.pte")
    assert [(m.name, m.same_in) for m in report.methods] == [("forward", (str(copy),))]
    # Equal plans and blobs, but the weights the blob names hold other bytes.
    data = bytearray(pte.read_bytes())
    entry = next(e for e in read_pte(pte).named_data if e.nbytes)
    data[entry.offset] ^= 0xFF
    (tmp_path / "other.pte").write_bytes(bytes(data))
    with pytest.raises(MethodClashes, match="'forward' in"):
        merge_files([pte, tmp_path / "other.pte"], tmp_path / "out.pte")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--method", "a\nb=#1:forward"], "has a control character '\\n'"),
        (["--method", "__et_training_x=#1:forward"], "starts with '__et_training_'"),
        (["--prefix", "p\t=#1"], "has a control character '\\t'"),
        (
            ["--method", "a=#1:forward", "--method", "a=#2:forward"],
            "the name 'a' is given twice, to methods that differ: by --method a=#1:forward "
            "and --method a=#2:forward",
        ),
    ],
    ids=["newline", "training-prefix", "tab-in-prefix", "one-name-twice"],
)
def test_merge_refuses_a_new_name_no_method_can_have_or_one_given_twice(
    pair, tmp_path, capsys, flags, message
):
    """Issue 55, finding 10: these were written (a name with a newline; a method named as
    a training method's), or said one input "has a different method 'a'"."""
    out = tmp_path / "out.pte"
    assert main(["merge", *map(str, pair), "-o", str(out), *flags]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert message in line
    assert not out.exists()


def test_split_refuses_a_new_name_with_a_control_character(pair, tmp_path, capsys):
    out = tmp_path / "out.pte"
    assert main(["split", str(pair[0]), "--method", "a\rb=forward", "-o", str(out)]) == 2
    assert "has a control character '\\r'" in capsys.readouterr().err
    assert not out.exists()
