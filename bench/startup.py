"""What the start-up hook costs every Python process: `python -c pass` with and without it.

Run as a script (not collected by pytest). Builds a wheel of this tree, makes two
fresh virtual environments without pip in a temporary directory, both seeing the
running interpreter's torch and ExecuTorch through a .pth (as an environment that
has them installed would): one bare, one with the wheel installed, so with
`emitter_filter_startup.pth` in its site-packages. Then it times `python -c pass`
in each, alternating, `--repeat` times, and in the second once more with
`EMITTER_FILTER_PRUNE=1` (what a process pays when it asks for pruning: importing
emitter_filter, not ExecuTorch). It reports medians and their ratio to the bare
environment, and the time of the .pth line alone with the variable unset (what
`site` runs; too small for `python -c pass` to show). Everything is deleted
afterwards.

    python bench/startup.py --repeat 40

`tests/wheel_env.py` builds the wheel and environments, as for `tests/inprocess/test_startup.py`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["main"]

# Run as a script: the repository root holds the `tests` package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.wheel_env import (  # noqa: E402
    REPO,
    build_wheel,
    dependency_site_packages,
    install_wheel,
    make_venv,
)

# Times, in a clean child, what site does with the .pth's code line: exec it as text.
_TIME_PTH_LINE = """
import sys, timeit
line = next(l for l in open(sys.argv[1]).read().splitlines() if l.startswith("import"))
print(min(timeit.repeat(lambda: exec(line), number=10000, repeat=5)) / 10000)
"""


def _time_once(python: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run([str(python), "-c", "pass"], check=True, env=env)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30, help="runs of each configuration")
    parser.add_argument("--dir", default=None, help="where to build (default: a temporary dir)")
    options = parser.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="ef-startup-", dir=options.dir))
    try:
        wheel = build_wheel(workdir / "wheel")
        dependencies = dependency_site_packages()
        bare = make_venv(workdir / "bare", dependencies)
        installed = make_venv(workdir / "installed", dependencies)
        install_wheel(installed, wheel)
        env = {
            k: v for k, v in os.environ.items() if k not in ("EMITTER_FILTER_PRUNE", "PYTHONPATH")
        }
        configurations = {
            "without emitter_filter": (bare, env),
            "with emitter_filter (variable unset)": (installed, env),
            "with emitter_filter, EMITTER_FILTER_PRUNE=1": (
                installed,
                {**env, "EMITTER_FILTER_PRUNE": "1"},
            ),
        }
        times: dict[str, list[float]] = {name: [] for name in configurations}
        for python, run_env in configurations.values():
            _time_once(python, run_env)  # warm the page cache for every configuration alike
        for repetition in range(options.repeat):
            # Rotate the order, so that no configuration always runs first.
            names = list(configurations)
            for name in names[repetition % 3 :] + names[: repetition % 3]:
                times[name].append(_time_once(*configurations[name]))
        pth_line_seconds = float(
            subprocess.run(
                [str(bare), "-c", _TIME_PTH_LINE, str(REPO / "emitter_filter_startup.pth")],
                check=True,
                capture_output=True,
                text=True,
                env=env,
            ).stdout
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    baseline = statistics.median(times["without emitter_filter"])
    print(
        f"`python -c pass`, {options.repeat} runs each, alternating; python {sys.version.split()[0]}"
    )
    print(f"{'configuration':<46}{'median':>10}{'min':>10}{'ratio':>8}{'+ms':>8}")
    for name, values in times.items():
        median = statistics.median(values)
        print(
            f"{name:<46}{median * 1e3:>8.1f}ms{min(values) * 1e3:>8.1f}ms"
            f"{median / baseline:>7.2f}x{(median - baseline) * 1e3:>+8.1f}"
        )
    print(f"the .pth line alone, variable unset: {pth_line_seconds * 1e6:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
