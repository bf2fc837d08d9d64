"""What the hook's structural proofs cost, as a share of `to_executorch`, on ExecuTorch's llama
example at stories15M shape with its embedding stored twice.

Run as a script (not collected by pytest; nothing is downloaded, the weights are random).
Writes a stories15M-shaped checkpoint whose `output.weight` equals `tok_embeddings.weight`
(stories models tie them; `bench.llama.write_checkpoint(tied=True)`), then runs ExecuTorch's
`export_llama` on it in this process, fp32 to XNNPACK with KV cache and no quantization, so
the embedding is stored once as the portable embedding's constant (36,864,000 B) and once
as XNNPACK's named data for the head: the dedupe has something to share. Every export runs
inside `emitter_filter.pruning(dedupe_constants=True)`, as `EMITTER_FILTER_PRUNE=1
EMITTER_FILTER_DEDUPE=1` would, and times the exporter's `to_executorch`
(`llama.observe_to_executorch`) and, within it, the prune's proof (`PruneProof.take` and
`.check`) and the dedupe's (`hook._prove_deduplicated`), wrapped by
`bench_hook_overhead`'s `_time_the_prune_proof` and `_time_the_proof`. The first export
warms up and is not counted; one export takes about 50 s on 2 cores.

Prints, over the counted exports: the median `to_executorch`, the filter's and the
dedupe's own seconds (from the report), each proof's median and its median share of the
same call, both proofs together, how many prunes changed the program (a prune that changes
nothing takes nothing to prove), how often `moved_only` proved the dedupe without
`prove_rewrite`, the dedupe's shared ranges and saved bytes, the `.pte` size, each round's
figures, and the load average before and after. With `--fallback`, `moved_only`'s answer is
taken as False, so the dedupe's proof is `moved_only` then `proof.prove_rewrite`: the
proof's cost where `moved_only` cannot prove. The exporter's own output (its prints
too) goes to stderr; the summary alone to stdout.

    python -m bench.bench_proof_llama --rounds 5 2>/dev/null  # 6 exports, about 5 min
    python -m bench.bench_proof_llama --rounds 5 --fallback 2>/dev/null
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Rounds:
    """Per counted export: seconds of each part, and what the dedupe did."""

    export: list[float] = field(default_factory=list)
    to_executorch: list[float] = field(default_factory=list)
    filter: list[float] = field(default_factory=list)
    dedupe: list[float] = field(default_factory=list)
    prune_proof: list[float] = field(default_factory=list)
    dedupe_proof: list[float] = field(default_factory=list)
    saved: list[int] = field(default_factory=list)
    shared: list[int] = field(default_factory=list)
    size: list[int] = field(default_factory=list)


def _count_moved_only(fallback: bool) -> list[bool]:
    """Wraps `moved_proof.moved_only`: each call's answer (True: proven from the moved
    ranges; False: `prove_rewrite` walked every method) is appended to the list returned.
    With `fallback`, its answer is taken as False, so `prove_rewrite` runs after it: the
    proof's cost when `moved_only` cannot prove."""
    from emitter_filter.ondisk.analyse import moved_proof

    answers: list[bool] = []
    moved_only = moved_proof.moved_only

    def counted(*args, **kwargs) -> bool:
        answer = moved_only(*args, **kwargs) and not fallback
        answers.append(bool(answer))
        return answer

    moved_proof.moved_only = counted
    return answers


def _export_once(checkpoint: Path, params: Path, outdir: Path):
    """One `export_llama` run, pruned and deduplicated: (export s, to_executorch s, manager)."""
    import emitter_filter
    from bench import llama

    argv = llama.exporter_argv(checkpoint, params, outdir, quantize=False)
    started = time.perf_counter()
    with (
        emitter_filter.pruning(dedupe_constants=True),
        llama.observe_to_executorch() as seen,
        contextlib.redirect_stdout(sys.stderr),  # The exporter's prints: stdout is ours.
    ):
        llama.run_exporter(argv)
    export_seconds = time.perf_counter() - started
    if len(seen.calls) != 1:
        raise RuntimeError(f"expected one to_executorch call, saw {len(seen.calls)}")
    seconds, manager, _ = seen.calls[0]
    return export_seconds, seconds, manager


def _measure(rounds: int, workdir: Path, fallback: bool) -> tuple[Rounds, list[bool], int]:
    """Exports `rounds + 1` times (the first uncounted): the figures, `moved_only`'s
    answers and the prunes that took a proof, of the counted exports."""
    import emitter_filter
    from bench import bench_hook_overhead as overhead, llama

    checkpoint, params = llama.write_checkpoint(workdir / "checkpoint", tied=True)
    proof_s = overhead._time_the_proof()
    prune_proof_s = overhead._time_the_prune_proof()
    moved = _count_moved_only(fallback)
    _export_once(checkpoint, params, workdir / "out")  # Warm-up, not counted.
    overhead._TAKEN.clear()
    moved.clear()
    figures = Rounds()
    for _ in range(rounds):
        proof_s.clear()
        prune_proof_s.clear()
        export_seconds, seconds, manager = _export_once(checkpoint, params, workdir / "out")
        report = emitter_filter.report(manager)
        if report is None or report.dedupe is None:
            raise RuntimeError(f"the export was not deduplicated: {report}")
        figures.export.append(export_seconds)
        figures.to_executorch.append(seconds)
        figures.filter.append(report.seconds)
        figures.dedupe.append(report.dedupe.seconds)
        figures.prune_proof.append(sum(prune_proof_s))
        figures.dedupe_proof.append(sum(proof_s))
        figures.saved.append(report.dedupe.saved_bytes)
        figures.shared.append(len(report.dedupe.shared))
        figures.size.append(len(manager.buffer))
    return figures, list(moved), len(overhead._TAKEN)


def _line(label: str, part: list[float], whole: list[float]) -> str:
    share = statistics.median(p / t for p, t in zip(part, whole, strict=True))
    return (
        f"{label:<32} {statistics.median(part) * 1e3:10.3f} ms "
        f"({share * 100:.2f}% of the same to_executorch)"
    )


def _print(figures: Rounds, moved: list[bool], taken: int, loads: tuple) -> None:
    whole = figures.to_executorch
    n = len(whole)
    print(f"llama stories15M shape, tied embedding, fp32 XNNPACK + KV cache; {n} exports counted")
    print(f"{'export_llama (whole run)':<32} {statistics.median(figures.export):10.1f} s")
    print(f"{'to_executorch':<32} {statistics.median(whole) * 1e3:10.1f} ms")
    print(_line("filter (report.seconds)", figures.filter, whole))
    print(_line("dedupe (report.dedupe.seconds)", figures.dedupe, whole))
    print(_line("the prune's proof", figures.prune_proof, whole))
    print(_line("the dedupe's proof", figures.dedupe_proof, whole))
    both = [p + q for p, q in zip(figures.prune_proof, figures.dedupe_proof, strict=True)]
    print(_line("both proofs", both, whole))
    print(f"prunes that changed the program (their proof read it before and after): {taken} of {n}")
    print(
        f"dedupe proven by moved_only alone: {sum(moved)} of {len(moved)} proofs"
        + ("" if all(moved) else " (the others by prove_rewrite)")
    )
    print(
        f"dedupe shared {figures.shared[-1]} range(s), saved {figures.saved[-1]:,} B; "
        f".pte {figures.size[-1]:,} B (every export the same: "
        f"{len(set(zip(figures.shared, figures.saved, figures.size, strict=True))) == 1})"
    )
    print("each export (ms): to_executorch / prune's proof / dedupe's proof")
    for t, p, d in zip(whole, figures.prune_proof, figures.dedupe_proof, strict=True):
        print(f"  {t * 1e3:9.1f} {p * 1e3:9.3f} {d * 1e3:9.2f}")
    before, after = loads
    print(f"load average (1, 5, 15 min) before {before}, after {after}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rounds", type=int, default=3, help="exports counted, after one warm-up (default 3)"
    )
    parser.add_argument(
        "--fallback",
        action="store_true",
        help="take moved_only's answer as False, so prove_rewrite runs too (its cost)",
    )
    options = parser.parse_args(argv)
    if options.rounds < 1:
        parser.error("--rounds must be at least 1")
    import executorch.exir  # noqa: F401  (its import time is not the exports')

    before = tuple(round(load, 2) for load in os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="bench_proof_llama_") as workdir:
        figures, moved, taken = _measure(options.rounds, Path(workdir), options.fallback)
    after = tuple(round(load, 2) for load in os.getloadavg())
    if options.fallback:
        print("--fallback: moved_only's answer taken as False, so prove_rewrite ran after it")
    _print(figures, moved, taken, (before, after))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
