"""`pytest --load-outputs`: every `.pte` the tools write in a test must load in ExecuTorch's runtime.

Wraps `output.write_outputs` where `prune`, `prune --dedupe`, `merge`, `split`
and `share` call it, loads each `.pte` it wrote (with the `.ptd` written beside
it in the same call, else the one `.ptd` in its directory) in the runtime worker
(`tests/runtime_worker.py`) right after it is written, and fails the test at
teardown naming each output the runtime refused. A program whose `.ptd` is found
neither way (an input elsewhere: `prune` keeps it as it is) and that needs one is
not checked. Opt-in: the worker's start-up
imports torch (seconds), and the check needs executorch's pybindings.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

#: The modules that write programs, each with its own `write_outputs` name.
WRITERS = (
    "emitter_filter.ondisk.prune",
    "emitter_filter.ondisk.dedupe",
    "emitter_filter.ondisk.merge",
    "emitter_filter.ondisk.share",
)

_worker = None


def pytest_addoption(parser) -> None:
    parser.addoption(
        "--load-outputs",
        action="store_true",
        help="load every .pte the tools write in ExecuTorch's runtime",
    )


def _runtime_worker():
    global _worker
    if _worker is None:
        from tests.runtime_worker import RuntimeWorker

        _worker = RuntimeWorker()
    return _worker


def pytest_sessionfinish(session) -> None:
    if _worker is not None:
        _worker.close()


def _data_files(pte: Path, written: list[Path]) -> list[Path]:
    if written:
        return written
    beside = sorted(pte.parent.glob("*.ptd"))
    return beside if len(beside) == 1 else []


def check_outputs(outputs, refused: list[str], worker=None) -> None:
    """Loads the programs of one `write_outputs` call; adds what the runtime refused."""
    from tests.runtime_worker import Refused

    worker = worker or _runtime_worker()
    paths = [Path(o.path) for o in outputs]
    ptds = [p for p in paths if p.suffix == ".ptd"]
    for pte in (p for p in paths if p.suffix != ".ptd"):
        data = _data_files(pte, ptds)
        if len(data) > 1:
            continue  # the pybindings take one data file
        outcome = worker.load(pte, data)
        if (
            isinstance(outcome, Refused)
            and not data
            and "external_data_map is null" in " ".join(outcome.log)
        ):
            continue  # its .ptd is an input somewhere else: not checked (the call does not say)
        if isinstance(outcome, Refused):
            refused.append(f"{pte.name} (data {[d.name for d in data]}): {outcome.reason}")


@pytest.fixture(autouse=True)
def _outputs_load(request, monkeypatch):
    if not request.config.getoption("--load-outputs"):
        yield
        return
    refused: list[str] = []
    for name in WRITERS:
        module = importlib.import_module(name)
        write = module.write_outputs

        def wrapper(outputs, *args, _write=write, **kwargs):
            written = _write(outputs, *args, **kwargs)
            check_outputs(outputs, refused)
            return written

        monkeypatch.setattr(module, "write_outputs", wrapper)
    yield
    assert not refused, f"outputs the runtime refuses: {refused}"
