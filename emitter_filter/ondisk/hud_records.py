"""A file's parts as PyTorch's benchmark dashboard (HUD) reads them: "v3" records.

    [{"benchmark": {"name": "ExecuTorch", "mode": "inference", "dtype": "float32", ...},
      "model": {"name": "model", "type": "pte", "backend": "XnnpackBackend", ...},
      "metric": {"name": "constant_size(mb)", "benchmark_values": [1.0078],
                 "target_value": 0.0, "extra_info": {"bytes": "1056768", ...}},
      "runners": [...]}, ...]

One record per part of the file: the `.pte`, its program (header, flatbuffer,
padding), its constants, delegates and named data, each `.ptd`, the dead and
duplicated bytes, and each method's planned memory (`method_memory`). The layout
is test-infra's `benchmark.oss_ci_benchmark_v3` table (`schema.sql`): its
`benchmark_values` are Float32, exact for whole numbers only to 2**24, so values
are MiB (2**20 bytes) and the exact bytes ride along as a string in
`metric.extra_info` (a `Map(String, String)`). Metric names end in their unit, as
the dashboard's do (`model_load_time(ms)`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from emitter_filter.ondisk.method_memory import method_memory

if TYPE_CHECKING:
    from emitter_filter.ondisk.explain import Explanation

__all__ = ["BENCHMARK_NAME", "MIB", "hud_records", "model_name", "backend_of"]

#: `benchmark.name`: the dashboard lists ExecuTorch's records under this name.
BENCHMARK_NAME = "ExecuTorch"
#: The bytes in one unit of a `(mb)` metric.
MIB = 1 << 20

# Which storages make each part of the `.pte`; the rest of it is the program's.
_PARTS = {
    "constant_size(mb)": ("constant", "mutable"),
    "delegate_size(mb)": ("delegate", "delegate_inline"),
    "named_data_size(mb)": ("named_data",),
}
_STATUSES = {"dead_size(mb)": "dead", "duplicated_size(mb)": "duplicated"}


def model_name(explanation: Explanation) -> str:
    """The model's name as the file gives it: the `.pte`'s name without its extension."""
    return os.path.splitext(os.path.basename(explanation.path))[0]


def backend_of(explanation: Explanation) -> str:
    """The backends its delegates name ("+" between several), or "portable" without any."""
    backends = dict.fromkeys(
        name
        for part in explanation.parts
        if part.storage in ("delegate", "delegate_inline")
        for name in part.names
    )
    return "+".join(sorted(backends)) or "portable"


def _dtype_of(explanation: Explanation) -> str:
    """The dtype holding most constant bytes, as `benchmark.dtype`; "" without constants."""
    sums: dict[str, int] = {}
    for part in explanation.parts:
        if part.dtype and part.storage in ("constant", "external", "named_data"):
            sums[part.dtype] = sums.get(part.dtype, 0) + part.nbytes
    return min(sums, key=lambda d: (-sums[d], d)) if sums else ""


def _metric(name: str, nbytes: int, **extra: str) -> dict:
    return {
        "name": name,
        "benchmark_values": [round(nbytes / MIB, 6)],
        "target_value": 0.0,
        "extra_info": {"bytes": str(nbytes), "unit": "MiB (2**20 bytes)", **extra},
    }


def _metrics(explanation: Explanation) -> list[dict]:
    pte, pte_bytes = explanation.files[0]
    in_pte = [p for p in explanation.parts if p.file == pte]
    metrics = [_metric("pte_size(mb)", pte_bytes, file=os.path.basename(pte))]
    taken = 0
    for name, storages in _PARTS.items():
        nbytes = sum(p.nbytes for p in in_pte if p.storage in storages)
        taken += nbytes
        metrics.append(_metric(name, nbytes, storages=",".join(storages)))
    metrics.append(_metric("program_size(mb)", pte_bytes - taken, storages="the rest of the .pte"))
    for path, nbytes in explanation.files[1:]:
        metrics.append(_metric("ptd_size(mb)", nbytes, file=os.path.basename(path)))
    for name, status in _STATUSES.items():
        nbytes = sum(p.nbytes for p in explanation.parts if p.status == status)
        metrics.append(_metric(name, nbytes, status=status))
    for memory in method_memory(explanation):
        metrics.append(
            _metric(
                "planned_memory(mb)",
                memory.planned.planned_bytes,
                method=memory.method,
                memory_ids=",".join(
                    f"{i}:{size}" for i, size in memory.planned.by_memory_id.items()
                ),
                **(
                    {"load_multipliers": "; ".join(memory.multipliers)}
                    if memory.multipliers
                    else {}
                ),
            )
        )
    return metrics


def _runner() -> dict:
    """The sizes are read from the file, on no device: a runner that says so."""
    return {
        "name": "emitter-filter",
        "type": "file analysis",
        "cpu_info": "",
        "cpu_count": 0,
        "mem_info": "",
        "avail_mem_in_gb": 0,
        "gpu_info": "",
        "gpu_count": 0,
        "gpu_mem_info": "",
        "avail_gpu_mem_in_gb": 0,
        "extra_info": {},
    }


def hud_records(explanations: Sequence[Explanation], name: str | None = None) -> list[dict]:
    """The v3 records of each explained program (a set's: each of its programs).

    Args:
        explanations: What `explain_file` (or `explain_set`) returned. Not modified.
        name: `model.name` for every record (`--model-name`); default each `.pte`'s
            `model_name`.
    """
    records = []
    programs = [p for e in explanations for p in (e.programs or (e,))]
    for explanation in programs:
        benchmark = {
            "name": BENCHMARK_NAME,
            "mode": "inference",
            "dtype": _dtype_of(explanation),
            "extra_info": {"source": "emitter-filter explain"},
        }
        model = {
            "name": name or model_name(explanation),
            "type": "pte",
            "backend": backend_of(explanation),
            "origins": [],
            "extra_info": {"file": os.path.basename(explanation.path)},
        }
        records += [
            {"benchmark": benchmark, "model": model, "metric": metric, "runners": [_runner()]}
            for metric in _metrics(explanation)
        ]
    return records
