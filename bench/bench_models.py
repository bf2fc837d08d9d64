"""The benchmarks: every zoo model serialized with and without pruning, in the same run.

One benchmark per (model, mode), grouped by model. For zoo models the timed
call is `to_executorch` alone (before each round, untimed, a deep copy of the
model built once for both modes: `to_executorch` changes the manager it is
called on, and a copy writes the same bytes as a fresh build); for the llama
example it is the whole `export_llama` subprocess, and its `to_executorch`
time is in `extra_info`.

`extra_info` of every benchmark holds what the dashboard and `--compare` read:

- ``to_executorch_seconds`` and, pruned, ``filter_seconds`` and ``filter_share``:
  one entry per round, measured on the same call, so the share is a ratio of
  two numbers from one round and not of two noisy means;
- ``pte_bytes``, ``ptd_bytes``, ``total_bytes`` and, pruned, ``dropped_bytes`` and
  the report's ``constant_bytes_before``/``after`` per space;
- ``worker``: the same model measured once more in a fresh process, for peak
  memory (``memory``) untouched by the models measured before it; the workers
  run after every timed round, two at a time (`bench.conftest.WorkerQueue`);
  with `--bench-quick` only for the zoo's ``quick_memory`` models, the others' is None.

Zoo models with `dedupe` get a third benchmark, mode ``deduped``: pruned with
`dedupe_constants=True`, with ``dedupe_seconds``, ``dedupe_share`` (of the same
call's `to_executorch`) and ``dedupe_saved_bytes`` besides the figures above.

Nothing here asserts on time: the figures are recorded, never judged.
"""

from __future__ import annotations

import copy
import gc
import logging
import time

import pytest

from bench import llama
from bench.measure import Mode, backend_config, describe, ensure_mode, warm_up
from bench.worker import run_worker
from bench.zoo import ZOO, ModelCase

logger = logging.getLogger(__name__)

#: A worker builds one model and serializes it once; the biggest take minutes.
_WORKER_TIMEOUT_SECONDS = 3600


def _params():
    for case in ZOO:
        marks = () if case.quick else (pytest.mark.slow,)
        for mode in Mode.ALL:
            yield pytest.param(case, mode, id=f"{case.name}-{mode}", marks=marks)


def _base_info(name: str, description: str, mode: str, nominal: int | None) -> dict:
    return {
        "model": name,
        "mode": mode,
        "description": description,
        "nominal_constant_bytes": nominal,
    }


def _add_worker(extra_info: dict, case: ModelCase, mode: str, workers) -> None:
    """Queues the fresh-process measurement (`bench.conftest.WorkerQueue`), if any."""
    if workers is None or (workers.quick and not case.quick_memory):
        extra_info["worker"] = None
        return
    workers.add(extra_info, case.name, mode, alone=not case.quick)


#: The last zoo model built, by name: the rounds of both modes copy it.
_BUILT: dict[str, object] = {}


def _edge_of(case: ModelCase):
    """A fresh copy of `case`'s edge program, built once while its benchmarks run."""
    if case.name not in _BUILT:
        _BUILT.clear()  # one model at a time: the biggest hold hundreds of MiB
        gc.collect()
        started = time.perf_counter()
        _BUILT[case.name] = case.build()
        logger.info("%s: built in %.1f s", case.name, time.perf_counter() - started)
    return copy.deepcopy(_BUILT[case.name])


class _Rounds:
    """Collects each round's manager and turns it into figures between rounds.

    The manager is described in `teardown`, outside the timed region, and
    dropped at once so that a large model's bytes are not kept across rounds.
    """

    def __init__(self, case: ModelCase, mode: str, extra_config: dict | None = None) -> None:
        self.case = case
        self.mode = mode
        self.config = {**case.config, **(extra_config or {})}
        self.measurements = []
        self.dedupe_reports = []
        self._manager = None
        self._seconds = 0.0

    def setup(self):
        self._manager = None
        gc.collect()
        started = time.perf_counter()
        edge = _edge_of(self.case)
        logger.info(
            "%s/%s round %d: copied in %.1f s",
            self.case.name,
            self.mode,
            len(self.measurements) + 1,
            time.perf_counter() - started,
        )
        ensure_mode(self.mode)
        return (edge, backend_config(self.mode, self.config)), {}

    def to_executorch(self, edge, config):
        started = time.perf_counter()
        self._manager = edge.to_executorch(config)
        self._seconds = time.perf_counter() - started

    def teardown(self, edge, config):
        self.measurements.append(describe(self._manager, self.mode, self._seconds))
        if getattr(config, "dedupe_constants", False):
            import emitter_filter

            self.dedupe_reports.append(emitter_filter.report(self._manager).dedupe)
        self._manager = None


def _timed_info(case: ModelCase, mode: str, rounds: _Rounds) -> dict:
    """What every to_executorch benchmark records: its rounds' times and the last one's bytes."""
    last = rounds.measurements[-1]
    info = _base_info(case.name, case.description, mode, case.nominal_constant_bytes)
    info.update(
        timed="to_executorch",
        to_executorch_seconds=[m.to_executorch_seconds for m in rounds.measurements],
        pte_bytes=last.pte_bytes,
        ptd_bytes=last.ptd_bytes,
        total_bytes=last.pte_bytes + last.ptd_bytes,
    )
    return info


@pytest.mark.parametrize(("case", "mode"), _params())
def test_to_executorch(benchmark, case: ModelCase, mode: str, bench_workers):
    benchmark.group = case.name
    warm_up(mode)
    rounds = _Rounds(case, mode)
    benchmark.pedantic(
        rounds.to_executorch,
        setup=rounds.setup,
        teardown=rounds.teardown,
        rounds=case.rounds,
        iterations=1,
    )
    last = rounds.measurements[-1]
    info = _timed_info(case, mode, rounds)
    if mode == Mode.PRUNED:
        info.update(
            filter_seconds=[m.filter_seconds for m in rounds.measurements],
            filter_share=[m.filter_seconds / m.to_executorch_seconds for m in rounds.measurements],
            dropped_bytes=last.dropped_bytes,
            dropped_constants=last.dropped_constants,
            dropped_values=last.dropped_values,
            constant_bytes_before=last.constant_bytes_before,
            constant_bytes_after=last.constant_bytes_after,
        )
    benchmark.extra_info.update(info)
    _add_worker(benchmark.extra_info, case, mode, bench_workers)


@pytest.mark.parametrize(
    "case", [c for c in ZOO if c.dedupe], ids=[f"{c.name}-deduped" for c in ZOO if c.dedupe]
)
def test_dedupe(benchmark, case: ModelCase):
    """`prune_constants` and `dedupe_constants` together: bytes, and the dedupe's share."""
    benchmark.group = case.name
    warm_up(Mode.PRUNED)
    rounds = _Rounds(case, Mode.PRUNED, {"dedupe_constants": True})
    benchmark.pedantic(
        rounds.to_executorch,
        setup=rounds.setup,
        teardown=rounds.teardown,
        rounds=case.rounds,
        iterations=1,
    )
    last, dedupe = rounds.measurements[-1], rounds.dedupe_reports[-1]
    info = _timed_info(case, "deduped", rounds)
    info.update(
        filter_seconds=[m.filter_seconds for m in rounds.measurements],
        dropped_bytes=last.dropped_bytes,
        dedupe_seconds=[d.seconds for d in rounds.dedupe_reports],
        dedupe_share=[
            d.seconds / m.to_executorch_seconds
            for d, m in zip(rounds.dedupe_reports, rounds.measurements, strict=True)
        ],
        dedupe_saved_bytes=dedupe.saved_bytes,
        worker=None,
    )
    benchmark.extra_info.update(info)


@pytest.mark.slow
@pytest.mark.parametrize("mode", Mode.ALL, ids=[f"{llama.NAME}-{m}" for m in Mode.ALL])
def test_llama_export(benchmark, mode: str, bench_workdir):
    """The llama example through `export_llama`, one fresh process per mode.

    The export takes minutes, so there is one round, and the worker's process
    also gives the memory figures.
    """
    benchmark.group = llama.NAME
    results = []

    def export():
        results.append(
            run_worker(llama.NAME, mode, bench_workdir / "workers", timeout=_WORKER_TIMEOUT_SECONDS)
        )

    benchmark.pedantic(export, rounds=1, iterations=1)
    result = results[-1]
    measurement = result["measurement"]
    info = _base_info(llama.NAME, llama.DESCRIPTION, mode, None)
    info.update(
        timed="export_llama subprocess (whole export)",
        export_seconds=result["export_seconds"],
        to_executorch_seconds=[measurement["to_executorch_seconds"]],
        pte_bytes=measurement["pte_bytes"],
        ptd_bytes=measurement["ptd_bytes"],
        total_bytes=measurement["pte_bytes"] + measurement["ptd_bytes"],
        memory=measurement["memory"],
        worker=result,
    )
    if mode == Mode.PRUNED:
        info.update(
            filter_seconds=[measurement["filter_seconds"]],
            filter_share=[measurement["filter_seconds"] / measurement["to_executorch_seconds"]],
            dropped_bytes=measurement["dropped_bytes"],
            dropped_constants=measurement["dropped_constants"],
            dropped_values=measurement["dropped_values"],
            constant_bytes_before=measurement["constant_bytes_before"],
            constant_bytes_after=measurement["constant_bytes_after"],
        )
    benchmark.extra_info.update(info)
