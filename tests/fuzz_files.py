"""Fuzz `emitter-filter audit` and `prune` with mutated and truncated `.pte`/`.ptd` files.

Every case mutates one seed file (bit flips, cut files, offsets and sizes made
to point outside the file or made huge, zeroed or appended bytes), runs both
commands through `emitter_filter.cli.main`, and classifies the outcome:

- `accepted`: both exit 0 or 1, and the pruned file reads back;
- `rejected`: exit 2 with a one-line message (a `ProgramFormatError`);
- anything else is a bug: `crash:<exception>`, `hang`, `leftover` (a file left
  behind after a failure), `input-changed`, `bad-exit`, `unreadable-output`.

Deterministic: case `i` of a run with `--seed s` is always the same mutation.

    python bench/fuzz_files.py --cases 10000     (or: python -m tests.fuzz_files ...)

`tests/ondisk/test_fuzz_files.py` runs a small corpus of the same cases in CI; the
harness lives here, with the tests, and `bench/fuzz_files.py` runs it at scale.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import io
import random
import shutil
import signal
import struct
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

#: Seconds one case may take before it counts as a hang.
CASE_TIMEOUT = 10

_EXTREMES = (
    0,
    1,
    7,
    0x7F,
    0x80,
    0xFF,
    0xFFFF,
    0x7FFFFFFF,
    0x80000000,
    0xFFFFFFFF,
    1 << 32,
    1 << 40,
    0x7FFFFFFFFFFFFFFF,
    0xFFFFFFFFFFFFFFFF,
)


@dataclasses.dataclass(frozen=True)
class Seed:
    """A valid program to mutate: its `.pte` and the `.ptd` files that go with it."""

    name: str
    pte: Path
    ptds: tuple[Path, ...] = ()


@dataclasses.dataclass(frozen=True)
class Case:
    seed: Seed
    target: int  # 0: the .pte, k: ptds[k - 1]
    mutation: str
    data: bytes


class _Hang(Exception):
    pass


def _words(data: bytes, size: int) -> list[int]:
    """Offsets where a little-endian u32/u64 field of the flatbuffer or header may sit."""
    return list(range(0, max(len(data) - size + 1, 0), 4))


def _interesting_offsets(data: bytes) -> list[int]:
    """Offsets of the header fields and of (offset, size) pairs that look like segments."""
    found = [8, 12, 16, 24, 32]  # eh00 / FH01 header fields
    for position in range(0, len(data) - 16, 4):
        offset, size = struct.unpack_from("<QQ", data, position)
        if 0 < size < len(data) and offset < len(data):
            found.append(position)
            found.append(position + 8)
    return found


def mutate(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    """One random mutation of `data`, and its name."""
    kind = rng.choice(
        [
            "bitflip",
            "bitflips",
            "truncate",
            "field",
            "field",
            "segment_field",
            "zero",
            "append",
            "splice",
            "empty_prefix",
        ]
    )
    buffer = bytearray(data)
    if kind == "bitflip" and buffer:
        position = rng.randrange(len(buffer) * 8)
        buffer[position // 8] ^= 1 << (position % 8)
    elif kind == "bitflips" and buffer:
        for _ in range(rng.randint(2, 16)):
            position = rng.randrange(len(buffer) * 8)
            buffer[position // 8] ^= 1 << (position % 8)
    elif kind == "truncate":
        return kind, bytes(buffer[: rng.randrange(len(buffer) + 1)])
    elif kind in ("field", "segment_field"):
        width = rng.choice((4, 8))
        positions = _interesting_offsets(data) if kind == "segment_field" else _words(data, width)
        positions = [p for p in positions if p + width <= len(buffer)]
        if positions:
            position = rng.choice(positions)
            value = rng.choice(
                (
                    *_EXTREMES,
                    len(data),
                    len(data) + rng.randint(1, 4096),
                    rng.getrandbits(width * 8),
                )
            )
            buffer[position : position + width] = (value % (1 << (width * 8))).to_bytes(
                width, "little"
            )
    elif kind == "zero" and buffer:
        start = rng.randrange(len(buffer))
        end = min(len(buffer), start + rng.randint(1, 256))
        buffer[start:end] = bytes(end - start)
    elif kind == "append":
        buffer += bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 512)))
    elif kind == "splice" and len(buffer) > 16:
        start = rng.randrange(len(buffer))
        end = min(len(buffer), start + rng.randint(1, 64))
        del buffer[start:end]
    elif kind == "empty_prefix":
        return kind, bytes(rng.randint(0, 64)) + bytes(buffer)
    return kind, bytes(buffer)


def cases(seeds: Sequence[Seed], count: int, seed: int = 0):
    """`count` cases, derandomised by `seed`: the same arguments give the same cases."""
    originals = {s.name: [s.pte.read_bytes(), *(p.read_bytes() for p in s.ptds)] for s in seeds}
    for index in range(count):
        rng = random.Random(f"{seed}:{index}")
        chosen = seeds[index % len(seeds)]
        target = rng.randrange(1 + len(chosen.ptds))
        mutation, data = mutate(rng, originals[chosen.name][target])
        yield Case(chosen, target, mutation, data)


def _digest(paths: Sequence[Path]) -> list[str]:
    return [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]


@contextlib.contextmanager
def _deadline(seconds: int):
    def expire(signum, frame):
        raise _Hang()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run_case(case: Case, workdir: Path) -> str:
    """Runs `audit` and `prune` on one mutated case; returns its outcome (see the docstring)."""
    from emitter_filter.cli import main
    from emitter_filter.ondisk.audit import audit_file

    if workdir.exists():
        shutil.rmtree(workdir)
    inputs = workdir / "in"
    outputs = workdir / "out"
    inputs.mkdir(parents=True)
    outputs.mkdir()
    pte = inputs / "model.pte"
    ptds = [inputs / p.name for p in case.seed.ptds]
    for index, path in enumerate([pte, *ptds]):
        source = case.seed.pte if index == 0 else case.seed.ptds[index - 1]
        path.write_bytes(case.data if index == case.target else source.read_bytes())
    before = _digest([pte, *ptds])
    ptd_args = [a for p in ptds for a in ("--data", str(p))]
    out = outputs / "model.pte"
    sink = io.StringIO()
    try:
        with (
            _deadline(CASE_TIMEOUT),
            contextlib.redirect_stdout(sink),
            contextlib.redirect_stderr(sink),
        ):
            audit_code = main(["audit", str(pte), *ptd_args, "--max-dead-bytes", "0"])
            prune_code = main(
                ["prune", str(pte), "-o", str(out), *ptd_args, "--ptd-out", str(outputs)]
            )
    except _Hang:
        return "hang"
    except BaseException as error:  # noqa: BLE001 - the point is to catch everything
        return f"crash:{type(error).__name__}: {str(error)[:160]}"
    if _digest([pte, *ptds]) != before:
        return "input-changed"
    if audit_code not in (0, 1, 2) or prune_code not in (0, 2):
        return "bad-exit"
    left = sorted(p.name for p in outputs.iterdir())
    if prune_code == 2:
        return "leftover" if left else "rejected"
    if any(name.endswith(".tmp") for name in left) or "model.pte" not in left:
        return "leftover"
    written_ptds = [outputs / p.name for p in ptds if (outputs / p.name).exists()]
    try:
        with _deadline(CASE_TIMEOUT):
            audit_file(out, written_ptds)
    except Exception:  # noqa: BLE001 - any failure to read our own output is the finding
        return "unreadable-output"
    return "accepted"


def fuzz(
    seeds: Sequence[Seed],
    count: int,
    seed: int = 0,
    workdir: Path | None = None,
    report: Callable[[int, Counter], None] | None = None,
) -> tuple[Counter, dict[str, Case]]:
    """Runs `count` cases; returns outcome counts (bugs by kind) and one example of each bug."""
    owned = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="ef-fuzz-")) if owned else workdir
    counts: Counter = Counter()
    examples: dict[str, Case] = {}
    try:
        for index, case in enumerate(cases(seeds, count, seed)):
            outcome = run_case(case, workdir / "case")
            kind = outcome.split(":", 1)[0] if outcome.startswith("crash") else outcome
            counts[kind if kind in ("accepted", "rejected") else outcome] += 1
            if kind not in ("accepted", "rejected"):
                examples.setdefault(outcome, case)
            if report is not None and (index + 1) % 1000 == 0:
                report(index + 1, counts)
    finally:
        if owned:
            shutil.rmtree(workdir, ignore_errors=True)
    return counts, examples


def build_seeds(directory: Path) -> list[Seed]:
    """Four small programs from upstream ExecuTorch, each with a dead buffer.

    Portable, external constants (a `.ptd`), XNNPACK (named data), and a buffer
    mutated in place with its initial state (the mutable data segment).
    """
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import ExecutorchBackendConfig, to_edge, to_edge_transform_and_lower
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.lin = torch.nn.Linear(4, 3)
            self.register_buffer("unused", torch.arange(32, dtype=torch.float32))

        def forward(self, x):
            return self.lin(x)

    class Mutated(Model):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("count", torch.zeros(3))

        def forward(self, x):
            self.count.add_(1)
            return self.lin(x) + self.count

    inputs = (torch.randn(2, 4),)
    seeds = []
    for name in ("portable", "external", "xnnpack", "mutable"):
        exported = torch.export.export(Mutated() if name == "mutable" else Model(), inputs)
        if name == "xnnpack":
            edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
        else:
            edge = to_edge(exported)
        config = ExecutorchBackendConfig(
            external_constants=name == "external",
            passes=[InitializedMutableBufferPass(["count"])] if name == "mutable" else [],
        )
        manager = edge.to_executorch(config)
        target = directory / name
        target.mkdir(parents=True)
        pte = target / "model.pte"
        pte.write_bytes(manager.buffer)
        manager.write_tensor_data_to_file(str(target))
        seeds.append(Seed(name, pte, tuple(sorted(target.glob("*.ptd")))))
    return seeds


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args(argv)

    directory = Path(tempfile.mkdtemp(prefix="ef-fuzz-seeds-"))
    try:
        seeds = build_seeds(directory)
        started = time.perf_counter()

        def progress(done: int, counts: Counter) -> None:
            print(
                f"{done:>7} cases, {time.perf_counter() - started:6.1f} s: {dict(counts)}",
                file=sys.stderr,
                flush=True,
            )

        counts, examples = fuzz(seeds, options.cases, options.seed, report=progress)
        seconds = time.perf_counter() - started
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(f"{options.cases} cases (seed {options.seed}) in {seconds:.1f} s")
    for outcome, count in counts.most_common():
        print(f"{count:>8}  {outcome}")
    for outcome, case in examples.items():
        print(f"example of {outcome}: seed {case.seed.name}, file {case.target}, {case.mutation}")
    bugs = sum(n for outcome, n in counts.items() if outcome not in ("accepted", "rejected"))
    return 1 if bugs else 0


if __name__ == "__main__":
    sys.exit(main())
