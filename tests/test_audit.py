"""`audit_file` finds exactly the dead bytes the in-process filter drops."""

from __future__ import annotations

import dataclasses
import json

import pytest

from emitter_filter.audit import JSON_SCHEMA, SPACES, audit_file, audit_pte
from emitter_filter.pte_file import read_pte
from emitter_filter.testing import assert_no_dead_constants

CASES = ("plain", "external", "xnnpack", "mutated")


@pytest.mark.parametrize("case", CASES)
def test_dead_bytes_are_the_bytes_the_in_process_filter_drops(built, case):
    report = audit_file(built[case].pte, built[case].ptds)
    dropped = built[case].report
    assert report.dead_bytes == dropped.dropped_bytes > 0
    assert report.dead_values == dropped.dropped_values
    for space, before in dropped.bytes_before.items():
        assert report.spaces[space].total == before
        assert report.spaces[space].live == dropped.bytes_after[space]


@pytest.mark.parametrize("case", CASES)
def test_each_dead_entry_is_one_the_filter_drops(built, case):
    report = audit_file(built[case].pte, built[case].ptds)
    assert [dataclasses.astuple(d) for d in report.dead] == [
        dataclasses.astuple(d) for d in built[case].report.dropped
    ]


@pytest.mark.parametrize("case", CASES)
def test_pruned_files_have_no_dead_bytes(built, case):
    report = audit_file(built[case].pruned_pte, built[case].pruned_ptds)
    assert report.dead_bytes == 0 and report.dead == ()
    assert report.constant_bytes == audit_file(built[case].pte, built[case].ptds).constant_bytes - (
        built[case].report.dropped_bytes
    )


def test_external_constants_are_sized_from_their_shapes_without_the_ptd(built):
    case = built["external"]
    assert audit_file(case.pte).spaces == audit_file(case.pte, case.ptds).spaces


def test_file_bytes_add_up_the_pte_and_its_ptd_files(built):
    case = built["external"]
    report = audit_file(case.pte, case.ptds)
    sizes = [case.pte.stat().st_size, *(p.stat().st_size for p in case.ptds)]
    assert [size for _, size in report.files] == sizes
    assert report.file_bytes == sum(sizes)


def test_auditing_bytes_gives_the_same_report_as_the_path(built):
    by_path = audit_file(built["xnnpack"].pte)
    by_bytes = audit_file(built["xnnpack"].pte.read_bytes())
    assert dataclasses.replace(by_bytes, path=by_path.path, files=by_path.files) == by_path


def test_xnnpack_named_data_is_attributed_to_its_delegate_and_live(built):
    report = audit_file(built["xnnpack"].pte)
    assert report.unattributed_named_data == ()
    named = report.spaces["named_data"]
    assert named.total == named.live > 0 and named.dead == 0
    assert report.spaces["delegate"].dead == 0


def test_named_data_of_an_opaque_delegate_is_reported_but_never_dead(built):
    pte = read_pte(built["xnnpack"].pte)
    opaque = dataclasses.replace(
        pte,
        delegates=tuple(dataclasses.replace(d, named_keys=None) for d in pte.delegates),
    )
    report = audit_pte(opaque)
    assert {u.key for u in report.unattributed_named_data} == {e.key for e in pte.named_data}
    assert report.spaces["named_data"].dead == 0
    assert report.dead_bytes == audit_pte(pte).dead_bytes


def test_json_form_has_the_documented_keys(built):
    form = json.loads(json.dumps(audit_file(built["plain"].pte).to_json()))
    assert list(form) == [
        "schema", "path", "files", "file_bytes", "constant_bytes", "dead_bytes",
        "dead_values", "spaces", "dead", "unattributed_named_data",
    ]
    assert form["schema"] == JSON_SCHEMA
    assert list(form["spaces"]) == list(SPACES)
    assert form["dead"][0] == {
        "space": "constant", "index": 3, "bytes": 128, "plan": "forward",
        "value_index": 2, "dtype": "FLOAT", "shape": [32], "name": None,
    }
    assert all(isinstance(form[k], int) for k in ("file_bytes", "constant_bytes", "dead_bytes"))


def test_assert_no_dead_constants_lists_the_largest_dead_entries_first(built):
    with pytest.raises(AssertionError) as error:
        assert_no_dead_constants(built["plain"].pte.read_bytes())
    lines = str(error.value).splitlines()
    assert "148 dead constant bytes > 0 allowed" in lines[0]
    assert lines[1].strip().startswith("128 B  constant[3] plan 'forward' value 2 FLOAT[32]")
    assert lines[2].strip().startswith("20 B  constant[4]")


def test_assert_no_dead_constants_passes_within_the_allowance(built):
    assert_no_dead_constants(built["clean"].pte)
    assert_no_dead_constants(built["plain"].pruned_pte)
    assert_no_dead_constants(built["plain"].pte, max_dead_bytes=148)
    with pytest.raises(AssertionError):
        assert_no_dead_constants(built["plain"].pte, max_dead_bytes=147)
