"""The file tools on committed files, with or without torch: the same bytes everywhere.

`tests/golden/` holds the test programs as executorch 1.5.1 writes them, dirty
and pruned in process, with their `audit --json`. This module imports neither
torch nor executorch, so the torch-free run (`pytest -m filetools`) checks that
`audit` and `prune` there give exactly what the full install gives.
"""

from __future__ import annotations

import json

import pytest

from emitter_filter.ondisk.prune import prune_file
from tests.files import (
    CASES,
    GOLDEN,
    GOLDEN_EXECUTORCH,
    GOLDEN_FLATBUFFERS,
    HAVE_EXECUTORCH,
    flatbuffers_version,
    golden_audit,
    saved,
)

pytestmark = pytest.mark.filetools

ALL_CASES = (*CASES, "clean")


@pytest.mark.parametrize("state", ["dirty", "pruned"])
@pytest.mark.parametrize("case", ALL_CASES)
def test_audit_reports_what_the_full_install_reported(case, state):
    pte, ptds = saved(GOLDEN / case / state)
    expected = (GOLDEN / case / state / "audit.json").read_text()
    assert golden_audit(pte, ptds) + "\n" == expected


def _prune(pte, ptds, out):
    out.mkdir()
    prune_file(pte, out / "model.pte", ptds, out)
    return saved(out)


def _audit_without_sizes(pte, ptds) -> dict:
    report = json.loads(golden_audit(pte, ptds))
    del report["files"], report["file_bytes"]
    return report


@pytest.mark.parametrize("case", ALL_CASES)
def test_prune_writes_the_file_prune_constants_wrote_in_process(case, tmp_path):
    pte, ptds = saved(GOLDEN / case / "dirty")
    pruned_pte, pruned_ptds = saved(GOLDEN / case / "pruned")
    out_pte, out_ptds = _prune(pte, ptds, tmp_path / "out")
    assert [p.name for p in out_ptds] == [p.name for p in pruned_ptds]
    if flatbuffers_version() == GOLDEN_FLATBUFFERS:
        assert out_pte.read_bytes() == pruned_pte.read_bytes()
        for out, ptd in zip(out_ptds, pruned_ptds, strict=True):
            assert out.read_bytes() == ptd.read_bytes(), ptd.name
    else:
        # Another Builder: the same program, and pruning it again changes nothing.
        assert _audit_without_sizes(out_pte, out_ptds) == _audit_without_sizes(
            pruned_pte, pruned_ptds
        )
        again_pte, again_ptds = _prune(out_pte, out_ptds, tmp_path / "again")
        for again, first in zip([again_pte, *again_ptds], [out_pte, *out_ptds], strict=True):
            assert again.read_bytes() == first.read_bytes(), first.name


@pytest.mark.skipif(not HAVE_EXECUTORCH, reason="needs torch and executorch to build them")
@pytest.mark.parametrize("case", ALL_CASES)
def test_the_golden_files_are_what_executorch_writes_today(case, built):
    """They must not go stale: the session's programs, built from the models, are the same bytes."""
    from emitter_filter import _upstream

    built = built[case]
    rebuilt = [built.pte, *built.ptds, built.pruned_pte, *built.pruned_ptds]
    golden = [*(p for s in ("dirty", "pruned") for p in _flatten(saved(GOLDEN / case / s)))]
    same = [a.name for a in rebuilt] == [b.name for b in golden] and all(
        a.read_bytes() == b.read_bytes() for a, b in zip(rebuilt, golden, strict=True)
    )
    found = (_upstream.installed_executorch_version(), flatbuffers_version())
    if found != (GOLDEN_EXECUTORCH, GOLDEN_FLATBUFFERS) and not same:
        pytest.skip(f"executorch {found[0]} with flatbuffers {found[1]} writes other bytes")
    assert same, "run `python -m tests.programs` and commit tests/golden"


def _flatten(saved_files):
    pte, ptds = saved_files
    return [pte, *ptds]
