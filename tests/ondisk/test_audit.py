"""`audit_file` finds exactly the dead bytes the in-process filter drops."""

from __future__ import annotations

import dataclasses
import json

import pytest

from emitter_filter.ondisk.analyse import audit_report
from emitter_filter.ondisk.analyse.audit_report import JSON_SCHEMA, SPACES, audit_pte
from emitter_filter.ondisk.audit import audit_file
from emitter_filter.ondisk.read import byte_source
from emitter_filter.ondisk.read.byte_source import ByteSource
from emitter_filter.ondisk.read.read_pte import read_pte
from emitter_filter.program.names import DroppedConstant
from emitter_filter.program.reachability import DataSpace
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


def _unnamed(entry: DroppedConstant) -> tuple:
    """An entry without `names`: the in-process report names more than a file carries."""
    return dataclasses.astuple(dataclasses.replace(entry, names=()))


@pytest.mark.parametrize("case", CASES)
def test_each_dead_entry_is_one_the_filter_drops(built, case):
    report = audit_file(built[case].pte, built[case].ptds)
    assert [_unnamed(d) for d in report.dead] == [_unnamed(d) for d in built[case].report.dropped]


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
    assert report.kept_unprovable_named_data == ()
    named = report.spaces["named_data"]
    assert named.total == named.live > 0 and named.dead == 0
    assert report.spaces["delegate"].dead == 0


def _audit_with_delegates(pte, delegates):
    with ByteSource(pte.path) as source:
        return audit_pte(dataclasses.replace(pte, delegates=delegates), {pte.path: source})


def test_named_data_no_readable_delegate_uses_is_dead_when_every_delegate_is_readable(built):
    pte = read_pte(built["xnnpack"].pte)
    unused = tuple(dataclasses.replace(d, named_keys=frozenset()) for d in pte.delegates)
    report = _audit_with_delegates(pte, unused)
    named_bytes = sum(e.nbytes for e in pte.named_data)
    assert report.spaces["named_data"].dead == named_bytes > 0
    assert report.dead_bytes == audit_file(pte.path).dead_bytes + named_bytes
    assert [(d.space, d.name) for d in report.dead if d.space == "named_data"] == [
        ("named_data", e.key) for e in pte.named_data
    ]
    assert report.kept_unprovable_named_data == ()


def test_named_data_of_an_opaque_delegate_is_kept_as_unprovable_and_never_dead(built):
    pte = read_pte(built["xnnpack"].pte)
    opaque = tuple(dataclasses.replace(d, named_keys=None) for d in pte.delegates)
    report = _audit_with_delegates(pte, opaque)
    assert {u.key for u in report.kept_unprovable_named_data} == {e.key for e in pte.named_data}
    assert report.spaces["named_data"].dead == 0
    assert report.dead_bytes == audit_file(pte.path).dead_bytes


def test_dead_entries_are_the_reports_dropped_constant_class(built):
    assert not hasattr(audit_report, "DeadEntry")
    assert all(type(d) is DroppedConstant for d in audit_file(built["plain"].pte).dead)


def test_audit_reads_no_data_whose_size_no_other_entry_shares(built, monkeypatch):
    read = []
    original = ByteSource.read

    def counting(self, offset, size, what):
        if what == "stored data":
            read.append(size)
        return original(self, offset, size, what)

    monkeypatch.setattr(byte_source.ByteSource, "read", counting)
    report = audit_file(built["plain"].pte)
    sizes = [e.nbytes for e in read_pte(built["plain"].pte).entries[DataSpace.CONSTANT].values()]
    assert len(set(sizes[1:])) == len(sizes) - 1  # the case has no two entries of one size
    assert read == [] and report.duplicates == ()


def test_json_form_has_the_documented_keys(built):
    form = json.loads(json.dumps(audit_file(built["plain"].pte).to_json()))
    assert list(form) == [
        "schema",
        "path",
        "files",
        "file_bytes",
        "constant_bytes",
        "dead_bytes",
        "dead_values",
        "duplicated_bytes",
        "spaces",
        "dead",
        "kept_unprovable_named_data",
        "duplicates",
        "shared_bytes",
        "shared",
        "data",
    ]
    assert form["schema"] == JSON_SCHEMA
    assert list(form["spaces"]) == list(SPACES)
    assert form["dead"][0] == {
        "space": "constant",
        "index": 3,
        "bytes": 128,
        "plan": "forward",
        "value_index": 2,
        "dtype": "FLOAT",
        "shape": [32],
        "name": None,
        "names": [],
        "readable_by_name": False,
    }
    assert all(isinstance(form[k], int) for k in ("file_bytes", "constant_bytes", "dead_bytes"))


def test_assert_no_dead_constants_lists_the_largest_dead_entries_first(built):
    with pytest.raises(AssertionError) as error:
        assert_no_dead_constants(built["plain"].pte.read_bytes())
    lines = str(error.value).splitlines()
    assert "148 dead constant bytes > 0 allowed" in lines[0]
    assert (
        lines[1]
        .strip()
        .startswith("128 B  constant[3] plan 'forward' value 2 FLOAT (float32) [32]")
    )
    assert lines[2].strip().startswith("20 B  constant[4]")


def test_assert_no_dead_constants_passes_within_the_allowance(built):
    assert_no_dead_constants(built["clean"].pte)
    assert_no_dead_constants(built["plain"].pruned_pte)
    assert_no_dead_constants(built["plain"].pte, max_dead_bytes=148)
    with pytest.raises(AssertionError):
        assert_no_dead_constants(built["plain"].pte, max_dead_bytes=147)
