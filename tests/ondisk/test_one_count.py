"""One count of every byte (`dead_bytes.ByteCount`), on every file the golden set holds, on
what `share`, `prune` and `prune --dedupe` write from them, and on the real files named by
`EMITTER_FILTER_REALWORLD_DIR` (`.ci/run` points it at the workplace's copies) with their
`share` outputs: `tests.one_count.check_one_count` on each.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from emitter_filter.ondisk.audit import audit_file
from emitter_filter.ondisk.audit_set import audit_set
from emitter_filter.ondisk.prune import prune_file
from emitter_filter.ondisk.share import share_files
from tests.files import CASES, GOLDEN, saved
from tests.one_count import check_one_count
from tests.realworld import needs_realworld, real_files, refused

pytestmark = pytest.mark.filetools

_GOLDEN = [(case, state) for case in (*CASES, "clean") for state in ("dirty", "pruned")]


def _copied(case: str, state: str, directory: Path) -> tuple[Path, list[Path]]:
    """The golden program and its `.ptd` files, copied into `directory` under `case` names."""
    pte, ptds = saved(GOLDEN / case / state)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{case}-{state}.pte"
    shutil.copyfile(pte, target)
    copies = []
    for ptd in ptds:
        shutil.copyfile(ptd, directory / ptd.name)
        copies.append(directory / ptd.name)
    return target, copies


@pytest.mark.parametrize(("case", "state"), _GOLDEN, ids=[f"{c}-{s}" for c, s in _GOLDEN])
def test_one_count_on_the_golden_files(case, state, tmp_path):
    pte, ptds = saved(GOLDEN / case / state)
    dead = check_one_count(pte, ptds, tmp_path / "pruned")
    assert (dead == 0) == (state == "pruned" or case == "clean")


@pytest.mark.parametrize("case", CASES)
def test_one_count_on_prune_dedupe_outputs(case, tmp_path):
    pte, ptds = saved(GOLDEN / case / "dirty")
    out = tmp_path / "deduplicated"
    out.mkdir()
    prune_file(pte, out / "model.pte", ptds, out if ptds else None, dedupe=True)
    written = sorted(out.glob("*.ptd"))
    assert check_one_count(out / "model.pte", written, tmp_path / "pruned") == 0


def test_one_count_on_share_outputs_of_the_golden_files(tmp_path):
    # Programs without .ptd files that store equal constants (plain and clean are one
    # model, dirty and not): share them, then each output with the shared .ptd.
    inputs = [
        _copied(case, state, tmp_path / "in")[0]
        for case, state in [("plain", "dirty"), ("clean", "dirty"), ("plain", "pruned")]
    ]
    for min_bytes in (1, 1024):
        out = tmp_path / f"shared-{min_bytes}"
        report = share_files(inputs, out, min_bytes=min_bytes)
        assert report.shared_contents > 0 or min_bytes > 1
        for pte in inputs:
            check_one_count(
                out / pte.name, [*out.glob("*.ptd")], tmp_path / f"pruned-{min_bytes}-{pte.stem}"
            )
        # What share left in place, the set's audit counts, and it is the inputs' dead bytes.
        outputs = [out / pte.name for pte in inputs]
        assert audit_set(outputs, [*out.glob("*.ptd")]).dead_bytes == report.dead_bytes
        assert report.dead_bytes == sum(audit_file(p).dead_bytes for p in inputs) > 0


@needs_realworld
@pytest.mark.parametrize(("pte", "ptds"), real_files(), ids=lambda v: getattr(v, "stem", ""))
def test_one_count_on_the_real_files(pte, ptds, tmp_path):
    reason = refused(pte, ptds)
    if reason is not None:
        pytest.skip(f"the tools refuse it: {reason}")
    check_one_count(pte, ptds, tmp_path / "pruned")


@needs_realworld
def test_one_count_on_share_outputs_of_the_real_files(tmp_path):
    # Every real program that loads without a .ptd, shared as one set (what has nothing in
    # common is copied byte for byte), with and without --prune.
    inputs = [pte for pte, ptds in real_files() if not ptds and refused(pte, ptds) is None]
    assert len(inputs) >= 2
    for prune in (False, True):
        out = tmp_path / f"shared-{prune}"
        report = share_files(inputs, out, prune=prune)
        for pte in inputs:
            # Alone, a program counts the keys only the others read dead: prune drops them.
            check_one_count(
                out / pte.name, [*out.glob("*.ptd")], tmp_path / f"p-{prune}-{pte.stem}"
            )
        outputs = [out / pte.name for pte in inputs]
        dead = audit_set(outputs, [*out.glob("*.ptd")]).dead_bytes
        assert dead == report.dead_bytes
        assert dead == (0 if prune else sum(audit_file(p).dead_bytes for p in inputs))
