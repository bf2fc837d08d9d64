"""The command line as a new user meets it (issue 43): `--version`, an unknown option told
by the command it was given to, every usage error one line ending where its help is,
every command with a description; and hostile arguments (a method name that is not
text) one line, not a traceback."""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from emitter_filter import cli
from tests.files import GOLDEN

pytestmark = pytest.mark.filetools

PLAIN = str(GOLDEN / "plain" / "dirty" / "model.pte")


def _commands(parser=None, prefix=()):
    """(words, parser) of every command and action of `emitter-filter`, read from the parser."""
    parser = parser or cli._build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name), sub
                yield from _commands(sub, (*prefix, name))


COMMANDS = [words for words, _ in _commands()]


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main([*map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_version_is_the_installed_distributions(capsys):
    code, out, _ = _run(capsys, "--version")
    assert (code, out) == (0, f"emitter-filter {importlib.metadata.version('emitter_filter')}\n")


@pytest.mark.parametrize("words", [w for w in COMMANDS if w != ("run",)], ids=" ".join)
def test_an_unknown_option_keeps_its_command_and_points_at_its_help(words, capsys):
    prog = " ".join(("emitter-filter", *words))
    code, out, err = _run(capsys, *words, "--no-such-option")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith(f"{prog}: "), err
    assert err.endswith(f"(see {prog} --help)\n"), err


@pytest.mark.parametrize(
    "words, prog",
    [(w, " ".join(("emitter-filter", *w))) for w in COMMANDS],
    ids=[" ".join(w) for w in COMMANDS],
)
def test_every_command_says_what_it_does_in_its_help(words, prog, capsys):
    parser = dict(_commands())[words]
    assert parser.description and len(parser.description) > 40, prog


@pytest.mark.parametrize(
    "argv, prog",
    [
        (["prune", PLAIN, "-o", "x.pte", "--data", "a.ptd"], "emitter-filter prune"),
        (["run"], "emitter-filter run"),
        (["run", "-m"], "emitter-filter run"),
        (["explain", PLAIN, "--value", "dead"], "emitter-filter explain"),
        (["explain", PLAIN, PLAIN, "--node-data", "x.json"], "emitter-filter explain"),
        (["diff", PLAIN, PLAIN, "--max-growth", "lots"], "emitter-filter diff"),
        (["diff", str(GOLDEN), PLAIN], "emitter-filter diff"),
        (["diff", str(GOLDEN), str(GOLDEN), "--old-data", "a.ptd"], "emitter-filter diff"),
        (
            ["budget", "check", PLAIN, "--budget", "b.json", "--tolerance", "nan"],
            "emitter-filter budget check",
        ),
    ],
    ids=[
        "prune --data alone",
        "run alone",
        "run -m alone",
        "explain --value alone",
        "explain --node-data of a set",
        "diff --max-growth",
        "diff dir and file",
        "diff dirs --old-data",
        "budget --tolerance nan",
    ],
)
def test_a_usage_error_a_command_finds_ends_where_its_help_is(
    argv, prog, capsys, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(capsys, *argv)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith(f"{prog}: "), err
    assert err.endswith(f"(see {prog} --help)\n"), err


def test_a_method_name_that_is_not_text_is_one_line(tmp_path, capsys):
    other = tmp_path / "a.pte"
    shutil.copyfile(PLAIN, other)
    # What a shell passes for $'\xff\xfe': bytes Python decodes as surrogates.
    name = b"\xff\xfe".decode("utf-8", "surrogateescape")
    code, out, err = _run(
        capsys, "merge", PLAIN, other, "-o", tmp_path / "m.pte", "--method", f"{name}=a.pte:forward"
    )
    assert code == 2 and err.count("\n") == 1 and "is not UTF-8 text" in err, err
    assert not (tmp_path / "m.pte").exists()


def test_the_time_prune_reports_counts_no_import(tmp_path):
    # A 1.9 KB file was reported pruned "in 362-627 ms": numpy's import (flatbuffers
    # imports it) and the generated object API's were inside the clock.
    code = textwrap.dedent(
        f"""
        import sys, time
        from emitter_filter.ondisk import prune
        started = []
        late = []

        class Watch:
            def find_spec(self, name, path, target=None):
                if started:
                    late.append(name)
                return None

        def clock(real=time.perf_counter):
            started.append(True)
            return real()

        sys.meta_path.insert(0, Watch())
        prune.time = type(sys)("clock")
        prune.time.perf_counter = clock
        prune.prune_file({PLAIN!r}, {str(tmp_path / "out.pte")!r})
        assert started
        print(sorted(set(late)))
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[]\n", result.stdout


@pytest.mark.parametrize(
    "words, says",
    [
        (("merge",), ("put the method", "input FILE", "OUT.pte", "e.g. --method")),
        (("split",), ("keep the method", "IN.pte", "OUT.pte", "e.g. --method")),
        (("verify",), ("compare the method", "NEW.pte", "OLD.pte", "e.g. --method")),
    ],
    ids=["merge", "split", "verify"],
)
def test_each_commands_method_says_what_it_means_there(words, says):
    """`--method` picks a method to merge, to keep, or to compare: each help says which."""
    parser = dict(_commands())[words]
    (action,) = [a for a in parser._actions if "--method" in a.option_strings]
    text = " ".join(action.help.split())
    assert [phrase for phrase in says if phrase not in text] == []


@pytest.mark.parametrize("words", COMMANDS, ids=" ".join)
def test_a_help_names_only_options_its_command_has(words):
    """An option another command has (`--data` in `diff`, which says `--old-data`) is not
    one a user can give here."""
    parser = dict(_commands())[words]
    own = {flag for action in parser._actions for flag in action.option_strings}
    named = {
        flag
        for action in parser._actions
        if action.help and action.help != argparse.SUPPRESS
        for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", action.help)
    }
    assert sorted(named - own) == []
