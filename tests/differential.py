"""The validator against ExecuTorch's runtime, file by file: who calls what valid.

Each mutant (`tests.runtime_mutations`) goes through `validate_file` here and
through the runtime's `load_program` + `load_method` of every method in
`tests.runtime_worker`. The runtime refusing a file the validator calls valid is a
miss (the validator's defect), unless the file needs an operator or a backend
this runtime build lacks: the validator lists those instead of judging them. The
validator refusing a file the runtime loads is counted by its reason (stricter on
purpose, or a defect to look at).

    python -m tests.differential --cases 20000     (by hand, at scale)
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from tests.fuzz_files import Seed
from tests.runtime_mutations import Mutant, as_is, mutants
from tests.runtime_worker import Loaded, RuntimeWorker

#: Files per round trip to the worker.
BATCH = 500


@dataclasses.dataclass(frozen=True)
class Verdict:
    mutant: Mutant
    problems: tuple[str, ...]  # the validator's; () = valid
    runtime: object  # Loaded or Refused
    #: Operators and backends the file needs and this runtime build lacks, and data keys
    #: in no data file given (`Validity.missing_data`): refusals for the build's or the
    #: caller's sake, which the validator lists instead of judging.
    lacking: tuple[str, ...]

    @property
    def tool_valid(self) -> bool:
        return not self.problems

    @property
    def runtime_loaded(self) -> bool:
        return isinstance(self.runtime, Loaded)

    @property
    def excuse(self) -> str | None:
        """Why a refusal is for the build's, the caller's or the host's sake, or for a
        delegate blob's contents, not the program's; None if it is the program's."""
        log = self.runtime.log
        if self.lacking:
            return "needs what this run lacks: " + ", ".join(
                sorted(
                    {
                        item.split(" ")[0] if item.startswith("data ") else "operator or backend"
                        for item in self.lacking
                    }
                )
            )
        if any("bad_alloc" in line or "MemoryError" in line for line in log):
            return "an arena this machine cannot allocate"
        if any(line.startswith("'utf-8' codec can't decode") for line in log):
            return "a method name that is not UTF-8 (the pybindings cannot pass it to Python)"
        if _blob_refused(log):
            return "the delegate blob's contents (its backend's init refused them)"
        return None


@dataclasses.dataclass
class Comparison:
    verdicts: list[Verdict]
    seconds: float
    crashes: int

    def count(self, tool_valid: bool, runtime_loaded: bool) -> int:
        return sum(
            v.tool_valid == tool_valid and v.runtime_loaded == runtime_loaded for v in self.verdicts
        )

    @property
    def misses(self) -> list[Verdict]:
        """Valid to the validator, refused by the runtime for the file's sake."""
        return [
            v for v in self.verdicts if v.tool_valid and not v.runtime_loaded and v.excuse is None
        ]

    @property
    def excused_refusals(self) -> list[Verdict]:
        return [
            v
            for v in self.verdicts
            if v.tool_valid and not v.runtime_loaded and v.excuse is not None
        ]

    @property
    def stricter(self) -> list[Verdict]:
        return [v for v in self.verdicts if not v.tool_valid and v.runtime_loaded]

    def summary(self) -> str:
        lines = [
            f"{len(self.verdicts)} files in {self.seconds:.1f} s ({self.crashes} runtime crashes)",
            f"  both valid: {self.count(True, True)}; both refuse: {self.count(False, False)}",
            f"  validator valid, runtime refuses: {len(self.misses)} "
            f"(+{len(self.excused_refusals)} left out: build, data, memory, delegate blob)",
            f"  validator refuses, runtime loads: {len(self.stricter)}",
        ]
        if self.misses:
            lines.append("misses (validator valid, runtime refuses), by runtime reason:")
            lines += _table((v.mutant.field, _shape(v.runtime.reason)) for v in self.misses)
        if self.excused_refusals:
            lines.append("left out (validator valid, runtime refuses, not for the program's sake):")
            lines += _table((v.mutant.field, v.excuse) for v in self.excused_refusals)
        if self.stricter:
            lines.append("validator refuses, runtime loads, by the validator's reason:")
            lines += _table((v.mutant.field, _shape(v.problems[0])) for v in self.stricter)
        return "\n".join(lines)


def _shape(message: str) -> str:
    """A message with its numbers, names and paths generalised, to count classes of it."""
    message = re.sub(r"/[^\s:'\"]+", "PATH", message)
    message = re.sub(r"'[^']*'|\"[^\"]*\"|b'[^']*'", "'…'", message)
    return re.sub(r"-?\d+", "N", message)[:200]


def _table(rows) -> list[str]:
    return [f"  {n:>6}  {field}: {reason}" for (field, reason), n in Counter(rows).most_common()]


def _blob_refused(log: Sequence[str]) -> bool:
    """A backend's `init` refused its blob for what the blob says (a corrupt XNNPACK graph):
    opaque to a validator of the program. Named data it cannot find is the program's."""
    return any("Init failed for backend" in line for line in log) and not any(
        "Failed to get constant data for key" in line for line in log
    )


def _lacking(validity, worker: RuntimeWorker) -> tuple[str, ...]:
    operators = [o for o in validity.operators if o not in worker.operators]
    backends = [b for b in validity.backends if b not in worker.backends]
    data = [f"data {key}" for key in validity.missing_data]
    return tuple(operators + backends + data)


def compare(files: Iterable[Mutant], worker: RuntimeWorker, workdir: Path) -> Comparison:
    """Each file (`mutants(...)`, `as_is(...)`) through the validator and the runtime."""
    from emitter_filter.errors import ProgramFormatError
    from emitter_filter.ondisk.analyse.validate import validate_file

    started = time.perf_counter()
    crashes = worker.crashes
    verdicts: list[Verdict] = []
    batch: list[tuple[Mutant, Path, tuple[Path, ...]]] = []

    def flush() -> None:
        outcomes = worker.load_all([(pte, ptds) for _, pte, ptds in batch])
        for (mutant, pte, ptds), outcome in zip(batch, outcomes, strict=True):
            try:
                validity = validate_file(pte, ptds)
            except ProgramFormatError as error:  # a data file it cannot read, say
                verdicts.append(Verdict(mutant, (str(error),), outcome, ()))
                continue
            verdicts.append(
                Verdict(mutant, tuple(validity.problems), outcome, _lacking(validity, worker))
            )
        batch.clear()

    for index, mutant in enumerate(files):
        pte, ptds = mutant.write(workdir / str(index))
        batch.append((mutant, pte, ptds))
        if len(batch) == BATCH:
            flush()
    if batch:
        flush()
    return Comparison(verdicts, time.perf_counter() - started, worker.crashes - crashes)


def golden_seeds() -> list[Seed]:
    """The test programs as upstream wrote them and as pruned (`tests/golden`)."""
    from tests.files import CASES, GOLDEN, saved

    seeds = []
    for case in (*CASES, "clean"):
        for state in ("dirty", "pruned"):
            pte, ptds = saved(GOLDEN / case / state)
            seeds.append(Seed(f"{case}/{state}", pte, ptds))
    return seeds


def realworld_seeds() -> list[Seed]:
    """The real files of `EMITTER_FILTER_REALWORLD_DIR` (none when it is not set)."""
    from tests.realworld import real_files

    return [Seed(pte.stem, pte, tuple(ptds)) for pte, ptds in real_files()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--show", type=int, default=3, help="examples of each miss to print")
    options = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="ef-differential-"))
    try:
        with RuntimeWorker() as worker:
            seeds = golden_seeds() + realworld_seeds()
            files = [*as_is(seeds), *mutants(seeds, options.cases, options.seed)]
            comparison = compare(files, worker, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(comparison.summary())
    shown: Counter = Counter()
    for verdict in comparison.misses:
        key = (verdict.mutant.field, _shape(verdict.runtime.reason))
        shown[key] += 1
        if shown[key] <= options.show:
            print(f"miss: {verdict.mutant.seed}, {verdict.mutant.field}: {verdict.mutant.how}")
            for line in verdict.runtime.log:
                print(f"    {line}")
    return 1 if comparison.misses else 0


if __name__ == "__main__":
    sys.exit(main())
