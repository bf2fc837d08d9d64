"""The command line's options and reports, as a new user meets them (issue 33).

Error messages in the user's words, not argparse's internal type names, in one line;
`audit --top`;
`prune --ptd-out` creating its directory as `share --out` does; `prune --json`'s
schema; `-v` on every command; help text on every `budget` option; the grammar of
`share`'s one line.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil

import pytest

from emitter_filter import cli
from tests.files import GOLDEN
from tests.layouts import build_constants

pytestmark = pytest.mark.filetools


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main([*map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "argv",
    [
        ["audit", "x.pte", "--max-dead-bytes", "-3"],
        ["explain", "x.pte", "--top", "-1"],
        ["diff", "a.pte", "b.pte", "--top", "many"],
        ["share", "a.pte", "--out", "d", "--min-bytes", "1.5"],
    ],
    ids=["--max-dead-bytes -3", "explain --top -1", "diff --top many", "share --min-bytes 1.5"],
)
def test_a_bad_count_is_refused_in_the_users_words(argv, capsys):
    code, _, err = _run(capsys, *argv)
    assert code == cli.EXIT_USAGE
    last = err.strip().splitlines()[-1]
    assert "_byte_count" not in last and "invalid" not in last, last
    assert "a whole number, 0 or more" in last, last


@pytest.mark.parametrize(
    "argv, prog",
    [
        ([], "emitter-filter"),
        (["nope"], "emitter-filter"),
        (["audit"], "emitter-filter audit"),
        (
            ["explain", "x.pte", "--value", "most", "--node-data", "x.json"],
            "emitter-filter explain",
        ),
        (["budget"], "emitter-filter budget"),
        (["diff", "a.pte", "b.pte", "--top", "many"], "emitter-filter diff"),
    ],
    ids=["no command", "unknown command", "no file", "bad choice", "no action", "bad count"],
)
def test_a_usage_error_is_one_line_naming_its_help(argv, prog, capsys):
    code, out, err = _run(capsys, *argv)
    assert (code, out) == (cli.EXIT_USAGE, "")
    assert err.count("\n") == 1 and err.startswith(f"{prog}: "), err
    assert err.endswith(f"(see {prog} --help)\n"), err


def test_audit_lists_every_dead_entry_unless_top_says_fewer(tmp_path, capsys):
    pte = tmp_path / "many.pte"
    constants = [bytes([i]) * 32 for i in range(26)]
    pte.write_bytes(build_constants(constants, frozenset(range(1, 26))))
    code, out, _ = _run(capsys, "audit", pte)
    assert code == 0
    assert "dead entries, largest first (25 of 25):" in out
    assert sum(1 for line in out.splitlines() if "constant" in line and "dead" not in line) >= 25
    code, out, _ = _run(capsys, "audit", pte, "--top", "3")
    assert code == 0
    assert "dead entries, largest first (3 of 25; 22 more with --top 25 or --json):" in out


def _plain(tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    for case in ("plain", "clean"):
        shutil.copyfile(GOLDEN / case / "dirty" / "model.pte", inputs / f"{case}.pte")
    return inputs / "plain.pte", inputs / "clean.pte"


def test_prune_creates_a_missing_ptd_out_directory_as_share_creates_out(tmp_path, capsys):
    pte = tmp_path / "external.pte"
    ptd = tmp_path / "external.ptd"
    for file in (GOLDEN / "external" / "dirty").iterdir():
        shutil.copyfile(file, tmp_path / f"external{file.suffix}")
    out = tmp_path / "new" / "ptd"
    code, _, err = _run(
        capsys, "prune", pte, "-o", tmp_path / "p.pte", "--data", ptd, "--ptd-out", out
    )
    assert (code, err) == (0, "")
    assert (out / "external.ptd").is_file()


def test_prune_json_says_its_schema_as_the_other_json_outputs_do(tmp_path, capsys):
    pte, _ = _plain(tmp_path)
    code, out, _ = _run(capsys, "prune", pte, "-o", tmp_path / "p.pte", "--json")
    assert code == 0
    assert json.loads(out)["schema"] == "emitter-filter-prune/1"


@pytest.mark.parametrize("command", ["share", "run"])
def test_share_and_run_take_v_after_the_command_as_the_others_do(command, tmp_path, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    if command == "share":
        pte, other = _plain(tmp_path)
        code, _, err = _run(capsys, "share", "-v", pte, other, "--out", tmp_path / "s")
        assert code == 0, err
        # Quiet without -v: share prints its own summary.
        assert any(
            r.levelno == logging.INFO and "programs" in r.getMessage() for r in caplog.records
        )
    else:
        pytest.importorskip("executorch")
        script = tmp_path / "script.py"
        script.write_text("import sys\nprint(sys.argv[1:])\n")
        # The first -vv is run's, what follows the script is the script's.
        code, out, err = _run(capsys, "run", "-vv", script, "-v")
        assert code == 0, err
        assert out.strip() == "['-v']"
        assert logging.getLogger("emitter_filter").getEffectiveLevel() == logging.DEBUG
    assert "-v, --verbose" in _help(capsys, command)


def _help(capsys, *command) -> str:
    assert cli.main([*command, "--help"]) == 0
    return capsys.readouterr().out


def _subcommand(parser: argparse.ArgumentParser, *names: str) -> argparse.ArgumentParser:
    for name in names:
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = commands.choices[name]
    return parser


@pytest.mark.parametrize("action", ["write", "check"])
def test_every_budget_option_has_help_text(action):
    parser = _subcommand(cli._build_parser(), "budget", action)
    bare = [a.option_strings or [a.dest] for a in parser._actions if not a.help]
    assert bare == [], f"budget {action}: no help text for {bare}"


def test_share_of_one_program_with_nothing_to_share_reads_as_english(tmp_path, capsys):
    pte, _ = _plain(tmp_path)
    code, out, _ = _run(capsys, "share", pte, "--out", tmp_path / "s")
    assert code == 0
    assert out.startswith("1 program: ")
    assert "no .ptd" not in out and "1 programs" not in out
    assert "nothing stored once" in out, out
