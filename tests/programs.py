"""Small dirty programs built with upstream ExecuTorch, each also pruned in process.

Each case is built twice from the same model: as ExecuTorch writes it (dirty), and
with `prune_constants=True` (the in-process filter), whose report says what the
file side must find dead. `tests/golden/` holds these files as executorch
`GOLDEN_EXECUTORCH` wrote them, for the test run without torch (see conftest);
`python -m tests.programs` writes them again.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
from pathlib import Path

import torch

from tests.files import (
    CASES,
    GOLDEN,
    GOLDEN_EXECUTORCH,
    GOLDEN_FLATBUFFERS,
    Built,
    flatbuffers_version,
    golden_audit,
    saved,
)


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
    with open(directory / "model.pte", "wb") as f:
        manager.write_to_file(f)
    manager.write_tensor_data_to_file(str(directory))
    return saved(directory)


def build(case: str, root: Path) -> Built:
    from executorch.exir import ExecutorchBackendConfig

    import emitter_filter

    dirty = _lower(_model(case), case).to_executorch(_config(case, ExecutorchBackendConfig))
    pruned = _lower(_model(case), case).to_executorch(
        dataclasses.replace(
            _config(case, emitter_filter.ExecutorchBackendConfig), prune_constants=True
        )
    )
    pte, ptds = _save(dirty, root / case / "dirty")
    pruned_pte, pruned_ptds = _save(pruned, root / case / "pruned")
    return Built(
        case, pte, ptds, pruned_pte, pruned_ptds, emitter_filter.report(pruned), _inputs(case)
    )


def write_golden(root: Path = GOLDEN) -> None:
    """Writes every case and its `audit --json` (`audit.json`) under `root`, replacing it."""
    from emitter_filter import _upstream

    found = (_upstream.installed_executorch_version(), flatbuffers_version())
    if found != (GOLDEN_EXECUTORCH, GOLDEN_FLATBUFFERS):
        raise SystemExit(
            f"the golden files are executorch {GOLDEN_EXECUTORCH}'s with flatbuffers "
            f"{GOLDEN_FLATBUFFERS}; found {found}"
        )
    shutil.rmtree(root, ignore_errors=True)
    for case in (*CASES, "clean"):
        built = build(case, root)
        for pte, ptds in ((built.pte, built.ptds), (built.pruned_pte, built.pruned_ptds)):
            (pte.parent / "audit.json").write_text(golden_audit(pte, ptds) + "\n")


if __name__ == "__main__":
    write_golden(Path(sys.argv[1]) if len(sys.argv) > 1 else GOLDEN)
