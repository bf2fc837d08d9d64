"""Time `emitter-filter merge` of programs that share most of their bytes, beside `cp`.

Run as a script (not collected by pytest): builds the set `bench_share` builds (three
programs of `--mib` MiB whose constant segments hold one table they all have, 3/4 of
the size, and one of their own), then measures, each in its own subprocess, start-up
included (wall seconds and peak RSS, `bench_files.measure`), alternating, each after a
`sync`: `cp` of the
three inputs (the baseline, same run) and `merge` of them into one file of three
methods. Checks that the merged file audits clean and stores the common table once.
Everything is deleted afterwards.

    python bench/bench_merge.py               # 3 x 32 MiB sharing 24 MiB
    python bench/bench_merge.py --mib 256     # 3 x 256 MiB sharing 192 MiB (the issue's)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.bench_files import measure, median, summarize_runs, work_directory  # noqa: E402
from bench.bench_share import build_set  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=float, default=32.0, help="size of each program")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to build (default: a /tmp dir)")
    options = parser.parse_args()

    workdir = work_directory(parser, options.dir, "ef-bench-merge-")
    try:
        inputs = os.path.join(workdir, "in")
        os.mkdir(inputs)
        started = time.perf_counter()
        ptes = build_set(inputs, int(options.mib * (1 << 20)))
        build_seconds = time.perf_counter() - started
        copied, out = os.path.join(workdir, "copy"), os.path.join(workdir, "merged.pte")
        os.mkdir(copied)
        cli = [sys.executable, "-m", "emitter_filter"]
        renames = [
            a
            for n, p in enumerate(ptes)
            for a in ("--method", f"p{n}={os.path.basename(p)}:forward")
        ]
        merge = [*cli, "merge", *ptes, "-o", out, *renames]
        measure(["cp", *ptes, copied])  # warm the page cache for every command alike
        results = {"cp": [], "merge": []}
        for _ in range(options.repeat):
            # Each starts with no writes of the one before pending (`sync`, not timed): the
            # disk's write-back of 800 MB would otherwise fall on whichever runs next.
            os.sync()
            results["cp"].append(measure(["cp", *ptes, copied]))
            os.sync()
            results["merge"].append(measure(merge))
            bytes_after = os.path.getsize(out)
            os.unlink(out)
        report = json.loads(
            subprocess.run([*merge, "--json"], capture_output=True, check=True).stdout
        )
        audit = json.loads(
            subprocess.run([*cli, "audit", out, "--json"], capture_output=True, check=True).stdout
        )
        before = sum(os.path.getsize(p) for p in ptes)
        summary = {
            "programs": len(ptes),
            "bytes_before": before,
            "bytes_after": bytes_after,
            "saved_fraction": round(1 - bytes_after / before, 3),
            "stored_once": report["stored_once"],
            "methods": [m["name"] for m in report["methods"]],
            "merged_dead_bytes": audit["dead_bytes"],
            "merged_duplicated_bytes": audit["duplicated_bytes"],
            "build_seconds": round(build_seconds, 1),
            **{name: summarize_runs(runs) for name, runs in results.items()},
            "merge_over_cp": round(
                median(results["merge"], "seconds") / median(results["cp"], "seconds"), 3
            ),
        }
        print(json.dumps(summary, indent=2))
    finally:
        shutil.rmtree(workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
