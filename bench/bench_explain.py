"""Time `emitter-filter explain`, `diff` and `budget check` on a generated 1 GiB .pte.

Run as a script (not collected by pytest). Builds the file `bench_files.py`
builds (a live table of 15/16 of the size, a dead buffer), prunes it into a
second file (the dead buffer gone: a real diff), then measures each command in
its own subprocess, start-up included: wall seconds and peak RSS. Baselines in
the same run: `cp` of the file and `audit` (the analysis every tool shares).
Everything is deleted afterwards.

    python bench/bench_explain.py --gib 1 --repeat 3
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

from bench.bench_files import build_pte, measure, median, summarize_runs, work_directory  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0, help="size of the generated .pte")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to build (default: a temporary dir)")
    options = parser.parse_args()

    workdir = work_directory(parser, options.dir, "ef-bench-explain-")
    try:
        pte = os.path.join(workdir, "model.pte")
        started = time.perf_counter()
        build_pte(pte, int(options.gib * (1 << 30)))
        build_seconds = time.perf_counter() - started
        cli = [sys.executable, "-m", "emitter_filter"]
        pruned = os.path.join(workdir, "pruned.pte")
        subprocess.run([*cli, "prune", pte, "-o", pruned], check=True, capture_output=True)
        budget = os.path.join(workdir, "budget.json")
        subprocess.run(
            [*cli, "budget", "write", pte, "-o", budget], check=True, capture_output=True
        )
        # The budget of the large file, checked on the smaller one (a diff, within budget).
        with open(budget) as f:
            document = json.load(f)
        document["files"] = {pruned: document["files"][pte]}
        with open(budget, "w") as f:
            json.dump(document, f)
        copy = os.path.join(workdir, "copy.pte")
        commands = {
            "cp": ["cp", pte, copy],
            "audit": [*cli, "audit", pte, "--json"],
            "explain": [*cli, "explain", pte],
            "explain_json": [*cli, "explain", pte, "--json"],
            "explain_html": [*cli, "explain", pte, "--html", os.path.join(workdir, "p.html")],
            "diff": [*cli, "diff", pte, pruned],
            "diff_markdown": [*cli, "diff", pte, pruned, "--markdown"],
            "budget_check": [*cli, "budget", "check", pruned, "--budget", budget],
        }
        for argv in commands.values():  # warm the page cache for every command alike
            measure(argv)
        results = {name: [] for name in commands}
        for _ in range(options.repeat):
            for name, argv in commands.items():
                results[name].append(measure(argv))
        cp_seconds = median(results["cp"], "seconds")
        audit_seconds = median(results["audit"], "seconds")
        summary = {
            "file_bytes": os.path.getsize(pte),
            "pruned_bytes": os.path.getsize(pruned),
            "build_seconds": round(build_seconds, 1),
            **{name: summarize_runs(runs) for name, runs in results.items()},
            **{
                f"{name}_over_cp": round(median(results[name], "seconds") / cp_seconds, 3)
                for name in commands
                if name != "cp"
            },
            **{
                f"{name}_over_audit": round(median(results[name], "seconds") / audit_seconds, 3)
                for name in commands
                if name not in ("cp", "audit")
            },
        }
        print(json.dumps(summary, indent=2))
    finally:
        shutil.rmtree(workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
