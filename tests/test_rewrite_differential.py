"""Every rewrite computes what its input computed, in ExecuTorch's runtime, on mutated files.

Seeds: the golden programs (portable, XNNPACK, with a `.ptd`, mutable state), a program
of two methods (`merge` of two of them) and an XNNPACK program whose two named-data keys
name one segment (aliased named data). Mutants of them (`tests/runtime_mutations.py`:
fields the runtime reads, set near their bounds; a fifth byte-level damage) that the
runtime loads *and runs* are kept; each goes through `prune`, `prune --dedupe`,
`split`, `merge` and `share`. Each exit-0 output must load, run, and give each method's
outputs bit for bit (inputs seeded from each method's metadata); each refusal must
leave nothing behind. The runtime runs in a child process (`tests/runtime_worker.py`):
a mutant that crashes it is left out, pytest goes on.

Seeded and bounded: `CASES` mutants by default (about 15 s of CPU, a fifth of them run);
`EMITTER_FILTER_FUZZ_CASES=5000` for more, `EMITTER_FILTER_FUZZ_SEED` for others
(docs/install.md, "Fuzzing").
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import importlib.util
import io
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

if importlib.util.find_spec("executorch.extension.pybindings.portable_lib") is None:
    pytest.skip("needs executorch's pybindings", allow_module_level=True)
# The worker loads with a .ptd (`data_path`), which the loaders take from executorch 1.5 on
# (as tests/test_runtime_differential.py): on 1.4 no seed would run.
if tuple(int(p) for p in importlib.metadata.version("executorch").split(".")[:2]) < (1, 5):
    pytest.skip(
        "the runtime's loaders take a .ptd (data_path) from executorch 1.5 on",
        allow_module_level=True,
    )

from emitter_filter.cli import main  # noqa: E402
from tests.differential import golden_seeds  # noqa: E402
from tests.fuzz_files import Seed  # noqa: E402
from tests.layouts import with_program_changed  # noqa: E402
from tests.runtime_mutations import Mutant, as_is, mutants  # noqa: E402
from tests.runtime_worker import Loaded, RuntimeWorker  # noqa: E402

#: Mutants in the default run; `EMITTER_FILTER_FUZZ_CASES` asks for more.
CASES = int(os.environ.get("EMITTER_FILTER_FUZZ_CASES", "300"))
SEED = int(os.environ.get("EMITTER_FILTER_FUZZ_SEED", "0"))


@dataclasses.dataclass(frozen=True)
class Rewrite:
    """One command: its arguments for a file set, and each output method's input method."""

    name: str

    def args(self, pte: Path, ptds: Sequence[Path], methods: Sequence[str], out: Path):
        data = [a for p in ptds for a in ("--data", str(p))]
        if self.name == "prune":
            return ["prune", str(pte), "-o", str(out / "model.pte"), *data, "--ptd-out", str(out)]
        if self.name == "prune --dedupe":
            return [*Rewrite("prune").args(pte, ptds, methods, out), "--dedupe"]
        if self.name == "split":
            return ["split", str(pte), "-o", str(out / "model.pte"), "--method", methods[0], *data]
        if self.name == "merge":
            args = ["merge", str(pte), "-o", str(out / "model.pte"), "--prefix", "m_=#1"]
            ptd_out = ["--ptd-out", str(out / "model.ptd")] if ptds else []
            return [*args, *data, *ptd_out]
        return ["share", str(pte), "--out", str(out), "--min-bytes", "1", *data]

    def renamed(self, method: str) -> str:
        return "m_" + method if self.name == "merge" else method

    def kept(self, methods: Sequence[str]) -> Sequence[str]:
        return methods[:1] if self.name == "split" else methods


REWRITES = tuple(Rewrite(n) for n in ("prune", "prune --dedupe", "split", "merge", "share"))


def _two_methods(root: Path) -> Seed:
    """`merge` of the portable and the mutable-state golden programs: two methods."""
    seeds = {s.name: s for s in golden_seeds()}
    out = root / "two" / "model.pte"
    out.parent.mkdir(parents=True)
    first, second = seeds["plain/dirty"].pte, seeds["mutated/dirty"].pte
    args = ["merge", str(first), str(second), "-o", str(out), "--prefix", "b_=#2"]
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(args) == 0
    return Seed("two methods", out)


def _aliased(root: Path) -> Seed:
    """The XNNPACK golden program with its bias's key on the weight's segment."""
    seeds = {s.name: s for s in golden_seeds()}

    def alias(program) -> None:
        program.namedData[1].segmentIndex = program.namedData[0].segmentIndex

    out = root / "aliased.pte"
    out.write_bytes(with_program_changed(seeds["xnnpack/dirty"].pte.read_bytes(), alias))
    return Seed("aliased named data", out)


@pytest.fixture(scope="module")
def worker():
    with RuntimeWorker() as running:
        yield running


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> list[Seed]:
    root = tmp_path_factory.mktemp("seeds")
    return [*golden_seeds(), _two_methods(root), _aliased(root)]


@dataclasses.dataclass
class Tally:
    """What the run saw: mutants run, outputs equal, refusals, findings."""

    runnable: int = 0
    equal: int = 0
    refused: int = 0
    findings: list = dataclasses.field(default_factory=list)


def _outputs(root: Path) -> tuple[Path, list[Path]]:
    return root / "model.pte", sorted(root.rglob("*.ptd"))


def _rewrite(
    mutant: Mutant, loaded: Loaded, pte: Path, ptds, work: Path, worker, tally: Tally
) -> None:
    methods = list(loaded.methods)
    written: list[tuple[Rewrite, Path]] = []
    for rewrite in REWRITES:
        out = work / rewrite.name.replace(" --", "-")
        out.mkdir()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = main(rewrite.args(pte, ptds, methods, out))
        if code != 0:
            tally.refused += 1
            left = sorted(p.relative_to(out) for p in out.rglob("*"))
            if left:
                tally.findings.append((mutant.seed, mutant.field, rewrite.name, "left", left))
            continue
        written.append((rewrite, out))
    files = []
    for rewrite, out in written:
        if rewrite.name == "share":
            shared = out / pte.name
            files.append((shared, sorted(out.glob("*.ptd"))))
        else:
            files.append(_outputs(out))
    results = worker.load_all(files, run=True)
    for (rewrite, _), result in zip(written, results, strict=True):
        if not isinstance(result, Loaded):
            tally.findings.append((mutant.seed, mutant.field, rewrite.name, "refused", result))
            continue
        for method in rewrite.kept(methods):
            before = loaded.outputs[method]
            after = result.outputs.get(rewrite.renamed(method))
            if before != after:
                finding = (mutant.seed, mutant.field, mutant.how, rewrite.name, method)
                tally.findings.append((*finding, "outputs differ"))
            else:
                tally.equal += 1


def _fuzz(files: Sequence[Mutant], worker, tmp_path: Path) -> Tally:
    tally = Tally()
    written = []
    for number, mutant in enumerate(files):
        pte, ptds = mutant.write(tmp_path / f"case{number}" / "in")
        written.append((mutant, pte, ptds))
    results = worker.load_all([(pte, ptds) for _, pte, ptds in written], run=True)
    for number, ((mutant, pte, ptds), result) in enumerate(zip(written, results, strict=True)):
        runs = isinstance(result, Loaded) and all(o is not None for o in result.outputs.values())
        if not runs:
            shutil.rmtree(tmp_path / f"case{number}")
            continue
        tally.runnable += 1
        _rewrite(mutant, result, pte, ptds, tmp_path / f"case{number}", worker, tally)
        shutil.rmtree(tmp_path / f"case{number}")
    return tally


def test_every_rewrite_of_the_seeds_runs_as_its_input(worker, seeds, tmp_path):
    tally = _fuzz(list(as_is(seeds)), worker, tmp_path)
    assert tally.runnable == len(seeds)
    assert tally.findings == []
    assert tally.equal >= len(seeds) * len(REWRITES) // 2


def test_every_rewrite_of_a_mutant_the_runtime_runs_computes_what_it_computed(
    worker, seeds, tmp_path
):
    tally = _fuzz(list(mutants(seeds, CASES, seed=SEED)), worker, tmp_path)
    print(
        f"\n{CASES} mutants: {tally.runnable} run; {tally.equal} method outputs equal, "
        f"{tally.refused} rewrites refused"
    )
    assert tally.findings == []
    assert tally.runnable > CASES // 10  # the mutants are not all refused by the runtime
