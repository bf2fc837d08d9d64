"""Measure one model in one mode in a fresh process: `python -m bench.worker`.

Peak memory is a property of a whole process, so every figure that involves it
comes from a process that did nothing but build one model and serialize it once.
The parent (`bench.bench_models`) starts one worker per model and mode, and
reads the JSON the worker writes to `--out`.

Exit codes: 0 measured; 2 usage error; 1 the export failed (traceback on stderr).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main", "run_worker"]

logger = logging.getLogger(__name__)

_REPO_ROOT = Path(__file__).resolve().parent.parent
PRUNE_ENV = "EMITTER_FILTER_PRUNE"


def run_worker(model: str, mode: str, out_dir: Path, *, timeout: float) -> dict:
    """Runs a worker subprocess and returns what it measured.

    Args:
        model: A zoo case name, or `bench.llama.NAME`.
        mode: `Mode.UPSTREAM` or `Mode.PRUNED`.
        out_dir: Where the worker's JSON, log and scratch files go.
        timeout: Seconds before the worker is killed.

    Raises:
        RuntimeError: The worker failed; the message names its log file.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    result_path = out_dir / f"{model}-{mode}.json"
    log_path = out_dir / f"{model}-{mode}.log"
    env = dict(os.environ)
    # The process-wide switch: only the llama worker relies on it, but setting it
    # explicitly in both modes keeps a caller's environment from leaking in.
    env[PRUNE_ENV] = "1" if mode == "pruned" else "0"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO_ROOT), env.get("PYTHONPATH")]))
    command = [
        sys.executable,
        "-m",
        "bench.worker",
        "--model",
        model,
        "--mode",
        mode,
        "--out",
        str(result_path),
        "--scratch",
        str(out_dir / f"{model}-{mode}"),
    ]
    logger.info("worker %s/%s: fresh process, log in %s", model, mode, log_path)
    started = time.perf_counter()
    with open(log_path, "w") as log:
        completed = subprocess.run(
            command,
            cwd=_REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
    if completed.returncode != 0:
        raise RuntimeError(
            f"worker {model}/{mode} exited with {completed.returncode}; see {log_path}"
        )
    result = json.loads(result_path.read_text())
    result["process_seconds"] = time.perf_counter() - started
    return result


def _measure_zoo(model: str, mode: str) -> dict:
    from bench.measure import MemoryProbe, measure_to_executorch, warm_up
    from bench.zoo import case_named

    case = case_named(model)
    warm_up(mode)
    started = time.perf_counter()
    edge = case.build()
    build_seconds = time.perf_counter() - started
    probe = MemoryProbe()
    _, measurement = measure_to_executorch(edge, mode, case.config, probe=probe)
    return {"build_seconds": build_seconds, "measurement": measurement.to_json()}


def _measure_llama(mode: str, scratch: Path) -> dict:
    # The env switch was read when emitter_filter was imported, and takes effect when
    # ExecuTorch's exporter is; make sure it did what this mode needs, or the
    # comparison would be meaningless.
    import executorch.exir  # noqa: F401

    import emitter_filter
    from bench import llama
    from bench.measure import MemoryProbe, describe, warm_up
    from emitter_filter.inprocess import hook

    if hook.is_enabled() != (mode == "pruned"):
        raise RuntimeError(
            f"{PRUNE_ENV}={os.environ.get(PRUNE_ENV)!r} left pruning "
            f"{'on' if hook.is_enabled() else 'off'} in mode {mode!r}"
        )
    del emitter_filter
    warm_up(mode)
    checkpoint, params = llama.write_checkpoint(scratch / "checkpoint")
    probe = MemoryProbe()
    started = time.perf_counter()
    with llama.observe_to_executorch(probe) as observed:
        llama.run_exporter(llama.exporter_argv(checkpoint, params, scratch / "out"))
    export_seconds = time.perf_counter() - started
    if len(observed.calls) != 1:
        raise RuntimeError(f"expected one to_executorch call, saw {len(observed.calls)}")
    seconds, manager, memory = observed.calls[0]
    measurement = describe(manager, mode, seconds, memory)
    return {"export_seconds": export_seconds, "measurement": measurement.to_json()}


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.worker",
        description="Build one benchmark model, serialize it once in one mode, and "
        "write what that cost (time, bytes, peak memory) as JSON. Started by the "
        "suite; run by hand to look at one model.",
    )
    parser.add_argument("--model", required=True, help="zoo case name, or llama_stories")
    parser.add_argument("--mode", required=True, choices=("upstream", "pruned"))
    parser.add_argument("--out", required=True, type=Path, help="JSON file to write")
    parser.add_argument("--scratch", required=True, type=Path, help="directory for temporary files")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Measures one model; returns the exit code."""
    try:
        options = _build_parser().parse_args(argv)
    except SystemExit as exit_:
        return 2 if exit_.code else 0
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from bench import llama

    options.scratch.mkdir(parents=True, exist_ok=True)
    if options.model == llama.NAME:
        result = _measure_llama(options.mode, options.scratch)
    else:
        result = _measure_zoo(options.model, options.mode)
    result.update(model=options.model, mode=options.mode, pid=os.getpid())
    options.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
