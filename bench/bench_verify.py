"""What `emitter-filter verify` costs on a large program, against the least any
verification costs: loading and running both files once.

Run as a script (not collected by pytest). Builds a program of `--mib` MiB: a Linear
whose weight is three quarters of it and a buffer nothing reads (the rest: dead bytes,
as a prune's input has), and its prune. Then, each in a fresh process, one after the
other, `--repeat` times:

- `verify`: `emitter-filter verify OLD NEW` (the CLI as a user runs it: the file read
  first, the runtime in its child process, each program loaded once);
- `verify_in_process`: the same verification with the runtime in the verifying process
  (`verify_programs(..., isolated=False)`): what the child process costs;
- `load_run_both`: a process that imports ExecuTorch's pybindings, loads OLD, runs
  `forward`, releases it, then does the same with NEW: what any verification must do;
- `import_only`: a process that imports the pybindings and loads nothing: what the
  runtime needs before any program.

Wall time and peak RSS (the process tree's largest, from `wait4`) of each, medians;
the ratios are of figures of the same run. verify's peak RSS is compared with the
larger file plus `import_only`'s.

    python bench/bench_verify.py --out bench-out                # 256 MiB, 3 runs each
    python bench/bench_verify.py --out bench-out --mib 1024     # the issue's 1 GiB
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_LOAD_RUN_BOTH = """
import sys
import executorch.extension.pybindings.portable_lib as lib
import torch
for path in sys.argv[1:]:
    module = lib._load_for_executorch(path)
    module.run_method("forward", (torch.randn(1, {width}),))
    del module
"""

_IN_PROCESS = """
import sys
from emitter_filter.verify.compare import Program, verify_programs
report = verify_programs(Program(sys.argv[1]), Program(sys.argv[2]), isolated=False)
sys.exit(0 if report.ok else 1)
"""

_IMPORT_ONLY = """
import executorch.extension.pybindings.portable_lib as lib
import torch
"""


def build(directory: Path, mib: int) -> tuple[Path, Path, int]:
    """OLD (a Linear of 3/4 of `mib` MiB and an unused buffer of 1/4), its prune, and
    the Linear's width."""
    import torch
    from executorch.exir import to_edge

    width = int(((mib * 3 // 4) << 20) ** 0.5 / 2)  # float32: 4 B a weight
    dead = (mib << 20) // 4 // 4

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(width, width, bias=False)
            self.register_buffer("unused", torch.zeros(dead))

        def forward(self, x):
            return self.lin(x)

    torch.manual_seed(0)
    with torch.no_grad():
        exported = torch.export.export(Model().eval(), (torch.randn(1, width),))
    old = directory / "old.pte"
    old.write_bytes(to_edge(exported).to_executorch().buffer)
    new = directory / "new.pte"
    subprocess.run(
        [sys.executable, "-m", "emitter_filter", "prune", str(old), "-o", str(new)],
        check=True,
        env=_env(),
        stdout=subprocess.DEVNULL,
    )
    return old, new, width


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def measure(argv: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes: the largest process of its tree) of `argv`."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv[:4]} failed: {process.stderr.read().decode()[-2000:]}")
    return seconds, usage.ru_maxrss * 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    directory = options.out / "verify"
    directory.mkdir(parents=True, exist_ok=True)
    if options.build_only:
        print(build(directory, options.mib)[2])
        return 0
    # Built in a process of its own: a process forked from one that held the model
    # would count that RSS as its own peak (the kernel keeps it across exec).
    width = int(
        subprocess.run(
            [sys.executable, __file__, "--build-only", "--out", str(options.out)]
            + ["--mib", str(options.mib)],
            check=True,
            env=_env(),
            capture_output=True,
            text=True,
        ).stdout.split()[-1]
    )
    old, new = directory / "old.pte", directory / "new.pte"
    runs = {
        "verify": [sys.executable, "-m", "emitter_filter", "verify", str(old), str(new)],
        "verify_in_process": [sys.executable, "-c", _IN_PROCESS, str(old), str(new)],
        "load_run_both": [
            sys.executable,
            "-c",
            _LOAD_RUN_BOTH.format(width=width),
            str(old),
            str(new),
        ],
        "import_only": [sys.executable, "-c", _IMPORT_ONLY],
    }
    figures: dict[str, dict] = {}
    samples: dict[str, list] = {name: [] for name in runs}
    for _ in range(options.repeat):
        for name, argv in runs.items():  # interleaved: the same load for each
            samples[name].append(measure(argv))
    for name, taken in samples.items():
        figures[name] = {
            "seconds": statistics.median(s for s, _ in taken),
            "peak_rss_bytes": statistics.median(r for _, r in taken),
        }
    larger = max(old.stat().st_size, new.stat().st_size)
    verify, both, bare = figures["verify"], figures["load_run_both"], figures["import_only"]
    here = figures["verify_in_process"]
    report = {
        "mib": options.mib,
        "old_bytes": old.stat().st_size,
        "new_bytes": new.stat().st_size,
        "repeat": options.repeat,
        "figures": figures,
        "verify_over_load_run_both_seconds": verify["seconds"] / both["seconds"],
        "verify_over_load_run_both_peak_rss": verify["peak_rss_bytes"] / both["peak_rss_bytes"],
        "child_over_in_process_seconds": verify["seconds"] / here["seconds"],
        "child_minus_in_process_seconds": verify["seconds"] - here["seconds"],
        "verify_peak_rss_over_larger_file_plus_import": verify["peak_rss_bytes"]
        / (larger + bare["peak_rss_bytes"]),
    }
    (options.out / "verify.json").write_text(json.dumps(report, indent=2) + "\n")
    for name, figure in figures.items():
        print(f"{name:18} {figure['seconds']:7.2f} s  {figure['peak_rss_bytes'] / 2**20:8.1f} MiB")
    print(
        f"verify / load+run both: time {report['verify_over_load_run_both_seconds']:.2f}, "
        f"peak RSS {report['verify_over_load_run_both_peak_rss']:.2f}; verify peak RSS / "
        f"(larger file + import): {report['verify_peak_rss_over_larger_file_plus_import']:.2f}; "
        f"child / in process: time {report['child_over_in_process_seconds']:.2f} "
        f"({report['child_minus_in_process_seconds']:+.2f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
