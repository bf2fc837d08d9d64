"""What pruning and deduplication add to `to_executorch`, in one process, modes alternating.

Run as a script (not collected by pytest). Builds a zoo model (default: the tied
`Embedding(32000, 288)` lowered to XNNPACK, half of its bytes stored twice) afresh
before every call, untimed, then times `to_executorch` in each mode, the modes'
order rotating every round so that none always runs first or last:

- ``plain``: the hook installed, nothing asked of it (ExecuTorch's own bytes);
- ``pruned+INFO``: `prune_constants=True` with the `emitter_filter` logger at INFO
  and a handler (what `emitter-filter run` does);
- ``deduped+INFO``: `prune_constants=True, dedupe_constants=True`, the same logging.

Prints the median of each mode and what it adds to the plain median, the
filter's and the dedupe's own seconds from the report of the same call, the
structural proofs' (the prune's on the emitter's objects, `inprocess/prune_proof.py`;
the dedupe's, `ondisk/analyse/proof.py`, on the bytes it rewrote; and both) as a share
of the same call's `to_executorch`, each
round's time (round 1 against the later ones), and, in a second pass with
`tracemalloc` on, the peak of Python allocations during one call of each mode.

    python -m bench.bench_hook_overhead --rounds 5
    python -m bench.bench_hook_overhead --model unused_buffer --rounds 5
    python -m bench.bench_hook_overhead --model tied_llm_6x288 --rounds 7 --no-memory  # 10 methods
"""

from __future__ import annotations

import argparse
import gc
import io
import logging
import statistics
import time
import tracemalloc

MODES = ("plain", "pruned+INFO", "deduped+INFO")


def _config(mode: str):
    from emitter_filter import ExecutorchBackendConfig

    if mode == "plain":
        return ExecutorchBackendConfig()
    return ExecutorchBackendConfig(prune_constants=True, dedupe_constants=mode.startswith("dedup"))


def _call(build, mode: str) -> tuple[float, float | None, float | None, int]:
    """One `to_executorch` of a freshly built model: (seconds, filter s, dedupe s, bytes)."""
    import emitter_filter

    edge = build()
    gc.collect()
    config = _config(mode)
    started = time.perf_counter()
    manager = edge.to_executorch(config)
    seconds = time.perf_counter() - started
    size = len(manager.buffer)
    if mode == "plain":
        return seconds, None, None, size
    report = emitter_filter.report(manager)
    dedupe = report.dedupe.seconds if report.dedupe is not None else None
    return seconds, report.seconds, dedupe, size


def _peak(build, mode: str) -> int:
    """Peak bytes Python allocated during one `to_executorch` (tracemalloc)."""
    edge = build()
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        edge.to_executorch(_config(mode))
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _time_the_proof() -> list[float]:
    """Wraps the hook's proof of its dedupe (`hook._prove_deduplicated`): each
    call's seconds are appended to the list returned."""
    from emitter_filter.inprocess import hook

    seconds: list[float] = []
    prove = hook._prove_deduplicated

    def timed(*args) -> None:
        started = time.perf_counter()
        try:
            prove(*args)
        finally:
            seconds.append(time.perf_counter() - started)

    hook._prove_deduplicated = timed  # type: ignore[assignment]
    return seconds


# One entry per `PruneProof.take` (a prune that changed something), counted in `main`.
_TAKEN: list[int] = []


def _time_the_prune_proof() -> list[float]:
    """Times the hook's proof of its prune (`prune_proof.PruneProof`: what each plan reads,
    and the journal, before the prune changes anything, `take`; the same read and compare
    after, `check`): each call's seconds are appended to the list returned. A prune that
    changes nothing takes nothing: its `check` returns at once."""
    from emitter_filter.inprocess import prune_proof

    seconds: list[float] = []

    class Timed(prune_proof.PruneProof):
        def take(self) -> None:
            started = time.perf_counter()
            try:
                super().take()
            finally:
                seconds.append(time.perf_counter() - started)
                _TAKEN.append(1)

        def check(self, named_data) -> None:
            started = time.perf_counter()
            try:
                super().check(named_data)
            finally:
                seconds.append(time.perf_counter() - started)

    prune_proof.PruneProof = Timed  # type: ignore[misc,assignment]
    return seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tied_embedding_32000x288", help="a bench.zoo case")
    parser.add_argument("--rounds", type=int, default=5, help="calls per mode (default 5)")
    parser.add_argument("--no-memory", action="store_true", help="skip the tracemalloc pass")
    options = parser.parse_args(argv)

    import emitter_filter
    from bench.zoo import case_named

    build = case_named(options.model).build
    emitter_filter.install()
    handler = logging.StreamHandler(io.StringIO())
    logging.getLogger("emitter_filter").addHandler(handler)
    logging.getLogger("emitter_filter").setLevel(logging.INFO)

    proof_s = _time_the_proof()
    prune_proof_s = _time_the_prune_proof()
    _call(build, "plain")  # Warm-up: first imports and kernels, untimed.
    _TAKEN.clear()
    times: dict[str, list[float]] = {m: [] for m in MODES}
    filter_s: dict[str, list[float]] = {m: [] for m in MODES}
    dedupe_s: list[float] = []
    sizes: dict[str, int] = {}
    proved: list[float] = []
    prune_proved: dict[str, list[float]] = {m: [] for m in MODES[1:]}
    for round_index in range(options.rounds):
        order = MODES[round_index % 3 :] + MODES[: round_index % 3]
        for mode in order:
            proof_s.clear()
            prune_proof_s.clear()
            seconds, filtered, deduped, sizes[mode] = _call(build, mode)
            times[mode].append(seconds)
            if mode in prune_proved:
                prune_proved[mode].append(sum(prune_proof_s))
            if mode == "deduped+INFO":
                proved.append(sum(proof_s))
            if filtered is not None:
                filter_s[mode].append(filtered)
            if deduped is not None:
                dedupe_s.append(deduped)

    plain = statistics.median(times["plain"])
    print(f"model {options.model}, {options.rounds} rounds, modes alternating, medians")
    print(f"{'mode':<14} {'to_executorch':>14} {'added':>8} {'filter (report)':>16} {'bytes':>14}")
    for mode in MODES:
        median = statistics.median(times[mode])
        own = f"{statistics.median(filter_s[mode]) * 1e3:.1f} ms" if filter_s[mode] else ""
        added = f"{(median / plain - 1) * 100:+.1f}%" if mode != "plain" else ""
        print(f"{mode:<14} {median * 1e3:11.1f} ms {added:>8} {own:>16} {sizes[mode]:>14,}")
    if dedupe_s:
        share = statistics.median(
            d / t for d, t in zip(dedupe_s, times["deduped+INFO"], strict=True)
        )
        print(
            f"dedupe's own time, median: {statistics.median(dedupe_s) * 1e3:.1f} ms "
            f"({share * 100:.1f}% of the same call)"
        )
    for mode, seconds_of in prune_proved.items():
        share = statistics.median(p / t for p, t in zip(seconds_of, times[mode], strict=True))
        print(
            f"the prune's proof ({mode}), median: {statistics.median(seconds_of) * 1e3:.3f} ms "
            f"({share * 100:.2f}% of the same call)"
        )
    calls = options.rounds * len(prune_proved)
    print(
        f"prunes that changed the program (their proof read it before and after): "
        f"{len(_TAKEN)} of {calls}"
        + ("" if _TAKEN else "; the others changed nothing, so nothing was read to prove")
    )
    if any(proved):
        share = statistics.median(p / t for p, t in zip(proved, times["deduped+INFO"], strict=True))
        print(
            f"the dedupe's proof, median: {statistics.median(proved) * 1e3:.2f} ms "
            f"({share * 100:.2f}% of the same call)"
        )
        both = [p + q for p, q in zip(proved, prune_proved["deduped+INFO"], strict=True)]
        share = statistics.median(p / t for p, t in zip(both, times["deduped+INFO"], strict=True))
        print(
            f"both proofs (deduped+INFO), median: {statistics.median(both) * 1e3:.2f} ms "
            f"({share * 100:.2f}% of the same call)"
        )
    print("each round (ms):")
    for mode in MODES:
        print(f"  {mode:<14} " + " ".join(f"{t * 1e3:7.1f}" for t in times[mode]))
    if not options.no_memory:
        print("tracemalloc peak during one call:")
        for mode in MODES:
            print(f"  {mode:<14} {_peak(build, mode) / (1 << 20):8.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
