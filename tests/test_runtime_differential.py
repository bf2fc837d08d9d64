"""The validator is the runtime's checks: no file it calls valid does ExecuTorch's runtime refuse.

Mutated files (`tests/runtime_mutations.py`: fields the runtime checks, set near
their bounds, and `tests/fuzz_files.py`'s byte-level damage) go through
`validate_file` and through the runtime in a long-lived worker
(`tests/runtime_worker.py`). A file needing an operator or backend this build
lacks, or a data file not given, is left out: the validator lists those. The
other direction (the validator refuses, the runtime loads) is counted and printed
by reason (`pytest -s` shows it).

    python -m tests.differential --cases 20000      (the same comparison by hand)
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

import pytest

from tests.differential import Comparison, compare, golden_seeds, realworld_seeds
from tests.realworld import needs_realworld
from tests.runtime_mutations import as_is, mutants

# The runtime runs in the worker process: found, not imported here (it imports torch).
if importlib.util.find_spec("executorch.extension.pybindings.portable_lib") is None:
    pytest.skip("needs executorch's pybindings", allow_module_level=True)
validate = pytest.importorskip("emitter_filter.ondisk.analyse.validate")

# The loaders take a .ptd (`data_path`) from executorch 1.5 on: the comparison needs them.
if tuple(int(p) for p in importlib.metadata.version("executorch").split(".")[:2]) < (1, 5):
    pytest.skip(
        "the runtime's loaders take a .ptd (data_path) from executorch 1.5 on",
        allow_module_level=True,
    )

from tests.runtime_worker import Loaded, Refused, RuntimeWorker  # noqa: E402

#: Mutated files in the default run; `-m slow` runs `SLOW_CASES` more.
CASES = 2000
SLOW_CASES = 20000


@pytest.fixture(scope="module")
def worker():
    with RuntimeWorker() as running:
        yield running


def _check(comparison: Comparison) -> None:
    print()
    print(comparison.summary())
    misses = [
        (v.mutant.seed, v.mutant.field, v.mutant.how, v.runtime.reason) for v in comparison.misses
    ]
    assert not misses, misses[:20]
    # Both sides say both things, so a checker that accepts or refuses everything fails.
    assert comparison.count(True, True) > len(comparison.verdicts) // 10
    assert comparison.count(False, False) > len(comparison.verdicts) // 10


def test_the_seeds_load_and_need_nothing_this_build_lacks(worker, tmp_path):
    """Else every mutant of a seed would be left out, and the comparison would prove nothing
    (an operator the validator names otherwise than the runtime registers it, say)."""
    comparison = compare(as_is(golden_seeds()), worker, tmp_path)
    assert [
        (v.mutant.seed, v.problems, v.lacking, str(v.runtime))
        for v in comparison.verdicts
        if not (v.tool_valid and v.runtime_loaded) or v.lacking
    ] == []


def test_the_runtime_refuses_no_file_the_validator_calls_valid(worker, tmp_path):
    _check(compare(mutants(golden_seeds(), CASES, seed=0), worker, tmp_path))


@pytest.mark.slow
def test_the_runtime_refuses_no_file_the_validator_calls_valid_at_scale(worker, tmp_path):
    _check(compare(mutants(golden_seeds(), SLOW_CASES, seed=1), worker, tmp_path))


@needs_realworld
def test_the_runtime_refuses_no_real_file_nor_mutant_of_one_the_validator_calls_valid(
    worker, tmp_path
):
    seeds = realworld_seeds()
    comparison = compare([*as_is(seeds), *mutants(seeds, CASES, seed=2)], worker, tmp_path)
    print()
    print(comparison.summary())
    misses = [
        (v.mutant.seed, v.mutant.field, v.mutant.how, v.runtime.reason) for v in comparison.misses
    ]
    assert not misses, misses[:20]


def test_a_validator_that_calls_everything_valid_fails_the_comparison(
    worker, tmp_path, monkeypatch
):
    everything_valid = validate.Validity((), (), (), ())
    monkeypatch.setattr(validate, "validate_file", lambda pte, data_files=(): everything_valid)
    comparison = compare(mutants(golden_seeds(), 200), worker, tmp_path)
    assert comparison.misses


def test_the_worker_answers_loaded_with_the_methods(worker):
    seed = next(s for s in golden_seeds() if s.name == "external/dirty")
    assert worker.load(seed.pte, seed.ptds) == Loaded(("forward",))


def test_the_worker_gives_the_runtime_reason(worker):
    seed = next(s for s in golden_seeds() if s.name == "external/dirty")
    refused = worker.load(seed.pte)  # without the .ptd its weights are in
    assert isinstance(refused, Refused) and not refused.crashed
    assert "Failed to load method forward" in refused.log[-1]


def test_a_crash_is_a_refusal_and_the_worker_goes_on(worker, tmp_path):
    seed = next(s for s in golden_seeds() if s.name == "external/pruned")
    damaged = bytearray(seed.ptds[0].read_bytes())
    damaged[123] ^= 1  # a FlatTensor offset the runtime follows out of the file: SIGSEGV
    ptd = tmp_path / "damaged.ptd"
    ptd.write_bytes(bytes(damaged))
    crashes = worker.crashes
    before, crashed, after = worker.load_all(
        [(seed.pte, seed.ptds), (seed.pte, [ptd]), (seed.pte, seed.ptds)]
    )
    assert isinstance(before, Loaded) and isinstance(after, Loaded)
    assert isinstance(crashed, Refused) and crashed.crashed
    assert worker.crashes == crashes + 1


def test_the_output_hook_names_an_output_the_runtime_refuses(worker, tmp_path):
    from emitter_filter._program_fbs.executorch_flatbuffer.Buffer import BufferT
    from emitter_filter.ondisk.write.output import OutputFile
    from tests.layouts import with_program_changed
    from tests.load_outputs import check_outputs

    def placeholder_beside_the_segment(program) -> None:
        program.constantBuffer = [BufferT()]

    good = next(s for s in golden_seeds() if s.name == "plain/pruned").pte
    bad = tmp_path / "bad.pte"
    bad.write_bytes(with_program_changed(good.read_bytes(), placeholder_beside_the_segment))
    refused: list[str] = []
    check_outputs([OutputFile(str(good), -1, b"")], refused, worker)
    assert refused == []
    check_outputs([OutputFile(str(bad), -1, b"")], refused, worker)
    assert len(refused) == 1 and "Only one should be used" in refused[0]
