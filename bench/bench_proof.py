"""What the structural proof (`ondisk/analyse/proof.py`) adds to `prune` and `prune --dedupe`
on disk, in one process, with and without it alternating.

Run as a script (not collected by pytest). Exports a zoo model once (default: the tied
`Embedding(32000, 288)` lowered to XNNPACK, 74 MB, half of it stored twice), then times
`prune_file` of it, the proof on and off (its two calls replaced by nothing), the order
rotating every round. Prints the medians and the ratio of the same run.

    python -m bench.bench_proof --rounds 7
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time


def _prune(src: str, out: str, dedupe: bool) -> float:
    from emitter_filter.ondisk.prune import prune_file

    started = time.perf_counter()
    prune_file(src, out, dedupe=dedupe)
    seconds = time.perf_counter() - started
    os.unlink(out)
    return seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tied_embedding_32000x288", help="a bench.zoo case")
    parser.add_argument("--rounds", type=int, default=7, help="calls per mode (default 7)")
    options = parser.parse_args(argv)

    import logging

    from bench.zoo import case_named
    from emitter_filter.ondisk import prune as prune_module
    from emitter_filter.ondisk.analyse import proof

    logging.getLogger("emitter_filter").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as directory:
        src = os.path.join(directory, "model.pte")
        with open(src, "wb") as file:
            file.write(case_named(options.model).build().to_executorch().buffer)
        out = os.path.join(directory, "out.pte")
        on = (prune_module.prove_outputs, prune_module.proved)

        def off_proved(check, claims, described=None):
            return check

        modes = {
            "proof on": on,
            "proof off": (lambda outputs, claims: None, off_proved),
        }
        times: dict[tuple[str, bool], list[float]] = {}
        for dedupe in (False, True):
            _prune(src, out, dedupe)  # warm-up
            for round_index in range(options.rounds):
                names = list(modes)[round_index % 2 :] + list(modes)[: round_index % 2]
                for name in names:
                    prune_module.prove_outputs, prune_module.proved = modes[name]
                    times.setdefault((name, dedupe), []).append(_prune(src, out, dedupe))
        prune_module.prove_outputs, prune_module.proved = on
        assert proof.prove_rewrite  # the module measured
        size = os.path.getsize(src)
    print(f"model {options.model} ({size:,} B), {options.rounds} rounds, alternating, medians")
    for dedupe in (False, True):
        command = "prune --dedupe" if dedupe else "prune"
        with_it = statistics.median(times[("proof on", dedupe)])
        without = statistics.median(times[("proof off", dedupe)])
        print(
            f"{command:<15} proof on {with_it * 1e3:8.1f} ms, off {without * 1e3:8.1f} ms: "
            f"{(with_it / without - 1) * 100:+.1f}%"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
