"""Time `emitter-filter share` on a generated set of programs that share most of their bytes.

Run as a script (not collected by pytest): builds, through upstream ExecuTorch,
three programs of `--mib` MiB each whose constant segments hold one table they
all have (3/4 of the size, the same bytes) and one table of their own, into a
temporary directory (default under /tmp). Then measures, each in its own
subprocess, start-up included (wall seconds and peak RSS, `bench_files.measure`):
`cp` of the three inputs (the baseline, same run) and `share` of them. Checks
that every program still reads its tables (the set's audit: nothing dead,
nothing stored twice). Everything is deleted afterwards.

    python bench/bench_share.py               # 3 x 32 MiB sharing 24 MiB
    python bench/bench_share.py --mib 256     # 3 x 256 MiB sharing 192 MiB (the issue's)
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

_PROGRAMS = 3


def build_set(directory: str, nbytes: int) -> list[str]:
    """Writes the programs: a table common to all (3/4 of `nbytes`), one of their own each."""
    import torch
    from executorch.exir import to_edge

    shared_elements = nbytes * 3 // 4 // 4
    own_elements = nbytes // 4 // 4
    common = torch.arange(shared_elements, dtype=torch.float32)
    paths = []
    for number in range(_PROGRAMS):

        class Program(torch.nn.Module):
            def __init__(self, number: int) -> None:
                super().__init__()
                self.register_buffer("common", common.clone())
                self.register_buffer("own", torch.full((own_elements,), float(number + 1)))

            def forward(self, x):
                return x + self.common[:16] + self.own[:16]

        exported = torch.export.export(Program(number), (torch.randn(16),))
        path = os.path.join(directory, f"program{number}.pte")
        with open(path, "wb") as f:
            to_edge(exported).to_executorch().write_to_file(f)
        paths.append(path)
    return paths


def _sizes(paths) -> int:
    return sum(os.path.getsize(p) for p in paths)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=float, default=32.0, help="size of each program")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to build (default: a /tmp dir)")
    options = parser.parse_args()

    workdir = work_directory(parser, options.dir, "ef-bench-share-")
    try:
        inputs = os.path.join(workdir, "in")
        os.mkdir(inputs)
        started = time.perf_counter()
        ptes = build_set(inputs, int(options.mib * (1 << 20)))
        build_seconds = time.perf_counter() - started
        copied, out = os.path.join(workdir, "copy"), os.path.join(workdir, "out")
        cli = [sys.executable, "-m", "emitter_filter"]
        os.mkdir(copied)
        measure(["cp", *ptes, copied])  # warm the page cache for every command alike
        results = {"cp": [], "share": []}
        for _ in range(options.repeat):
            results["cp"].append(measure(["cp", *ptes, copied]))
            results["share"].append(measure([*cli, "share", *ptes, "--out", out]))
            outputs = sorted(os.path.join(out, name) for name in os.listdir(out))
            bytes_after = _sizes(outputs)
            shutil.rmtree(out)
        share_report = json.loads(
            subprocess.run(
                [*cli, "share", *ptes, "--out", out, "--json"], capture_output=True, check=True
            ).stdout
        )
        ptd = os.path.join(out, "shared.ptd")
        audit = json.loads(
            subprocess.run(
                [
                    *cli,
                    "audit",
                    *(os.path.join(out, os.path.basename(p)) for p in ptes),
                    "--ptd",
                    ptd,
                    "--json",
                ],
                capture_output=True,
                check=True,
            ).stdout
        )
        summary = {
            "programs": len(ptes),
            "program_bytes": [os.path.getsize(p) for p in ptes],
            "bytes_before": _sizes(ptes),
            "bytes_after": bytes_after,
            "saved_fraction": round(1 - bytes_after / _sizes(ptes), 3),
            "shared_bytes": share_report["shared_bytes"],
            "set_dead_bytes": audit["dead_bytes"],
            "set_duplicated_bytes": audit["duplicated_bytes"],
            "build_seconds": round(build_seconds, 1),
            **{name: summarize_runs(runs) for name, runs in results.items()},
            "share_over_cp": round(
                median(results["share"], "seconds") / median(results["cp"], "seconds"), 3
            ),
        }
        print(json.dumps(summary, indent=2))
    finally:
        shutil.rmtree(workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
