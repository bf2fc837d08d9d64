"""A small derandomised fuzz corpus: damaged files are rejected cleanly, never half-handled.

The cases come from `tests/fuzz_files.py` (the same engine runs ≥10,000 of them
by hand, `python bench/fuzz_files.py --cases 10000`); each runs `emitter-filter audit` and `prune` through `cli.main` and
must end `accepted` or `rejected`: no crash, hang, leftover file, changed input.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fuzz_files import Seed, cases, fuzz, run_case

pytestmark = pytest.mark.filetools

#: Cases in the default run; `-m slow` (in `.ci/run`) runs `DEEP_CASES` others.
CI_CASES = 300
DEEP_CASES = 3000


@pytest.fixture(scope="module")
def seeds(built) -> list[Seed]:
    return [
        Seed(name, built[name].pte, built[name].ptds)
        for name in ("plain", "external", "xnnpack", "mutated")
    ]


def _check_fuzz(seeds: list[Seed], count: int, seed: int, workdir: Path) -> None:
    counts, examples = fuzz(seeds, count, seed=seed, workdir=workdir)
    bugs = {outcome: n for outcome, n in counts.items() if outcome not in ("accepted", "rejected")}
    assert not bugs, {o: (c.seed.name, c.target, c.mutation) for o, c in examples.items()}
    # The corpus exercises both paths, so a checker that rejects everything would fail.
    assert counts["accepted"] > count // 10 and counts["rejected"] > count // 10


def test_every_fuzzed_file_is_accepted_or_rejected_cleanly(seeds, tmp_path):
    _check_fuzz(seeds, CI_CASES, 0, tmp_path)


@pytest.mark.slow
def test_every_fuzzed_file_is_accepted_or_rejected_cleanly_at_depth(seeds, tmp_path):
    _check_fuzz(seeds, DEEP_CASES, 1, tmp_path)


def test_the_corpus_is_the_same_on_every_run(seeds):
    first = [(c.seed.name, c.target, c.mutation, c.data) for c in cases(seeds, 50)]
    assert first == [(c.seed.name, c.target, c.mutation, c.data) for c in cases(seeds, 50)]


def test_the_checker_reports_a_file_left_behind(seeds, tmp_path, monkeypatch):
    """The harness itself can fail: a prune that leaves its temporary file is a finding."""
    from emitter_filter.errors import PteFormatError
    from emitter_filter.ondisk import prune

    def leave_temp(src, dst, *args, **kwargs):
        Path(f"{dst}.tmp").write_bytes(b"half")
        raise PteFormatError(str(src), "simulated failure")

    monkeypatch.setattr(prune, "prune_file", leave_temp)
    case = next(iter(cases(seeds[:1], 1)))
    assert run_case(case, tmp_path / "case") == "leftover"
