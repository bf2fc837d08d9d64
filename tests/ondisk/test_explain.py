"""`emitter-filter explain`: every byte attributed, the statuses audit's, the readers right.

The golden files (random weights), the layouts other producers write
(`tests/layouts.py`), and, where this machine has them, the real-world files
named by `EMITTER_FILTER_REALWORLD_DIR`. Padding is checked to be zeros, as
ExecuTorch writes it: a stored entry left out of the attribution would show up
as padding with its (random, non-zero) bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emitter_filter.cli import main
from emitter_filter.ondisk.audit import audit_file
from emitter_filter.ondisk.explain import STATUSES, STORAGES, explain_file
from tests.files import CASES, GOLDEN, saved
from tests.layouts import build_constants, old_flat_tensor
from tests.ondisk.test_file_layouts import CASES as LAYOUTS, _files
from tests.realworld import needs_realworld, real_files, refused

pytestmark = pytest.mark.filetools

ALL = [(case, state) for case in (*CASES, "clean") for state in ("dirty", "pruned")]


def _check_attribution(explanation) -> None:
    """The parts tile each file: no gap, no overlap, padding all zeros, sums exact."""
    for path, size in explanation.files:
        parts = [p for p in explanation.parts if p.file == path]
        assert sum(p.nbytes for p in parts) == size, path
        data = Path(path).read_bytes()
        for part in parts:
            assert part.storage in STORAGES and part.status in STATUSES
            if part.storage == "padding":
                assert data[part.offset : part.end] == bytes(part.nbytes), part
        spread = ("program", "values", "instructions", "operators", "ptd_header")
        placed = sorted((p for p in parts if p.storage not in spread), key=lambda p: p.offset)
        # Neighbouring pairs: one fewer than the items, so zip stops early on purpose.
        for before, after in zip(placed, placed[1:], strict=False):
            assert before.end <= after.offset, (before, after)


@pytest.mark.parametrize("case, state", ALL, ids=[f"{c}-{s}" for c, s in ALL])
def test_the_parts_of_every_golden_file_add_up_to_its_size(case, state):
    pte, ptds = saved(GOLDEN / case / state)
    explanation = explain_file(pte, ptds)
    _check_attribution(explanation)
    assert explanation.file_bytes == pte.stat().st_size + sum(p.stat().st_size for p in ptds)


@pytest.mark.parametrize("case, state", ALL, ids=[f"{c}-{s}" for c, s in ALL])
def test_dead_parts_are_exactly_audits_dead_entries(case, state):
    pte, ptds = saved(GOLDEN / case / state)
    explanation, audit = explain_file(pte, ptds), audit_file(pte, ptds)
    dead = {(p.storage, p.index) for p in explanation.parts if p.status == "dead"}
    assert sum(p.nbytes for p in explanation.parts if p.status == "dead") == audit.dead_bytes
    expected = {(d.space, d.index) for d in audit.dead if d.space != "external"}
    assert {d for d in dead if d[0] != "external"} == expected
    assert (state == "dirty") == bool(dead) or case == "clean"


@pytest.mark.parametrize("where, producer", LAYOUTS)
@pytest.mark.parametrize("dead", [True, False], ids=["dead", "clean"])
def test_the_parts_of_every_layout_add_up_to_its_size(tmp_path, where, producer, dead):
    pte, ptds = _files(tmp_path, "model", where, producer, dead)
    explanation = explain_file(pte, ptds)
    _check_attribution(explanation)
    # A placeholder-only program has dead values, but no data to be dead.
    assert any(p.status == "dead" for p in explanation.parts) == (dead and where != "placeholder")


@pytest.mark.parametrize("alignment", [16, 64])
def test_each_copy_after_the_first_of_a_content_is_duplicated(tmp_path, alignment):
    same, other = bytes(range(1, 65)), bytes(range(100, 132))
    pte = tmp_path / "model.pte"
    pte.write_bytes(build_constants([same, other, same], frozenset(), tensor_alignment=alignment))
    explanation = explain_file(pte)
    _check_attribution(explanation)
    by_label = {p.label: p for p in explanation.parts}
    assert by_label["constant[1]"].status == "live"
    assert by_label["constant[3]"].status == "duplicated"
    assert by_label["constant[3]"].copies == ("constant[1]",)
    assert by_label["constant[1]"].copies == ("constant[3]",)
    duplicated = sum(p.nbytes for p in explanation.parts if p.status == "duplicated")
    assert duplicated == audit_file(pte).duplicated_bytes == 64


def test_portable_readers_name_the_operator_and_the_argument():
    pte, _ = saved(GOLDEN / "plain" / "dirty")
    parts = {p.label: p for p in explain_file(pte).parts}
    readers = {label: [r.describe() for r in p.readers] for label, p in parts.items()}
    assert readers["constant[1]"] == ["aten::permute_copy.out arg 0 in plan 'forward'"]
    assert readers["constant[2]"] == ["aten::addmm.out arg 0 in plan 'forward'"]
    for part in parts.values():
        if part.storage == "constant":
            assert bool(part.readers) == (part.status != "dead"), part


def test_xnnpack_named_data_is_read_by_its_delegate_via_its_key():
    pte, _ = saved(GOLDEN / "xnnpack" / "dirty")
    explanation = explain_file(pte)
    named = [p for p in explanation.parts if p.storage == "named_data"]
    assert named
    for part in named:
        (key,) = part.names
        assert [r.describe() for r in part.readers] == [
            f"XnnpackBackend delegate 0 in plan 'forward' via key {key}"
        ]
    (blob,) = [p for p in explanation.parts if p.storage == "delegate"]
    assert blob.names == ("XnnpackBackend",) and blob.status == "live"


def test_external_parts_are_named_by_their_fqn_and_grouped_by_module():
    pte, ptds = saved(GOLDEN / "external" / "dirty")
    explanation = explain_file(pte, ptds)
    external = {p.names: p for p in explanation.parts if p.storage == "external"}
    assert external[("lin.weight",)].shape == (3, 4)
    assert external[("lin.weight",)].status == "live"
    assert explanation.totals("module")["lin"] == 60
    # Without the .ptd the external tensors are in no file: listed apart, not in the sum.
    alone = explain_file(pte)
    assert alone.file_bytes == pte.stat().st_size
    assert {p.names for p in alone.outside} == set(external)


def test_explain_json_lists_every_part_and_its_totals(capsys):
    pte, ptds = saved(GOLDEN / "external" / "dirty")
    argv = ["explain", str(pte), *(a for p in ptds for a in ("--data", str(p))), "--json"]
    assert main(argv) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["schema"] == "emitter-filter-explain/1"
    assert sum(p["bytes"] for p in document["parts"]) == document["file_bytes"]
    assert sum(document["status"].values()) == document["file_bytes"]
    assert sum(sum(row.values()) for row in document["storage"].values()) == document["file_bytes"]
    assert document["status"]["dead"] == audit_file(pte, ptds).dead_bytes


def test_explain_text_lists_the_top_parts_and_groups(capsys):
    pte, _ = saved(GOLDEN / "plain" / "dirty")
    assert main(["explain", str(pte), "--top", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{pte}: {pte.stat().st_size:,} bytes in 1 file(s); live ")
    assert "largest parts (2 of " in "\n".join(out)
    assert main(["explain", str(pte), "--by", "status"]) == 0
    out = capsys.readouterr().out
    assert "by status (" in out and "dead" in out


def test_explain_text_prints_labels_whole_and_every_row_says_what_it_is():
    from emitter_filter.ondisk.explain import Explanation, Part

    # Two plans whose names differ only in the middle: cut there, both read the same.
    plans = ("decode_with_a_long_cache_forward", "prefill_with_a_long_cache_forward")
    parts = tuple(
        Part("m.pte", 8 * i, 100 - i, "instructions", tag=plan) for i, plan in enumerate(plans)
    )
    parts += (
        Part("m.pte", 64, 10, "constant", 0, status="dead", dtype="CHAR", shape=(2, 5)),
        Part("m.pte", 80, 8, "padding", status="padding"),
    )
    text = Explanation("m.pte", (("m.pte", 98),), parts, (), None).to_text()
    rows = text.splitlines()[-len(parts) :]
    for plan in plans:
        assert sum(f"instructions:{plan} " in row for row in rows) == 1, text
    assert "CHAR (int8)" in rows[2] and "read by nothing live" in rows[2]
    assert all(not row.endswith("-; -") and not row.endswith(" -") for row in rows), text


def test_one_dtype_vocabulary_in_explain_of_xnnpack_named_data(capsys):
    pte, _ = saved(GOLDEN / "xnnpack" / "dirty")
    assert main(["explain", str(pte), "--top", "100"]) == 0
    out = capsys.readouterr().out
    assert "FLOAT (float32)" in out and "FP32" not in out


def test_a_malformed_file_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.pte"
    bad.write_bytes(b"not a program at all")
    assert main(["explain", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err


@needs_realworld
@pytest.mark.parametrize(("pte", "ptds"), real_files(), ids=lambda v: getattr(v, "stem", ""))
def test_the_parts_of_the_real_world_files_add_up_to_their_sizes(pte, ptds):
    reason = refused(pte, ptds)
    if reason is not None:
        pytest.skip(f"the tools refuse it: {reason}")
    _check_attribution(explain_file(pte, ptds))


def test_a_real_file_the_tools_refuse_is_skipped_with_the_reason(tmp_path):
    # What the real-world tests skip on: a .pte beside a .ptd of ExecuTorch 0.6's layout.
    pte, _ = _files(tmp_path, "x", "external", "executorch-1.5.1", dead=False)
    pte.with_suffix(".ptd").write_bytes(old_flat_tensor())
    [(found, ptds)] = real_files(tmp_path)
    assert found == pte and "ExecuTorch 0.6" in refused(found, ptds)
    assert refused(*_files(tmp_path, "y", "segment", "executorch-1.5.1", dead=False)) is None


def test_the_program_flatbuffer_is_split_into_each_plans_values_instructions_operators():
    pte, _ = saved(GOLDEN / "plain" / "dirty")
    parts = {p.label: p for p in explain_file(pte).parts}
    for section in ("values", "instructions", "operators"):
        assert parts[f"{section}:forward"].nbytes > 0
    # The values hold a Tensor table per constant and more: the largest of the three.
    assert parts["values:forward"].nbytes > parts["instructions:forward"].nbytes


def test_more_values_and_calls_are_more_bytes_in_their_sections(tmp_path):
    from emitter_filter.ondisk.diff import diff_files

    constants = [bytes(range(1 + i, 33 + i)) for i in range(6)]
    small, large = tmp_path / "small.pte", tmp_path / "large.pte"
    small.write_bytes(build_constants(constants[:2], frozenset()))
    large.write_bytes(build_constants(constants, frozenset()))
    grown = {c.new.label: c.delta for c in diff_files(small, large).changes if c.kind == "grown"}
    assert grown["values:forward"] > 0 and grown["instructions:forward"] > 0
    assert "operators:forward" not in grown  # one operator either way


def test_explain_diff_and_budget_import_neither_torch_nor_executorch(tmp_path):
    import subprocess
    import sys
    import textwrap

    pte, ptds = saved(GOLDEN / "external" / "dirty")
    pruned, _ = saved(GOLDEN / "xnnpack" / "pruned")
    dirty, _ = saved(GOLDEN / "xnnpack" / "dirty")
    code = textwrap.dedent(
        f"""
        import sys
        from emitter_filter import cli
        assert cli.main(["explain", {str(pte)!r}, "--data", {str(ptds[0])!r},
                         "--html", {str(tmp_path / "page.html")!r}]) == 0
        assert cli.main(["diff", {str(pruned)!r}, {str(dirty)!r}, "--markdown"]) == 0
        assert cli.main(["budget", "write", {str(dirty)!r}, "-o", {str(tmp_path / "b.json")!r}]) == 0
        assert cli.main(["budget", "check", {str(dirty)!r}, "--budget",
                         {str(tmp_path / "b.json")!r}]) == 0
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "executorch"))
        assert not loaded, loaded
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
