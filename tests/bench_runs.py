"""Fabricated `results.json` runs, in the schema `python -m bench` writes (pytest-benchmark 5).

The keys are those of a real `python -m bench --quick` run: pytest-benchmark's
`machine_info`, `commit_info`, `datetime`, `version` and per-benchmark `stats`,
the suite's `bench` block, and `bench_models`' `extra_info` per mode. Times are
per round, three rounds at 1.0, 1.1 and 0.9 times `seconds`, so each median is
`seconds` itself.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

_ROUND_FACTORS = (1.0, 1.1, 0.9)


def _stats(seconds: list[float]) -> dict:
    return {
        "min": min(seconds),
        "max": max(seconds),
        "mean": statistics.mean(seconds),
        "median": statistics.median(seconds),
        "rounds": len(seconds),
        "iterations": 1,
        "data": seconds,
    }


def benchmark(
    model: str,
    mode: str,
    *,
    total: int,
    seconds: float,
    filter_seconds: float | None = None,
    dedupe_seconds: float | None = None,
    dropped: int = 1000,
) -> dict:
    """One benchmark of `model` in `mode` ("upstream", "pruned" or "deduped")."""
    rounds = [seconds * f for f in _ROUND_FACTORS]
    info = {
        "model": model,
        "mode": mode,
        "description": f"{model} fabricated",
        "nominal_constant_bytes": total,
        "timed": "to_executorch",
        "to_executorch_seconds": rounds,
        "pte_bytes": total,
        "ptd_bytes": 0,
        "total_bytes": total,
    }
    if mode == "upstream" or mode == "pruned":
        info["memory"] = {
            "rss_before_bytes": 400 << 20,
            "region_peak_rss_bytes": (400 << 20) + total,
            "region_extra_rss_bytes": total,
            "process_peak_rss_bytes": (500 << 20) + total,
            "source": "VmHWM, reset by clear_refs at the start of to_executorch",
        }
    if mode in ("pruned", "deduped"):
        info.update(filter_seconds=[filter_seconds] * len(rounds), dropped_bytes=dropped)
    if mode == "pruned":
        info.update(
            filter_share=[filter_seconds / s for s in rounds],
            dropped_constants=1,
            dropped_values=1,
            constant_bytes_before={"constant": total, "mutable": 0, "external": 0},
            constant_bytes_after={"constant": total - dropped, "mutable": 0, "external": 0},
        )
    if mode == "deduped":
        info.update(
            dedupe_seconds=[dedupe_seconds] * len(rounds),
            dedupe_share=[dedupe_seconds / s for s in rounds],
            dedupe_saved_bytes=total,
            worker=None,
        )
    test = "test_dedupe" if mode == "deduped" else "test_to_executorch"
    return {
        "group": model,
        "name": f"{test}[{model}-{mode}]",
        "fullname": f"bench/bench_models.py::{test}[{model}-{mode}]",
        "params": {"mode": mode},
        "param": f"{model}-{mode}",
        "extra_info": info,
        "options": {
            "disable_gc": False,
            "timer": "perf_counter",
            "min_rounds": 5,
            "max_time": 1.0,
            "min_time": 5e-06,
            "warmup": False,
        },
        "stats": _stats(rounds),
    }


def results(
    benchmarks: list[dict],
    *,
    commit: str = "0" * 40,
    commit_time: str = "2026-11-30T00:00:00+00:00",
    run_time: str = "2026-11-30T00:00:00+00:00",
    cpu: str = "Fabricated CPU",
    node: str = "smoke",
) -> dict:
    """A whole run of `benchmarks` at `commit`, on a machine named by its `cpu`."""
    return {
        "machine_info": {
            "node": node,
            "processor": "",
            "machine": "x86_64",
            "python_compiler": "GCC 12.2.0",
            "python_implementation": "CPython",
            "python_version": "3.11.7",
            "release": "6.1",
            "system": "Linux",
            "cpu": {"arch": "X86_64", "bits": 64, "count": 2, "brand_raw": cpu},
        },
        "commit_info": {
            "id": commit,
            "time": commit_time,
            "author_time": commit_time,
            "dirty": False,
            "project": commit[:7],
            "branch": "main",
        },
        "benchmarks": benchmarks,
        "datetime": run_time,
        "version": "5.3.1",
        "bench": {"schema": 1, "command": "fabricated", "python": "3.11.7", "markexpr": "not slow"},
    }


def write(path: Path, run: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run))
    return path


#: The models of `python -m bench --quick -k "tied_embedding or unused_buffer"`, with the
#: bytes and seconds of a real run (86e29cc): name -> (upstream bytes, pruned bytes,
#: deduplicated bytes or None, seconds upstream / pruned / deduplicated, filter, dedupe).
QUICK_MODELS = {
    "unused_buffer": (346_112, 18_304, None, (0.0153, 0.0160, None), 0.0002, None),
    "tied_embedding_32000x288": (
        73_730_176,
        73_730_176,
        36_866_112,
        (0.0743, 0.1486, 0.2698),
        0.0003,
        0.1099,
    ),
}


def quick_run(
    *, grow: float = 1.0, commit: str, commit_time: str, cpu: str = "Fabricated CPU"
) -> dict:
    """A run of `QUICK_MODELS`, the tied model's bytes multiplied by `grow`."""
    benchmarks = []
    for model, (up, pruned, deduped, seconds, filter_s, dedupe_s) in QUICK_MODELS.items():
        factor = grow if deduped is not None else 1.0
        benchmarks.append(benchmark(model, "upstream", total=int(up * factor), seconds=seconds[0]))
        benchmarks.append(
            benchmark(
                model,
                "pruned",
                total=int(pruned * factor),
                seconds=seconds[1],
                filter_seconds=filter_s,
                dropped=up - pruned,
            )
        )
        if deduped is not None:
            benchmarks.append(
                benchmark(
                    model,
                    "deduped",
                    total=int(deduped * factor),
                    seconds=seconds[2],
                    filter_seconds=filter_s,
                    dedupe_seconds=dedupe_s,
                    dropped=0,
                )
            )
    return results(
        benchmarks,
        commit=commit,
        commit_time=commit_time,
        run_time=commit_time.replace("T00", "T12"),
        cpu=cpu,
    )


def three_commits(directory: Path) -> list[Path]:
    """Three runs at three commits, a day apart; the tied model's bytes grow 2% in the third."""
    return [
        write(
            directory / f"run{day}" / "results.json",
            quick_run(
                grow=grow, commit=f"{day}" * 40, commit_time=f"2026-11-2{day}T00:00:00+00:00"
            ),
        )
        for day, grow in ((1, 1.0), (2, 1.0), (3, 1.02))
    ]
