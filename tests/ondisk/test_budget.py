"""`emitter-filter budget write` / `check`: a committed size budget, explained when it fails."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from emitter_filter.cli import main
from emitter_filter.ondisk.budget import JSON_SCHEMA, check_budget, read_budget, write_budget
from tests.layouts import build_constants

pytestmark = pytest.mark.filetools


def _constants(*sizes: int) -> list[bytes]:
    return [bytes((i * 7 + j) % 251 + 1 for j in range(size)) for i, size in enumerate(sizes)]


@pytest.fixture
def model(tmp_path, monkeypatch):
    """model.pte in the current directory, its budget written; returns (path, budget path)."""
    monkeypatch.chdir(tmp_path)
    pte = tmp_path / "model.pte"
    pte.write_bytes(build_constants(_constants(64, 32), frozenset()))
    assert main(["budget", "write", "model.pte", "-o", "pte-budget.json"]) == 0
    return pte, tmp_path / "pte-budget.json"


def test_a_file_as_recorded_is_within_its_budget(model, capsys):
    pte, budget = model
    capsys.readouterr()
    assert json.loads(budget.read_text())["schema"] == JSON_SCHEMA
    assert main(["budget", "check", "model.pte", "--budget", str(budget)]) == 0
    size = pte.stat().st_size
    assert capsys.readouterr().out == (
        f"model.pte: {size:,} bytes, budget {size:,} (allowed {size:,}): within budget\n"
    )


def test_an_added_tensor_fails_the_check_with_the_explanation(model, capsys):
    pte, budget = model
    pte.write_bytes(build_constants(_constants(64, 32, 256), frozenset()))
    capsys.readouterr()
    assert main(["budget", "check", "model.pte", "--budget", str(budget)]) == 1
    captured = capsys.readouterr()
    assert "over budget" in captured.out
    assert "+256  added    constant[3]  (FLOAT (float32) [64])" in captured.out
    assert "+256 B  added constant[3]" in captured.err
    (check,) = check_budget(["model.pte"], read_budget(budget))
    assert check.over and check.diff.changes[0].new.label == "constant[3]"


def test_the_tolerance_allows_that_much_growth(model):
    pte, budget = model
    before = pte.stat().st_size
    pte.write_bytes(build_constants(_constants(64, 36), frozenset()))
    percent = 100 * (pte.stat().st_size - before) / before
    argv = ["budget", "check", "model.pte", "--budget", str(budget), "--tolerance"]
    assert main([*argv, f"{percent + 0.5:.2f}"]) == 0
    assert main([*argv, f"{max(percent - 0.5, 0):.2f}"]) == 1


def test_a_file_without_a_record_fails(model, tmp_path, capsys):
    _, budget = model
    other = tmp_path / "other.pte"
    other.write_bytes(build_constants(_constants(16), frozenset()))
    capsys.readouterr()
    assert main(["budget", "check", "other.pte", "--budget", str(budget)]) == 1
    assert "other.pte: no budget recorded" in capsys.readouterr().out


def test_a_file_that_is_no_budget_is_a_usage_error(model, tmp_path, capsys):
    pte, _ = model
    bogus = tmp_path / "bogus.json"
    bogus.write_text('{"schema": "something-else"}')
    assert main(["budget", "check", "model.pte", "--budget", str(bogus)]) == 2
    assert "expected 'emitter-filter-budget/1'" in capsys.readouterr().err
    before = pte.read_bytes()
    assert main(["budget", "write", "model.pte", "-o", "model.pte"]) == 2
    assert pte.read_bytes() == before


def test_benchmark_json_is_what_github_action_benchmark_reads(model, tmp_path):
    pte, budget = model
    out = tmp_path / "bench.json"
    argv = ["budget", "check", "model.pte", "--budget", str(budget), "--benchmark-json", str(out)]
    assert main(argv) == 0
    entries = json.loads(out.read_text())
    assert entries[0] == {"name": "model.pte", "unit": "bytes", "value": pte.stat().st_size}
    assert all(set(e) == {"name", "unit", "value"} for e in entries)
    assert sum(e["value"] for e in entries[1:]) == pte.stat().st_size


def test_write_budget_records_every_part_but_padding(model):
    pte, budget = model
    document, (explanation,) = write_budget(["model.pte"], budget)
    record = document["files"]["model.pte"]
    assert record["bytes"] == pte.stat().st_size
    assert len(record["parts"]) == sum(1 for p in explanation.parts if p.storage != "padding")


def test_assert_within_budget_fails_a_test_with_the_explanation(model):
    from emitter_filter.testing import assert_within_budget

    pte, budget = model
    (check,) = assert_within_budget(["model.pte"], budget)
    assert not check.over
    pte.write_bytes(build_constants(_constants(64, 32, 256), frozenset()))
    with pytest.raises(AssertionError, match=r"(?s)over budget.*\+256  added    constant\[3\]"):
        assert_within_budget(["model.pte"], budget)


def test_the_pre_commit_budget_hook_runs_budget_check_on_the_staged_files(model):
    import shlex
    import subprocess
    import sys
    from pathlib import Path

    yaml = pytest.importorskip("yaml")
    repo = Path(__file__).resolve().parents[2]
    hooks = yaml.safe_load((repo / ".pre-commit-hooks.yaml").read_text())
    (hook,) = [h for h in hooks if h["id"] == "emitter-filter-budget"]
    assert hook["language"] == "python" and hook["files"] == r"\.pte$"
    command, *arguments = shlex.split(hook["entry"])
    argv = [str(Path(sys.executable).with_name(command)), *arguments, "model.pte"]
    pte, _ = model
    assert subprocess.run(argv, capture_output=True, text=True).returncode == 0
    pte.write_bytes(build_constants(_constants(64, 32, 256), frozenset()))
    result = subprocess.run(argv, capture_output=True, text=True)
    assert result.returncode == 1
    assert "+256 B  added constant[3]" in result.stderr


def _reader_renamed(pte: bytes) -> bytes:
    """`pte` with its `aten::add` called `aten::sub`: the mutable buffer's readers change,
    its bytes do not (as dnf_v5 -> dnf_v7, where delegates took over its readers)."""
    from tests.layouts import with_program_changed

    def rename(program) -> None:
        for operator in program.executionPlan[0].operators:
            if operator.name == "aten::add":
                operator.name = "aten::sub"

    return with_program_changed(pte, rename)


def test_an_unchanged_mutable_buffer_is_neither_removed_nor_added_as_in_diff(tmp_path, monkeypatch):
    from emitter_filter.ondisk.diff import diff_files
    from tests.files import GOLDEN

    monkeypatch.chdir(tmp_path)
    old = (GOLDEN / "mutated" / "dirty" / "model.pte").read_bytes()
    (tmp_path / "old.pte").write_bytes(old)
    (tmp_path / "model.pte").write_bytes(old)
    write_budget(["model.pte"], "pte-budget.json")
    (tmp_path / "model.pte").write_bytes(_reader_renamed(old))

    diff = diff_files("old.pte", "model.pte")
    [check] = check_budget(["model.pte"], read_budget("pte-budget.json"))

    def mutable(changes):
        return sorted((c.kind, c.label) for c in changes if "mutable" in (c.old or c.new).storage)

    assert mutable(diff.changes) == []
    assert mutable(check.diff.changes) == mutable(diff.changes)
    # Both say the same of every tensor, the one matching function's answer.
    assert sorted((c.kind, c.label, c.matched_by) for c in check.diff.changes) == sorted(
        (c.kind, c.label.replace("old.pte", "model.pte"), c.matched_by) for c in diff.changes
    )


def test_the_published_schema_is_the_one_budget_files_are_checked_against():
    from pathlib import Path

    from emitter_filter.ondisk.analyse.explain_terms import STATUSES
    from emitter_filter.ondisk.budget_schema import BUDGET_SCHEMA

    published = Path(__file__).resolve().parents[2] / "docs" / "budget-schema.json"
    assert json.loads(published.read_text()) == BUDGET_SCHEMA
    assert BUDGET_SCHEMA["properties"]["schema"]["const"] == JSON_SCHEMA
    assert tuple(BUDGET_SCHEMA["$defs"]["part"]["properties"]["status"]["enum"]) == STATUSES


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda d: d.pop("files"), "the document: missing 'files'"),
        (lambda d: d.update(files=[]), "['files']: expected object, got an array of 0"),
        (
            lambda d: d["files"]["model.pte"].update(bytes=-1),
            "['files']['model.pte']['bytes']: expected 0 or more, got -1",
        ),
        (
            lambda d: d["files"]["model.pte"]["parts"][0].update(bytes="12"),
            "['files']['model.pte']['parts'][0]['bytes']: expected integer, got '12'",
        ),
        (
            lambda d: d["files"]["model.pte"]["parts"][0].update(readers=[["forward"]]),
            "['files']['model.pte']['parts'][0]['readers'][0]: expected 5 items, got 1",
        ),
        (
            lambda d: d["files"]["model.pte"]["parts"][0].update(status="gone"),
            "['files']['model.pte']['parts'][0]['status']: expected one of live, dead, "
            "duplicated, shared, padding, got 'gone'",
        ),
    ],
    ids=[
        "no files",
        "files a list",
        "negative bytes",
        "bytes as text",
        "short reader",
        "unknown status",
    ],
)
def test_a_budget_file_off_its_schema_is_one_line_naming_the_place(model, capsys, change, said):
    _, budget = model
    document = json.loads(budget.read_text())
    change(document)
    budget.write_text(json.dumps(document))
    capsys.readouterr()
    assert main(["budget", "check", "model.pte", "--budget", str(budget)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"emitter-filter: {budget}: not a budget file (see docs/budget-schema.json): {said}\n"
    )


@pytest.mark.parametrize("tolerance", ["nan", "inf", "-inf", "-1", "ten"])
def test_a_tolerance_that_is_not_a_percentage_is_a_usage_error(model, capsys, tolerance):
    _, budget = model
    capsys.readouterr()
    argv = ["budget", "check", "model.pte", "--budget", str(budget), "--tolerance", tolerance]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "(see emitter-filter budget check --help)" in err, err


def test_a_huge_tolerance_allows_any_growth(model, capsys):
    _, budget = model
    argv = ["budget", "check", "model.pte", "--budget", str(budget), "--tolerance", "1e308"]
    assert main(argv) == 0
    with pytest.raises(ValueError, match="percentage"):
        check_budget(["model.pte"], read_budget(budget), float("nan"))


# JSON values a hand or a merge conflict may leave in a budget file.
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=6,
)


def _places(value, path=()):
    """The path of `value` and of everything inside it."""
    yield path
    members = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, member in members:
        yield from _places(member, (*path, key))


def _mutate(document, data) -> None:
    """Replaces, removes or adds one thing somewhere in `document`."""
    places = [p for p in _places(document) if p]
    if not places:  # everything removed already: `{}`
        return
    path = data.draw(st.sampled_from(places))
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    how = data.draw(st.sampled_from(["replace", "remove", "add"]))
    if how == "replace":
        parent[path[-1]] = data.draw(_JSON)
    elif how == "remove":
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[data.draw(st.text(max_size=6))] = data.draw(_JSON)
    else:
        parent.append(data.draw(_JSON))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A program with live and dead constants, and its budget's document (keyed by its path)."""
    directory = tmp_path_factory.mktemp("fuzz")
    pte = directory / "model.pte"
    pte.write_bytes(build_constants(_constants(64, 32, 16), frozenset({1})))
    budget = directory / "budget.json"
    assert main(["budget", "write", str(pte), "-o", str(budget)]) == 0
    return pte, json.loads(budget.read_text())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_mutated_budget_file_is_checked_or_refused_in_one_line(recorded, data):
    pte, document = recorded
    document = copy.deepcopy(document)
    for _ in range(data.draw(st.integers(1, 3))):
        _mutate(document, data)
    with tempfile.TemporaryDirectory() as directory:
        budget = os.path.join(directory, "budget.json")
        with open(budget, "w") as file:
            json.dump(document, file)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["budget", "check", str(pte), "--budget", budget])
    assert code in (0, 1, 2), err.getvalue()
    if code == 2:
        assert err.getvalue().count("\n") == 1, err.getvalue()
        assert err.getvalue().startswith(f"emitter-filter: {budget}: "), err.getvalue()
