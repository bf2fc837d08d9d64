"""What one `to_executorch` costs and writes: wall time, filter time, output bytes, memory.

Bytes are counted by streaming the program through ExecuTorch's own
`write_to_file` into a counter, so the figure is exactly what `save` would write
and no contiguous copy of a large program is made (`manager.buffer` would make one).

Memory figures come from `/proc/self/status`: `VmHWM` (peak resident set) can be
reset by writing 5 to `/proc/self/clear_refs` (Linux >= 4.0), which isolates the
peak of `to_executorch` from the peak of building the model; the peak before the
reset is kept, so the process peak is still known. `ru_maxrss` is not used when
`VmHWM` is there: in a child it starts at the parent's peak at fork (measured:
811 MiB in a child of an 800 MiB parent whose own `VmHWM` was 10 MiB), which
would charge the benchmark runner's memory to every worker.
"""

from __future__ import annotations

import gc
import io
import logging
import os
import re
import resource
import tempfile
import time
from dataclasses import asdict, dataclass, field

__all__ = [
    "Mode",
    "Measurement",
    "MemoryProbe",
    "count_output_bytes",
    "backend_config",
    "ensure_mode",
    "warm_up",
    "measure_to_executorch",
    "describe",
]

logger = logging.getLogger(__name__)


class Mode:
    """The two ways a model is serialized in the same run."""

    #: ExecuTorch as shipped; the emitter_filter hook is not installed.
    UPSTREAM = "upstream"
    #: `emitter_filter.ExecutorchBackendConfig(prune_constants=True)`.
    PRUNED = "pruned"

    ALL = (UPSTREAM, PRUNED)


@dataclass
class Measurement:
    """One `to_executorch` call and what it wrote.

    Byte figures are per output: `pte_bytes` is the `.pte`, `ptd_bytes` the sum of
    every `.ptd`. The `filter_*`/`*_before`/`*_after` fields come from
    `emitter_filter.report` and are None in upstream mode.
    """

    mode: str
    to_executorch_seconds: float
    pte_bytes: int
    ptd_bytes: int
    filter_seconds: float | None = None
    dropped_bytes: int | None = None
    dropped_constants: int | None = None
    dropped_values: int | None = None
    constant_bytes_before: dict[str, int] | None = None
    constant_bytes_after: dict[str, int] | None = None
    memory: dict[str, int | str] = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


class _ByteCounter(io.RawIOBase):
    """A write-only sink that only counts, for `write_to_file`."""

    def __init__(self) -> None:
        self.count = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        n = memoryview(data).nbytes
        self.count += n
        return n


def count_output_bytes(manager) -> tuple[int, int]:
    """Returns (`.pte` bytes, total `.ptd` bytes) an `ExecutorchProgramManager` writes.

    `manager` is not modified. `.ptd` files are written to a temporary directory,
    since ExecuTorch only exposes them through `write_tensor_data_to_file`.
    """
    counter = _ByteCounter()
    manager.write_to_file(counter)
    ptd_bytes = 0
    with tempfile.TemporaryDirectory(prefix="bench-ptd-") as outdir:
        manager.write_tensor_data_to_file(outdir)
        for entry in os.scandir(outdir):
            ptd_bytes += entry.stat().st_size
    return counter.count, ptd_bytes


def backend_config(mode: str, extra: dict):
    """The `ExecutorchBackendConfig` of a mode; the upstream one is ExecuTorch's own class."""
    if mode == Mode.PRUNED:
        import emitter_filter

        return emitter_filter.ExecutorchBackendConfig(prune_constants=True, **extra)
    if mode == Mode.UPSTREAM:
        from executorch.exir import ExecutorchBackendConfig

        return ExecutorchBackendConfig(**extra)
    raise ValueError(f"mode {mode!r}: expected one of {Mode.ALL}")


def ensure_mode(mode: str) -> None:
    """Installs the hook for pruned runs and removes it for upstream ones.

    The upstream baseline must be ExecuTorch as shipped, not ExecuTorch with a
    pass-through wrapper, so that the ratio measures the filter and nothing else.
    """
    import emitter_filter

    if mode == Mode.UPSTREAM:
        emitter_filter.uninstall()
    else:
        emitter_filter.install()


def warm_up(mode: str) -> None:
    """Serializes a one-linear model in `mode` once per process, and throws it away.

    The first `to_executorch` of a process imports modules lazily: ExecuTorch's
    data serializer in both modes, and in pruned mode the hook's analysis and
    named-data modules (measured: ~0.3 MiB and a few ms). A process pays that
    once, not per program; left in the first measured call it would be charged
    to one model. Doing the same thing in both modes keeps them comparable.
    """
    if mode in _WARMED_UP:
        return
    import torch
    from executorch.exir import to_edge

    exported = torch.export.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),), strict=False)
    edge = to_edge(exported)
    ensure_mode(mode)
    edge.to_executorch(backend_config(mode, {}))
    _WARMED_UP.add(mode)


#: The modes `warm_up` already ran in this process: exporting its model takes a second or
#: two, and the suite asked for it before each of its benchmarks.
_WARMED_UP: set[str] = set()


class MemoryProbe:
    """Resident-set figures of this process, in bytes, around one region."""

    _FIELD = re.compile(r"^(VmHWM|VmRSS):\s+(\d+)\s+kB$", re.MULTILINE)

    def __init__(self) -> None:
        self.can_reset = self._try_reset(dry_run=True)
        self.before = 0
        self.peak_before = 0

    @classmethod
    def _status(cls) -> dict[str, int]:
        try:
            with open("/proc/self/status") as status:
                text = status.read()
        except OSError:
            return {}
        return {name: int(kb) * 1024 for name, kb in cls._FIELD.findall(text)}

    @staticmethod
    def _try_reset(*, dry_run: bool = False) -> bool:
        try:
            with open("/proc/self/clear_refs", "w") as clear_refs:
                if not dry_run:
                    clear_refs.write("5")
        except OSError:
            return False
        return True

    def start(self) -> None:
        """Marks the start of the region: collects garbage and resets the peak."""
        gc.collect()
        status = self._status()
        self.before = status.get("VmRSS", 0)
        # The peak so far (building the model), kept before the reset erases it.
        self.peak_before = max(self.peak_before, status.get("VmHWM", 0))
        if self.can_reset:
            self._try_reset()

    def stop(self) -> dict[str, int | str]:
        """Peak during the region and for the whole process so far."""
        status = self._status()
        figures: dict[str, int | str] = {"rss_before_bytes": self.before}
        if self.can_reset and "VmHWM" in status:
            region_peak = status["VmHWM"]
            figures["region_peak_rss_bytes"] = region_peak
            figures["region_extra_rss_bytes"] = region_peak - self.before
            figures["process_peak_rss_bytes"] = max(self.peak_before, region_peak)
            figures["source"] = "VmHWM, reset by clear_refs at the start of to_executorch"
        else:
            figures["process_peak_rss_bytes"] = (
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            )
            figures["source"] = "ru_maxrss: includes the parent's peak at fork; no region figures"
        return figures


def measure_to_executorch(edge, mode: str, extra_config: dict, *, probe: MemoryProbe | None = None):
    """Runs `edge.to_executorch` once in `mode` and measures it.

    Args:
        edge: A fresh `EdgeProgramManager`. Modified: `to_executorch` runs passes on it.
        mode: `Mode.UPSTREAM` or `Mode.PRUNED`.
        extra_config: Upstream `ExecutorchBackendConfig` fields. Not modified.
        probe: When given, the memory of the call is recorded around it.

    Returns:
        (the `ExecutorchProgramManager`, its `Measurement`).
    """
    ensure_mode(mode)
    config = backend_config(mode, extra_config)
    if probe is not None:
        probe.start()
    started = time.perf_counter()
    manager = edge.to_executorch(config)
    seconds = time.perf_counter() - started
    memory = probe.stop() if probe is not None else {}
    return manager, describe(manager, mode, seconds, memory)


def describe(manager, mode: str, seconds: float, memory: dict | None = None) -> Measurement:
    """The `Measurement` of a manager that `to_executorch` returned after `seconds`."""
    pte_bytes, ptd_bytes = count_output_bytes(manager)
    measurement = Measurement(
        mode=mode,
        to_executorch_seconds=seconds,
        pte_bytes=pte_bytes,
        ptd_bytes=ptd_bytes,
        memory=dict(memory or {}),
    )
    if mode == Mode.PRUNED:
        import emitter_filter

        report = emitter_filter.report(manager)
        measurement.filter_seconds = report.seconds
        measurement.dropped_bytes = report.dropped_bytes
        measurement.dropped_constants = len(report.dropped)
        measurement.dropped_values = report.dropped_values
        measurement.constant_bytes_before = dict(report.bytes_before)
        measurement.constant_bytes_after = dict(report.bytes_after)
    logger.info(
        "%s: to_executorch %.3f s, .pte %s B, .ptd %s B%s",
        mode,
        seconds,
        f"{pte_bytes:,}",
        f"{ptd_bytes:,}",
        ""
        if measurement.filter_seconds is None
        else f", filter {measurement.filter_seconds * 1000:.1f} ms, "
        f"dropped {measurement.dropped_bytes:,} B",
    )
    return measurement
