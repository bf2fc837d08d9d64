"""Small Vulkan programs, each written as upstream writes it and pruned in process.

`VulkanPartitioner` lowers on a CPU machine (only its runtime needs a GPU), but an
export takes ~5 s: `tests/golden/vulkan/` holds these files for the default run
(a few KB each), and `python -m tests.vulkan_programs` writes them again (checking it
runs the executorch and flatbuffers the other golden files were written with).

- `plain`: one Linear; its weight and bias are Vulkan named data.
- `tied_dead`: an embedding and the projection that shares its weight, both lowered
  (one key), beside a registered buffer nothing reads (dead in the constant segment).
- `orphaned`: two Linears lowered as two delegates (a portable cumsum between them);
  a `to_executorch` pass removes the second call, leaving its keys read by nothing.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import torch

from tests.files import VULKAN_CASES, VULKAN_GOLDEN, Built, saved


class _Linear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x)


class _TiedWithDeadBuffer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embedding = torch.nn.Embedding(16, 8)
        self.head = torch.nn.Linear(8, 16, bias=False)
        self.head.weight = self.embedding.weight
        self.register_buffer("unused", torch.arange(32, dtype=torch.float32))

    def forward(self, tokens):
        return self.head(self.embedding(tokens))


class _TwoLinears(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.b(torch.cumsum(self.a(x), dim=1))


def _remove_last_delegate_call():
    from executorch.exir.lowered_backend_module import executorch_call_delegate
    from executorch.exir.pass_base import PassBase, PassResult

    class RemoveLastDelegateCall(PassBase):
        """Replaces the last delegate call with its first input (shapes agree here)."""

        def call(self, graph_module):
            calls = [n for n in graph_module.graph.nodes if n.target is executorch_call_delegate]
            call = calls[-1]
            for getitem in list(call.users):
                getitem.replace_all_uses_with(call.args[1])
                graph_module.graph.erase_node(getitem)
            graph_module.graph.erase_node(call)
            graph_module.graph.eliminate_dead_code()
            graph_module.recompile()
            return PassResult(graph_module, True)

    return RemoveLastDelegateCall()


_MODELS = {
    "plain": (_Linear, lambda: (torch.ones(2, 4),)),
    "tied_dead": (_TiedWithDeadBuffer, lambda: (torch.tensor([[1, 2, 3]]),)),
    "orphaned": (_TwoLinears, lambda: (torch.ones(2, 8),)),
}


def _export(case: str, config_class, **config):
    from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
    from executorch.exir import to_edge_transform_and_lower

    model, inputs = _MODELS[case]
    exported = torch.export.export(model(), inputs())
    edge = to_edge_transform_and_lower(exported, partitioner=[VulkanPartitioner()])
    passes = [_remove_last_delegate_call()] if case == "orphaned" else []
    return edge.to_executorch(config_class(passes=passes, **config))


def _save(manager, directory: Path) -> None:
    directory.mkdir(parents=True)
    (directory / "model.pte").write_bytes(manager.buffer)


def build(case: str, root: Path) -> Built:
    """`case` exported as upstream writes it (`dirty`) and with `prune_constants=True`."""
    from executorch.exir import ExecutorchBackendConfig

    import emitter_filter

    _save(_export(case, ExecutorchBackendConfig), root / case / "dirty")
    pruned = _export(case, emitter_filter.ExecutorchBackendConfig, prune_constants=True)
    _save(pruned, root / case / "pruned")
    pte, ptds = saved(root / case / "dirty")
    pruned_pte, pruned_ptds = saved(root / case / "pruned")
    return Built(case, pte, ptds, pruned_pte, pruned_ptds, emitter_filter.report(pruned), None)


def write_golden(root: Path = VULKAN_GOLDEN) -> None:
    """Writes every case under `root`, replacing it."""
    from emitter_filter import _upstream
    from tests.files import GOLDEN_EXECUTORCH, GOLDEN_FLATBUFFERS, flatbuffers_version

    found = (_upstream.installed_executorch_version(), flatbuffers_version())
    if found != (GOLDEN_EXECUTORCH, GOLDEN_FLATBUFFERS):
        raise SystemExit(f"the golden files are executorch {GOLDEN_EXECUTORCH}'s; found {found}")
    shutil.rmtree(root, ignore_errors=True)
    for case in VULKAN_CASES:
        build(case, root)


if __name__ == "__main__":
    write_golden(Path(sys.argv[1]) if len(sys.argv) > 1 else VULKAN_GOLDEN)
