"""Read a `results.json` and reduce each model's two benchmarks to one row of ratios.

`results.json` is pytest-benchmark's JSON; each benchmark's `extra_info` is what
`bench.bench_models` recorded (see its docstring). A model has one benchmark per
mode, and every ratio here divides figures from the same run: pruned bytes by
upstream bytes, the filter's seconds by the `to_executorch` seconds of the same
call, peak memory pruned by peak memory upstream.

This module imports neither torch nor ExecuTorch, so the dashboard and
`--compare` run in a second.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ResultsError",
    "ModelSummary",
    "DedupeSummary",
    "CostliestCall",
    "load_results",
    "summarize",
    "summarize_dedupe",
    "costliest_call",
]


class ResultsError(ValueError):
    """A results file is missing, unreadable, or lacks a figure a summary needs."""


@dataclass(frozen=True)
class ModelSummary:
    """One model's figures, upstream against pruned.

    Byte figures are `.pte` plus every `.ptd`. Seconds are medians over rounds.
    Memory figures are None when the run skipped the fresh-process workers.
    """

    model: str
    description: str
    timed: str
    constant_bytes: int
    bytes_before: int
    bytes_after: int
    dead_bytes: int
    upstream_seconds: float
    pruned_seconds: float
    filter_seconds: float
    filter_share: float
    rounds: int
    peak_rss_upstream: int | None
    peak_rss_pruned: int | None
    emit_rss_upstream: int | None
    emit_rss_pruned: int | None

    @property
    def saved_bytes(self) -> int:
        return self.bytes_before - self.bytes_after

    @property
    def saved_share(self) -> float:
        return self.saved_bytes / self.bytes_before if self.bytes_before else 0.0

    @property
    def time_ratio(self) -> float:
        """Pruned `to_executorch` time over upstream; above 1 means pruning costs time."""
        return self.pruned_seconds / self.upstream_seconds if self.upstream_seconds else 0.0


def load_results(path: Path) -> dict:
    """Reads a pytest-benchmark JSON file; `ResultsError` names the file on failure."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ResultsError(f"{path}: cannot read benchmark results: {error}") from error
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise ResultsError(f"{path}: not a pytest-benchmark JSON file (no 'benchmarks' list)")
    return data


def load_suite_report(path: Path) -> dict:
    """Reads a pytest plugin report (`--emitter-filter-report`); `ResultsError` names the file."""
    from emitter_filter.pytest_plugin import REPORT_SCHEMA

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ResultsError(f"{path}: cannot read the plugin report: {error}") from error
    if not isinstance(data, dict) or data.get("schema") != REPORT_SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise ResultsError(f"{path}: not a {REPORT_SCHEMA} report (schema {found!r})")
    return data


def _required(info: Mapping, key: str, where: str):
    try:
        return info[key]
    except KeyError:
        raise ResultsError(f"{where}: extra_info has no {key!r}") from None


def _median(values: Sequence[float], where: str) -> float:
    if not values:
        raise ResultsError(f"{where}: no rounds recorded")
    return statistics.median(values)


def _memory(info: Mapping, key: str) -> int | None:
    memory = info.get("memory") or {}
    value = memory.get(key)
    return int(value) if isinstance(value, (int, float)) else None


@dataclass(frozen=True)
class DedupeSummary:
    """One `dedupe` model's bytes plain, pruned and pruned + deduplicated, and the dedupe's cost.

    Seconds are medians over rounds: `upstream_seconds` and `deduped_seconds` are
    whole `to_executorch` calls (ExecuTorch as shipped, and pruned + deduplicated),
    `dedupe_seconds` the deduplication inside the latter.
    """

    model: str
    bytes_plain: int
    bytes_pruned: int
    bytes_deduped: int
    upstream_seconds: float
    deduped_seconds: float
    dedupe_seconds: float
    dedupe_share: float

    @property
    def deduped_share(self) -> float:
        """Deduplicated bytes over plain bytes."""
        return self.bytes_deduped / self.bytes_plain if self.bytes_plain else 0.0

    @property
    def time_ratio(self) -> float:
        """Deduplicated `to_executorch` time over upstream; above 1 means it costs time."""
        return self.deduped_seconds / self.upstream_seconds if self.upstream_seconds else 0.0


def summarize_dedupe(results: Mapping) -> list[DedupeSummary]:
    """One `DedupeSummary` per model with a ``deduped`` benchmark, in results order.

    Raises:
        ResultsError: Such a model lacks its upstream or pruned benchmark, or a figure.
    """
    by_model: dict[str, dict[str, Mapping]] = {}
    for benchmark in results["benchmarks"]:
        info = benchmark.get("extra_info") or {}
        by_model.setdefault(info.get("model"), {})[info.get("mode")] = info
    summaries = []
    for model, modes in by_model.items():
        if "deduped" not in modes:
            continue
        where = f"model {model!r}"
        missing = {"upstream", "pruned"} - modes.keys()
        if missing:
            raise ResultsError(f"{where}: no {' or '.join(sorted(missing))} benchmark")
        deduped = modes["deduped"]
        summaries.append(
            DedupeSummary(
                model=model,
                bytes_plain=_required(modes["upstream"], "total_bytes", where),
                bytes_pruned=_required(modes["pruned"], "total_bytes", where),
                bytes_deduped=_required(deduped, "total_bytes", where),
                upstream_seconds=_median(
                    _required(modes["upstream"], "to_executorch_seconds", where), where
                ),
                deduped_seconds=_median(_required(deduped, "to_executorch_seconds", where), where),
                dedupe_seconds=_median(_required(deduped, "dedupe_seconds", where), where),
                dedupe_share=_median(_required(deduped, "dedupe_share", where), where),
            )
        )
    return summaries


def summarize(results: Mapping) -> list[ModelSummary]:
    """One `ModelSummary` per model that has both an upstream and a pruned benchmark.

    Args:
        results: A loaded `results.json`. Not modified.

    Returns:
        The summaries, smallest model (by constant bytes) first.

    Raises:
        ResultsError: A benchmark lacks a figure, or a model lacks one of its modes.
    """
    by_model: dict[str, dict[str, Mapping]] = {}
    for index, benchmark in enumerate(results["benchmarks"]):
        info = benchmark.get("extra_info") or {}
        where = f"benchmark {index} ({benchmark.get('name', '?')})"
        model = _required(info, "model", where)
        mode = _required(info, "mode", where)
        by_model.setdefault(model, {})[mode] = info

    summaries = []
    for model, modes in by_model.items():
        missing = {"upstream", "pruned"} - modes.keys()
        if missing:
            raise ResultsError(f"model {model!r}: no {' or '.join(sorted(missing))} benchmark")
        upstream, pruned = modes["upstream"], modes["pruned"]
        where = f"model {model!r}"
        before = _required(pruned, "constant_bytes_before", where)
        summaries.append(
            ModelSummary(
                model=model,
                description=pruned.get("description", ""),
                timed=pruned.get("timed", "to_executorch"),
                constant_bytes=sum(before.values()),
                bytes_before=_required(upstream, "total_bytes", where),
                bytes_after=_required(pruned, "total_bytes", where),
                dead_bytes=_required(pruned, "dropped_bytes", where),
                upstream_seconds=_median(
                    _required(upstream, "to_executorch_seconds", where), where
                ),
                pruned_seconds=_median(_required(pruned, "to_executorch_seconds", where), where),
                filter_seconds=_median(_required(pruned, "filter_seconds", where), where),
                filter_share=_median(_required(pruned, "filter_share", where), where),
                rounds=len(pruned["to_executorch_seconds"]),
                peak_rss_upstream=_memory(upstream, "process_peak_rss_bytes"),
                peak_rss_pruned=_memory(pruned, "process_peak_rss_bytes"),
                emit_rss_upstream=_memory(upstream, "region_extra_rss_bytes"),
                emit_rss_pruned=_memory(pruned, "region_extra_rss_bytes"),
            )
        )
    summaries.sort(key=lambda s: (s.constant_bytes, s.model))
    return summaries


@dataclass(frozen=True)
class CostliestCall:
    """The `to_executorch` call of a run that is slowest against its upstream call."""

    model: str
    mode: str
    ratio: float

    def describe(self) -> str:
        return (
            f"costliest call: {self.model} {self.mode}, to_executorch {self.ratio:.2f}x "
            "upstream's (medians, same run)"
        )


def costliest_call(
    summaries: Sequence[ModelSummary], dedupe: Sequence[DedupeSummary]
) -> CostliestCall | None:
    """The highest pruned/upstream or deduplicated/upstream time ratio; None for an empty run.

    It is the cost a user pays in the call, whatever part of it the filter's own
    timer covers: the filter's share alone can be small where the call is not.
    """
    calls = [CostliestCall(s.model, "pruned", s.time_ratio) for s in summaries]
    calls += [CostliestCall(d.model, "pruned + deduplicated", d.time_ratio) for d in dedupe]
    return max(calls, key=lambda call: call.ratio, default=None)
