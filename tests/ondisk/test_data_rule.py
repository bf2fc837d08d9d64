"""The one rule for the `.ptd` files a program reads (`data_files`), through every command.

A program reads the `.ptd` files given for it (`--data`), else the `.ptd` beside it with its
stem, else none; `--no-data-beside` turns the second off. Built from the golden files,
without torch: `model.pte` of the `external` case with its `.ptd` beside it (`beside`), the
same read without it (`off`), and the `plain` program with that `.ptd` beside it, none of
whose keys it reads (`stale`: what a `merge --ptd` leaves before a `merge --inline` to the
same name).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from emitter_filter.cli import main
from emitter_filter.ondisk.read import data_files
from emitter_filter.ondisk.read.read_ptd import read_ptd
from tests.files import GOLDEN, saved
from tests.realworld import REALWORLD, needs_realworld

pytestmark = pytest.mark.filetools

EXTERNAL_PTD = saved(GOLDEN / "external" / "dirty")[1][0]


def _program(
    directory: Path,
    case: str = "external",
    name: str = "model",
    ptd: Path | None = EXTERNAL_PTD,
    state: str = "dirty",
) -> Path:
    """The golden `case` as `directory/name.pte`, with `ptd` beside it as `name.ptd`."""
    directory.mkdir(parents=True, exist_ok=True)
    pte = directory / f"{name}.pte"
    shutil.copyfile(saved(GOLDEN / case / state)[0], pte)
    if ptd is not None:
        shutil.copyfile(ptd, pte.with_suffix(".ptd"))
    return pte


def _case(tmp_path: Path, case: str) -> tuple[Path, list[str]]:
    if case == "stale":
        return _program(tmp_path / "in", "plain"), []
    return _program(tmp_path / "in"), ["--no-data-beside"] if case == "off" else []


def _json(capsys, *argv) -> tuple[int, dict, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if code == 0 else None), captured.err


# --- the rule itself -------------------------------------------------------------------


def test_a_program_reads_what_is_given_else_the_ptd_beside_it_else_none(tmp_path):
    a = _program(tmp_path, name="a")
    b = _program(tmp_path, name="b", ptd=None)
    shutil.copyfile(EXTERNAL_PTD, tmp_path / "other.ptd")
    assert data_files.data_files_for([a, b]) == [[str(a.with_suffix(".ptd"))], []]  # not other.ptd
    assert data_files.data_files_for([a, b], beside=False) == [[], []]
    given = data_files.data_files_for([a, b], [f"b.pte={tmp_path / 'other.ptd'}"])
    assert given == [[str(a.with_suffix(".ptd"))], [str(tmp_path / "other.ptd")]]
    # Given twice, or under two names: read once.
    twice = data_files.data_files_for([a], [str(tmp_path / "other.ptd"), f"{tmp_path}/./other.ptd"])
    assert twice == [[str(tmp_path / "other.ptd")]]


def test_programs_form_a_set_only_where_they_read_a_common_data_file():
    assert data_files.sets_of([["x.ptd"], [], ["y.ptd"], ["x.ptd", "z.ptd"], ["z.ptd"]]) == [
        [0, 3, 4],
        [1],
        [2],
    ]


# --- one count, every command ------------------------------------------------------------


@pytest.mark.parametrize("case", ["beside", "off", "stale"])
def test_audit_explain_and_prune_count_the_same_dead_bytes(tmp_path, capsys, case):
    pte, flags = _case(tmp_path, case)
    ptd = [str(pte.with_suffix(".ptd"))] if case != "off" else []
    code, audit, err = _json(capsys, "audit", pte, *flags, "--json")
    assert (code, err) == (0, "")
    assert audit["data"] == [{"program": str(pte), "data": ptd}]
    _, explain, _ = _json(capsys, "explain", pte, *flags, "--json")
    assert explain["data"] == audit["data"]
    out = tmp_path / "out"
    out.mkdir()
    _, pruned, _ = _json(capsys, "prune", pte, "-o", out / "model.pte", *flags, "--json")
    assert pruned["data"] == audit["data"]
    assert audit["dead_bytes"] > 0
    # Read without its .ptd, explain sizes the external tensors from their shapes, outside the
    # files: dead there too.
    dead = explain["status"]["dead"] + sum(
        p["bytes"] for p in explain["outside"] if p["status"] == "dead"
    )
    assert audit["dead_bytes"] == dead == pruned["dropped_bytes"]
    # The .ptd beside IN.pte is written pruned beside OUT.pte (none left live: none written),
    # so that the gate passes on what prune wrote.
    assert (out / "model.ptd").exists() == (case == "beside")
    assert main(["audit", str(out / "model.pte"), *flags, "--max-dead-bytes", "0"]) == 0


def test_a_stale_ptd_beside_a_program_is_dead_until_pruned_or_not_looked_for(tmp_path, capsys):
    pte, _ = _case(tmp_path, "stale")
    ptd_bytes = sum(e.nbytes for e in read_ptd(pte.with_suffix(".ptd")).named_data.values())
    _, stale, _ = _json(capsys, "audit", pte, "--json")
    _, off, _ = _json(capsys, "audit", pte, "--no-data-beside", "--json")
    assert stale["dead_bytes"] - off["dead_bytes"] >= ptd_bytes // 2 > 0


EVERY_COMMAND = {
    "audit": ["audit", "{pte}", "--json"],
    "explain": ["explain", "{pte}", "--json"],
    "prune": ["prune", "{pte}", "-o", "{out}/p.pte", "--json"],
    "diff": ["diff", "{pte}", "{pte}", "--json"],
    "budget": ["budget", "write", "{pte}", "-o", "{out}/budget.json"],
    "share": ["share", "{pte}", "--out", "{out}/s", "--json"],
    "merge": ["merge", "{pte}", "-o", "{out}/m.pte", "--inline", "--json"],
    "split": ["split", "{pte}", "--method", "forward", "-o", "{out}/x.pte", "--json"],
}


@pytest.mark.parametrize("case", ["beside", "off", "stale"])
@pytest.mark.parametrize("command", EVERY_COMMAND)
def test_every_command_reads_the_ptd_beside_a_program_unless_told_not_to(
    tmp_path, capsys, command, case
):
    pte, flags = _case(tmp_path, case)
    read = [] if case == "off" else [str(pte.with_suffix(".ptd"))]
    out = tmp_path / "out"
    out.mkdir()
    code = main([a.format(pte=pte, out=out) for a in EVERY_COMMAND[command]] + flags)
    captured = capsys.readouterr()
    # The external program: split refuses its tensors in a .ptd; without its .ptd, the
    # writers that need the bytes refuse it. One line, naming the .ptd where one was read.
    if (command == "split" and case == "beside") or (
        command in ("share", "merge", "split") and case == "off"
    ):
        assert code == 2 and captured.err.count("\n") == 1 and ".ptd" in captured.err
        assert all(part in captured.err for part in read)
        return
    assert code == 0, captured.err
    if command == "budget":
        assert json.loads((out / "budget.json").read_text())["files"][str(pte)]["data"] == read
        return
    pairs = json.loads(captured.out)["data"]
    assert {(p["program"], tuple(p["data"])) for p in pairs} == {(str(pte), tuple(read))}


@pytest.mark.parametrize(
    "argv",
    [
        ["audit", "{pte}"],
        ["explain", "{pte}"],
        ["diff", "{pte}", "{pte}"],
        ["prune", "{pte}", "-o", "{out}/p.pte"],
        ["budget", "write", "{pte}", "-o", "{out}/budget.json"],
        ["share", "{pte}", "{other}", "--out", "{out}/s"],
        ["merge", "{pte}", "-o", "{out}/m.pte"],
        ["split", "{pte}", "--method", "forward", "-o", "{out}/x.pte"],
    ],
    ids=lambda argv: " ".join(argv[:2]) if argv[0] == "budget" else argv[0],
)
def test_an_unreadable_ptd_beside_a_program_is_one_warning(tmp_path, capsys, caplog, argv):
    pte = _program(tmp_path / "in", "plain", ptd=None)
    pte.with_suffix(".ptd").write_bytes(b"not a .ptd: a stray file of this name")
    other = _program(tmp_path / "other", "clean", name="other", ptd=None)
    for out, flags in (("out", []), ("off", ["--no-data-beside"])):
        (tmp_path / out).mkdir()
        fill = {"pte": pte, "other": other, "out": tmp_path / out}
        caplog.clear()
        assert main([a.format(**fill) for a in argv] + flags) == 0
        assert capsys.readouterr().err == ""
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        if flags:
            assert warnings == []
        else:
            assert len(warnings) == 1 and "read as if it had no .ptd beside it" in warnings[0]


def test_the_warning_is_the_one_line_on_stderr(tmp_path):
    pte = _program(tmp_path, "plain", ptd=None)
    pte.with_suffix(".ptd").write_bytes(b"not a .ptd")
    for command in (["audit", pte], ["explain", pte], ["diff", pte, pte]):
        run = subprocess.run(
            [sys.executable, "-m", "emitter_filter", *map(str, command)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert run.returncode == 0 and run.stderr.count("\n") == 1, run.stderr
        assert run.stderr.startswith(
            f"WARNING emitter_filter.ondisk.read.data_files: {pte}: read as if it had no .ptd beside it"
        )


@pytest.mark.parametrize(
    "argv",
    [
        ["audit", "{pte}", "--data", "{ptd}"],
        ["explain", "{pte}", "--data", "{ptd}"],
        ["diff", "{pte}", "{pte}", "--old-data", "{ptd}"],
        ["prune", "{pte}", "-o", "{out}/p.pte", "--data", "{ptd}", "--ptd-out", "{out}"],
    ],
    ids=lambda argv: argv[0],
)
def test_an_unreadable_ptd_given_is_an_error_in_one_line(tmp_path, capsys, argv):
    pte = _program(tmp_path / "in", "plain", ptd=None)
    ptd = tmp_path / "in" / "model.ptd"
    ptd.write_bytes(b"not a .ptd")
    (tmp_path / "out").mkdir()
    fill = {"pte": pte, "ptd": ptd, "out": tmp_path / "out"}
    assert main([a.format(**fill) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(ptd) in err
    assert list((tmp_path / "out").iterdir()) == []


@needs_realworld
def test_executorch_linear_pte_with_its_0_6_ptd_beside_it(tmp_path, capsys, caplog):
    """ExecuTorch's extension/module/test/resources/linear.pte and its 0.6-layout .ptd."""
    source = Path(REALWORLD) / "pytorch__extension_module_test_resources_linear"
    pte = tmp_path / "linear.pte"
    shutil.copyfile(source.with_suffix(".pte"), pte)
    shutil.copyfile(source.with_suffix(".ptd"), tmp_path / "linear.ptd")
    for argv in (["audit", pte], ["explain", pte], ["diff", pte, pte]):
        caplog.clear()
        assert main([str(a) for a in argv]) == 0
        assert capsys.readouterr().err == ""
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert "read as if it had no .ptd beside it" in warnings[0]
        # audit says too which keys the runtime will then miss (issue 55, finding 6).
        assert len(warnings) == (2 if argv[0] == "audit" else 1), warnings
        if argv[0] == "audit":
            assert "the runtime refuses the methods that read them" in warnings[1]
    assert main(["audit", str(pte), "--data", str(tmp_path / "linear.ptd")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_the_info_line_about_the_ptd_beside_a_program_only_with_v(tmp_path, caplog):
    pte = _program(tmp_path)
    for argv, said in ((["audit", str(pte)], False), (["-v", "audit", str(pte)], True)):
        caplog.clear()
        assert main(argv) == 0
        assert any("the .ptd beside it" in r.getMessage() for r in caplog.records) == said


def test_explain_names_the_data_each_program_reads_in_its_header(tmp_path, capsys):
    pte = _program(tmp_path)
    assert main(["explain", str(pte)]) == 0
    assert capsys.readouterr().out.splitlines()[1] == f"{pte} reads {pte.with_suffix('.ptd')}"
    assert main(["explain", str(pte), "--no-data-beside"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == f"{pte} reads no .ptd"


# --- sets -------------------------------------------------------------------------------


def test_a_program_is_judged_alone_whatever_batch_it_is_in(tmp_path, capsys):
    d1 = _program(tmp_path / "d1", "plain", ptd=None)
    d2 = _program(tmp_path / "d2", "plain", ptd=None)
    x = _program(
        tmp_path / "x", "external", state="pruned", ptd=saved(GOLDEN / "external" / "pruned")[1][0]
    )
    _, alone, _ = _json(capsys, "audit", d1, "--json")
    limit = str(alone["dead_bytes"])
    for batch in ([d1, d2], [d1, d2, x], [x, d2, d1]):
        code = main(["audit", *map(str, batch), "--max-dead-bytes", limit])
        err = capsys.readouterr().err
        assert code == 0 and err == "", err
    # Over the limit, each says so alone, naming itself.
    assert main(["audit", str(d1), str(d2), str(x), "--max-dead-bytes", "0"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert [line.split(":")[1].strip() for line in err] == [str(d1), str(d2)]


def test_programs_that_read_a_common_ptd_are_judged_as_one_set(tmp_path, capsys):
    a = _program(tmp_path, "plain", name="a", ptd=None)
    b = _program(tmp_path, "clean", name="b", ptd=None)
    assert main(["share", str(a), str(b), "--out", str(tmp_path / "s"), "--min-bytes", "1"]) == 0
    capsys.readouterr()
    shared = [tmp_path / "s" / "a.pte", tmp_path / "s" / "b.pte"]
    code, document, _ = _json(
        capsys, "audit", *shared, "--data", tmp_path / "s" / "shared.ptd", "--json"
    )
    assert code == 0 and [p["path"] for p in document["programs"]] == list(map(str, shared))
    assert [d["data"] for d in document["data"]] == [[str(tmp_path / "s" / "shared.ptd")]] * 2


def test_diff_of_directories_charges_no_program_its_neighbours_ptd(tmp_path, capsys):
    for side in ("old", "new"):
        _program(tmp_path / side, name="a")
        _program(tmp_path / side, "plain", name="b", ptd=None)
    code, document, _ = _json(capsys, "diff", tmp_path / "old", tmp_path / "new", "--json")
    assert code == 0
    b = document["programs"]["b.pte"]
    assert b["old"]["bytes"] == (tmp_path / "old" / "b.pte").stat().st_size
    pairs = {
        Path(p["program"]).name: p["data"]
        for p in document["data"]
        if Path(p["program"]).parent.name == "old"
    }
    assert pairs["b.pte"] == [] and pairs["a.pte"] == [str(tmp_path / "old" / "a.ptd")]


# --- gates ------------------------------------------------------------------------------


def test_budget_and_diff_both_see_a_ptd_grow(tmp_path, capsys, monkeypatch):
    _, (pruned_ptd,) = saved(GOLDEN / "external" / "pruned")
    old = _program(tmp_path / "old", "external", state="pruned", ptd=pruned_ptd)
    new = _program(tmp_path / "new", "external", state="pruned", ptd=EXTERNAL_PTD)
    monkeypatch.chdir(tmp_path)
    assert main(["budget", "write", "old/model.pte", "-o", "budget.json"]) == 0
    record = json.loads((tmp_path / "budget.json").read_text())["files"]["old/model.pte"]
    assert record["bytes"] == old.stat().st_size + pruned_ptd.stat().st_size
    shutil.copytree(tmp_path / "new", tmp_path / "old", dirs_exist_ok=True)  # the .ptd grew
    capsys.readouterr()
    assert main(["budget", "check", "old/model.pte", "--budget", "budget.json"]) == 1
    assert "over budget" in capsys.readouterr().out
    _program(tmp_path / "was", "external", state="pruned", ptd=pruned_ptd)
    assert main(["diff", str(tmp_path / "was" / "model.pte"), str(new), "--max-growth", "0"]) == 1


# --- paths and copies -------------------------------------------------------------------


def test_a_ptd_under_a_directory_with_an_equals_sign_through_every_command(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    run = Path("run=3")
    a = _program(run, name="a")
    b = _program(run, name="b")
    p = _program(run, "plain", name="p", ptd=None)
    for argv in (
        ["audit", a, "--data", f"{a}={a.with_suffix('.ptd')}"],
        ["audit", a, "--data", a.with_suffix(".ptd")],
        [
            "audit",
            a,
            b,
            "--data",
            f"{a}={a.with_suffix('.ptd')}",
            "--data",
            f"{b}={b.with_suffix('.ptd')}",
        ],
        ["explain", a, "--data", f"{a}={a.with_suffix('.ptd')}"],
        ["explain", a, b, "--data", f"{b}={b.with_suffix('.ptd')}"],
        ["prune", a, "-o", "pruned.pte", "--data", a.with_suffix(".ptd"), "--ptd-out", "out"],
        ["diff", a, b, "--old-data", a.with_suffix(".ptd"), "--new-data", b.with_suffix(".ptd")],
        ["budget", "write", a, "-o", "budget.json", "--data", f"{a}={a.with_suffix('.ptd')}"],
        [
            "share",
            a,
            b,
            "--out",
            "shared",
            "--data",
            f"{a}={a.with_suffix('.ptd')}",
            "--data",
            f"{b}={b.with_suffix('.ptd')}",
        ],
        [
            "merge",
            a,
            "-o",
            "merged.pte",
            "--data",
            f"{a}={a.with_suffix('.ptd')}",
            "--ptd-out",
            "merged.ptd",
        ],
        [
            "split",
            p,
            "--method",
            "forward",
            "-o",
            "split.pte",
            "--data",
            f"{p}={a.with_suffix('.ptd')}",
        ],
    ):
        assert main([str(x) for x in argv]) == 0, (argv, capsys.readouterr().err)
        assert capsys.readouterr().err == ""


def _flipped(ptd: Path, to: Path) -> Path:
    """A copy of `ptd` with the first byte of its first key's data changed."""
    data = bytearray(ptd.read_bytes())
    data[next(iter(read_ptd(ptd).named_data.values())).offset] ^= 0xFF
    to.write_bytes(bytes(data))
    return to


@pytest.mark.parametrize(
    "argv",
    [
        ["audit", "{pte}"],
        ["explain", "{pte}"],
        ["prune", "{pte}", "-o", "{out}/p.pte", "--ptd-out", "{out}"],
        ["budget", "write", "{pte}", "-o", "{out}/b.json"],
        ["share", "{pte}", "--out", "{out}/s"],
        ["merge", "{pte}", "-o", "{out}/m.pte", "--ptd-out", "{out}/m.ptd"],
        ["diff", "{pte}", "{pte}"],
    ],
    ids=lambda argv: argv[0],
)
def test_a_ptd_given_twice_or_its_copy_is_read_once_and_other_bytes_are_refused(
    tmp_path, capsys, argv
):
    pte = _program(tmp_path / "in", ptd=None)
    ptd = tmp_path / "in" / "model.ptd"
    shutil.copyfile(EXTERNAL_PTD, ptd)
    shutil.copyfile(EXTERNAL_PTD, tmp_path / "in" / "copy.ptd")
    other = _flipped(EXTERNAL_PTD, tmp_path / "in" / "other.ptd")
    data = "--old-data" if argv[0] == "diff" else "--data"
    for number, extra in enumerate(([ptd, ptd], [ptd, tmp_path / "in" / "copy.ptd"])):
        out = tmp_path / f"out{number}"
        out.mkdir()
        flags = [a for path in extra for a in (data, str(path))]
        assert main([a.format(pte=pte, out=out) for a in argv] + flags) == 0, capsys.readouterr()
        assert capsys.readouterr().err == ""
    out = tmp_path / "refused"
    out.mkdir()
    assert (
        main([a.format(pte=pte, out=out) for a in argv] + [data, str(ptd), data, str(other)]) == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds other bytes" in err
    assert list(out.iterdir()) == []


# --- one vocabulary ---------------------------------------------------------------------

COMMANDS = [
    ["audit"],
    ["explain"],
    ["prune"],
    ["diff"],
    ["budget", "write"],
    ["budget", "check"],
    ["share"],
    ["merge"],
    ["split"],
]
_OPTION = re.compile(r"^\s+(-\S+(?:, -\S+)*)(?: (\S+))?")


def _data_options(capsys, command) -> dict[str, str]:
    """Each option of `command --help` that names a data file: "input" or "output"."""
    assert main([*command, "--help"]) == 0
    roles = {}
    for line in capsys.readouterr().out.splitlines():
        found = _OPTION.match(line)
        if not found:
            continue
        names, metavar = found.group(1).split(", "), found.group(2) or ""
        if not any("ptd" in n or "data" in n for n in names) and ".ptd" not in metavar:
            continue
        output = metavar.startswith("OUT") or any(n.endswith("-out") for n in names)
        for name in names:
            roles[name] = "output" if output else "input"
    return roles


def test_no_option_names_an_input_in_one_command_and_an_output_in_another(capsys):
    roles: dict[str, set[str]] = {}
    for command in COMMANDS:
        for name, role in _data_options(capsys, command).items():
            roles.setdefault(name, set()).add(role)
    assert {name for name, found in roles.items() if len(found) > 1} == set()
    assert roles["--data"] == {"input"} and roles["--ptd-out"] == {"output"}
    every = [set(_data_options(capsys, c)) for c in COMMANDS if c != ["budget", "check"]]
    assert all("--no-data-beside" in options for options in every)


@pytest.mark.parametrize("command", ["share", "merge"])
def test_ptd_where_it_named_an_output_stops_with_a_hint(tmp_path, capsys, command):
    pte = _program(tmp_path, "plain", ptd=None)
    argv = [
        command,
        str(pte),
        "--ptd",
        "x.ptd",
        *(["--out", str(tmp_path / "o")] if command == "share" else ["-o", "o.pte"]),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--ptd-out x.ptd" in err


def test_ptd_where_it_named_an_input_still_works_with_one_deprecation_line(tmp_path, capsys):
    pte = _program(tmp_path)
    assert main(["audit", str(pte), "--ptd", str(pte.with_suffix(".ptd")), "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "say --data" in captured.err
    assert json.loads(captured.out)["data"][0]["data"] == [str(pte.with_suffix(".ptd"))]


# --- share with the data beside its programs ---------------------------------------------


def test_share_prune_reads_and_prunes_the_ptd_beside_each_program(tmp_path, capsys):
    a = _program(tmp_path, name="a")
    b = _program(tmp_path, name="b")
    code, report, err = _json(
        capsys, "share", "--prune", a, b, "--out", tmp_path / "s", "--min-bytes", "1", "--json"
    )
    assert code == 0, err
    assert [p["data"] for p in report["programs"]] == [
        [str(a.with_suffix(".ptd"))],
        [str(b.with_suffix(".ptd"))],
    ]
    outputs = [tmp_path / "s" / "a.pte", tmp_path / "s" / "b.pte"]
    assert (
        main(
            [
                "audit",
                *map(str, outputs),
                "--data",
                str(tmp_path / "s" / "shared.ptd"),
                "--max-dead-bytes",
                "0",
            ]
        )
        == 0
    )


def test_explain_audit_and_share_count_the_same_bytes_stored_twice(tmp_path, capsys):
    a = _program(tmp_path, "plain", name="a", ptd=None)
    b = _program(tmp_path, "clean", name="b", ptd=None)
    _, explained, _ = _json(capsys, "explain", a, b, "--min-bytes", "1", "--json")
    assert main(["audit", str(a), str(b), "--min-bytes", "1"]) == 0
    audit_line = capsys.readouterr().out.splitlines()[-1]
    _, shared, _ = _json(
        capsys, "share", a, b, "--out", tmp_path / "s", "--min-bytes", "1", "--json"
    )
    assert 0 < explained["status"]["duplicated"] == shared["shared_bytes"]
    assert f": {shared['shared_bytes']:,} B stored in more than one file" in audit_line
    outputs = [tmp_path / "s" / "a.pte", tmp_path / "s" / "b.pte"]
    _, after, _ = _json(
        capsys,
        "explain",
        *outputs,
        "--data",
        tmp_path / "s" / "shared.ptd",
        "--min-bytes",
        "1",
        "--json",
    )
    assert after["status"]["duplicated"] == 0


@pytest.mark.parametrize("kind", ["directory", "dangling-link", "fifo"])
def test_what_is_not_a_file_named_as_the_ptd_beside_a_program_is_one_warning(
    tmp_path, caplog, kind
):
    """Issue 55, finding 9: a truncated `.ptd` was a warning, a directory, a link to
    nothing or a FIFO under its name was silence; in each, the weights moved."""
    pte = _program(tmp_path, "plain", ptd=None)
    named = pte.with_suffix(".ptd")
    if kind == "directory":
        named.mkdir()
    elif kind == "fifo":
        os.mkfifo(named)
    else:
        named.symlink_to(tmp_path / "gone.ptd")
    caplog.clear()
    assert main(["audit", str(pte)]) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert f"{pte}: read as if it had no .ptd beside it: {named}: " in warnings[0]
    expected = {"directory": "a directory", "fifo": "a FIFO", "dangling-link": "does not exist"}
    assert expected[kind] in warnings[0]
