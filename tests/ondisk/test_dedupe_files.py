"""`dedupe` on the committed golden files, with or without torch: nothing to share, nothing changed.

The golden programs store nothing twice, so deduplicating them must give back
their bytes, and `prune --dedupe` the bytes `prune` writes. The tied models,
which do change, are in `test_dedupe.py` (they need ExecuTorch to be built).
"""

from __future__ import annotations

import pytest

from emitter_filter.cli import main
from emitter_filter.ondisk.analyse.stored_ranges import find_shared_ranges
from emitter_filter.ondisk.dedupe import dedupe_file, dedupe_pte
from emitter_filter.ondisk.read.read_pte import read_pte
from tests.files import CASES, GOLDEN, saved

pytestmark = pytest.mark.filetools

ALL_CASES = (*CASES, "clean")


@pytest.mark.parametrize("state", ["dirty", "pruned"])
@pytest.mark.parametrize("case", ALL_CASES)
def test_a_file_with_nothing_stored_twice_is_left_byte_for_byte(case, state, tmp_path):
    pte, _ = saved(GOLDEN / case / state)
    data = pte.read_bytes()
    assert find_shared_ranges(read_pte(data)) == ()
    same, report = dedupe_pte(data)
    assert same is data and report.saved_bytes == 0 and report.shared == ()
    out = tmp_path / "out.pte"
    assert dedupe_file(pte, out).saved_bytes == 0
    assert out.read_bytes() == data


@pytest.mark.parametrize("case", ALL_CASES)
def test_prune_dedupe_writes_what_prune_writes_when_nothing_is_shared(case, tmp_path):
    pte, _ = saved(GOLDEN / case / "dirty")
    pruned, deduped = tmp_path / "pruned.pte", tmp_path / "deduped.pte"
    assert main(["prune", str(pte), "-o", str(pruned)]) == 0
    assert main(["prune", str(pte), "-o", str(deduped), "--dedupe"]) == 0
    assert deduped.read_bytes() == pruned.read_bytes()
    assert not list(tmp_path.glob(".*")), "a temporary file was left behind"


def test_prune_dedupe_with_ptd_files_writes_what_prune_writes(tmp_path):
    pte, ptds = saved(GOLDEN / "external" / "dirty")
    runs = {}
    for name, extra in (("pruned", []), ("deduped", ["--dedupe"])):
        out = tmp_path / name
        out.mkdir()
        ptd_args = [a for p in ptds for a in ("--data", str(p))]
        argv = ["prune", str(pte), "-o", str(out / "model.pte"), *ptd_args, "--ptd-out", str(out)]
        assert main(argv + extra) == 0
        runs[name] = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
    assert runs["deduped"] == runs["pruned"] and len(runs["pruned"]) == 2
