"""Small dirty programs built once per session with upstream ExecuTorch, saved under tmp.

Each case is built twice from the same model: as ExecuTorch writes it (dirty), and
with `prune_constants=True` (the in-process filter), whose report says what the
file side must find dead.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch


class LinearWithUnusedBuffers(torch.nn.Module):
    """A Linear plus two registered buffers nothing reads (128 B and 20 B)."""

    def __init__(self, unused: bool = True) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 3)
        if unused:
            self.register_buffer("unused", torch.arange(32, dtype=torch.float32))
            self.register_buffer("odd", torch.ones(5, dtype=torch.float32))

    def forward(self, x):
        return self.lin(x)


class MutatedWithUnusedBuffer(torch.nn.Module):
    """A buffer the model mutates in place, next to an unused one."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("count", torch.zeros(4))
        self.register_buffer("unused", torch.arange(16, dtype=torch.float32))

    def forward(self, x):
        self.count.add_(x)
        return self.count * 2


EXAMPLE_INPUTS = (torch.randn(2, 4, generator=torch.Generator().manual_seed(1)),)


@dataclasses.dataclass(frozen=True)
class Built:
    """One model saved twice: `pte`/`ptds` as upstream writes it, `pruned_*` pruned in process."""

    name: str
    pte: Path
    ptds: tuple[Path, ...]
    pruned_pte: Path
    pruned_ptds: tuple[Path, ...]
    report: object
    inputs: tuple


def _lower(model, case: str):
    from executorch.exir import to_edge, to_edge_transform_and_lower

    exported = torch.export.export(model, _inputs(case))
    if case == "xnnpack":
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
            XnnpackPartitioner,
        )

        return to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
    return to_edge(exported)


def _inputs(case: str) -> tuple:
    return (torch.ones(4),) if case == "mutated" else EXAMPLE_INPUTS


def _model(case: str):
    if case == "mutated":
        return MutatedWithUnusedBuffer()
    return LinearWithUnusedBuffers(unused=case != "clean")


def _config(case: str, cls):
    kwargs = {"external_constants": True} if case == "external" else {}
    if case == "mutated":
        from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

        # Serializes the buffer's initial state: the mutable data segment.
        kwargs["passes"] = [InitializedMutableBufferPass(["count"])]
    return cls(**kwargs)


def _save(manager, directory: Path) -> tuple[Path, tuple[Path, ...]]:
    directory.mkdir(parents=True)
    pte = directory / "model.pte"
    with open(pte, "wb") as f:
        manager.write_to_file(f)
    manager.write_tensor_data_to_file(str(directory))
    return pte, tuple(sorted(directory.glob("*.ptd")))


def build(case: str, root: Path) -> Built:
    import emitter_filter
    from executorch.exir import ExecutorchBackendConfig

    dirty = _lower(_model(case), case).to_executorch(_config(case, ExecutorchBackendConfig))
    pruned = _lower(_model(case), case).to_executorch(
        dataclasses.replace(
            _config(case, emitter_filter.ExecutorchBackendConfig), prune_constants=True
        )
    )
    pte, ptds = _save(dirty, root / case / "dirty")
    pruned_pte, pruned_ptds = _save(pruned, root / case / "pruned")
    return Built(case, pte, ptds, pruned_pte, pruned_ptds, emitter_filter.report(pruned),
                 _inputs(case))


CASES = ("plain", "external", "xnnpack", "mutated")


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> dict[str, Built]:
    root = tmp_path_factory.mktemp("programs")
    return {case: build(case, root) for case in (*CASES, "clean")}
