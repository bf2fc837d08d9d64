"""Time `emitter-filter audit` and `prune` on a generated .pte of a given size.

Run as a script (not collected by pytest): builds, through upstream ExecuTorch, a
model whose constant segment holds one large live table and a dead buffer (1/16
of the size) into a temporary directory (default under /tmp), then measures
each command in its own subprocess, start-up included: wall seconds and peak
RSS. Baselines measured in the same run: a plain `cp` of the file, and
ExecuTorch's own in-memory round trip (`deserialize_pte_binary` +
`serialize_pte_binary`, import included). Everything is deleted afterwards.

    python bench/bench_files.py --gib 1 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# Runs argv as a child and prints its wall seconds, exit code and peak RSS (KiB):
# getrusage(RUSAGE_CHILDREN) of a fresh process sees that one child only.
_MEASURE = """
import json, resource, subprocess, sys, time
started = time.perf_counter()
code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE).returncode
seconds = time.perf_counter() - started
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"seconds": seconds, "code": code, "peak_rss_kib": rss}))
"""

_ROUND_TRIP = """
import sys
from executorch.exir._serialize._program import deserialize_pte_binary, serialize_pte_binary
with open(sys.argv[1], "rb") as f:
    pte = deserialize_pte_binary(f.read())
data = serialize_pte_binary(pte, extract_delegate_segments=True)
with open(sys.argv[2], "wb") as f:
    data.write_to_file(f) if hasattr(data, "write_to_file") else f.write(bytes(data))
"""


def build_pte(path: str, nbytes: int) -> tuple[int, int]:
    """Writes a .pte: a live table of 15/16 of `nbytes`, a dead buffer; returns both sizes."""
    import torch
    from executorch.exir import to_edge

    dead = nbytes // 16 // 4 * 4
    live = (nbytes - dead) // 4 * 4

    class Dirty(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(16, 16)
            self.register_buffer("table", torch.ones(live // 4, dtype=torch.float32))
            self.register_buffer("unused", torch.zeros(dead // 4, dtype=torch.float32))

        def forward(self, x):
            return self.lin(x) + self.table[:16]

    exported = torch.export.export(Dirty(), (torch.randn(1, 16),))
    manager = to_edge(exported).to_executorch()
    with open(path, "wb") as f:
        manager.write_to_file(f)
    return live, dead


def measure(argv: list[str]) -> dict:
    """Wall seconds, exit code and peak RSS of one command, in a fresh process."""
    result = subprocess.run(
        [sys.executable, "-c", _MEASURE, *argv], capture_output=True, text=True, check=True
    )
    return json.loads(result.stdout)


def median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def summarize_runs(runs: list[dict]) -> dict:
    return {
        "seconds_median": round(median(runs, "seconds"), 3),
        "seconds_all": [round(r["seconds"], 3) for r in runs],
        "peak_rss_mib": round(max(r["peak_rss_kib"] for r in runs) / 1024, 1),
        "exit_codes": sorted({r["code"] for r in runs}),
    }


def work_directory(parser: argparse.ArgumentParser, directory: str | None, prefix: str) -> str:
    """A new directory to build in, inside `--dir` (default: the system's temporary one);
    a `--dir` that is not a directory is one line and exit 2, as the CLI's usage errors."""
    if directory is not None and not os.path.isdir(directory):
        parser.exit(
            2, f"{parser.prog}: --dir {directory}: not a directory (see {parser.prog} --help)\n"
        )
    return tempfile.mkdtemp(prefix=prefix, dir=directory)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0, help="size of the generated .pte")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to build (default: a /tmp dir)")
    parser.add_argument(
        "--no-round-trip",
        action="store_true",
        help="skip ExecuTorch's in-memory round trip (minutes, GiB of RAM)",
    )
    options = parser.parse_args()

    workdir = work_directory(parser, options.dir, "ef-bench-")
    try:
        pte = os.path.join(workdir, "model.pte")
        started = time.perf_counter()
        live, dead = build_pte(pte, int(options.gib * (1 << 30)))
        build_seconds = time.perf_counter() - started

        copy = os.path.join(workdir, "copy.pte")
        pruned = os.path.join(workdir, "pruned.pte")
        cli = [sys.executable, "-m", "emitter_filter"]
        measure(["cp", pte, copy])  # warm the page cache for every command alike
        results = {"cp": [], "audit": [], "prune": []}
        for _ in range(options.repeat):
            results["cp"].append(measure(["cp", pte, copy]))
            os.unlink(copy)
            results["audit"].append(measure([*cli, "audit", pte, "--json"]))
            results["prune"].append(measure([*cli, "prune", pte, "-o", pruned]))
            pruned_bytes = os.path.getsize(pruned)
            pruned_audit = json.loads(
                subprocess.run(
                    [*cli, "audit", pruned, "--json"], capture_output=True, check=True
                ).stdout
            )
            os.unlink(pruned)
        if not options.no_round_trip:
            round_trip_out = os.path.join(workdir, "round_trip.pte")
            results["round_trip"] = [
                measure([sys.executable, "-c", _ROUND_TRIP, pte, round_trip_out])
            ]
            os.unlink(round_trip_out)
        report = json.loads(
            subprocess.run([*cli, "audit", pte, "--json"], capture_output=True, check=True).stdout
        )
        cp_seconds = median(results["cp"], "seconds")
        summary = {
            "file_bytes": os.path.getsize(pte),
            "live_table_bytes": live,
            "dead_bytes": report["dead_bytes"],
            "pruned_bytes": pruned_bytes,
            "pruned_dead_bytes": pruned_audit["dead_bytes"],
            "build_seconds": round(build_seconds, 1),
            **{name: summarize_runs(runs) for name, runs in results.items()},
            "audit_over_cp": round(median(results["audit"], "seconds") / cp_seconds, 3),
            "prune_over_cp": round(median(results["prune"], "seconds") / cp_seconds, 3),
        }
        if "round_trip" in results:
            summary["prune_over_round_trip"] = round(
                median(results["prune"], "seconds") / median(results["round_trip"], "seconds"), 3
            )
        print(json.dumps(summary, indent=2))
    finally:
        shutil.rmtree(workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
