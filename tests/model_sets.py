"""Sets of programs exported separately that have weights in common, from random weights
(fixed seeds), for the tests of `share` and `merge`: (a) one backbone with two heads,
(c) one base model with two LoRA-style adapters, (b) prefill and decode of ExecuTorch's
`examples/models/llama` transformer with a tiny config and a KV cache.
"""

from __future__ import annotations

import torch

__all__ = ["INPUT", "SETS", "STEPS", "export", "tiny_llama", "export_step", "twin_heads"]

INPUT = (torch.randn(2, 64, generator=torch.Generator().manual_seed(7)),)


class Backbone(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(64, 128)
        self.second = torch.nn.Linear(128, 128)

    def forward(self, x):
        return self.second(self.first(x).relu()).relu()


class WithHead(torch.nn.Module):
    def __init__(self, backbone: Backbone, outputs: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = torch.nn.Linear(128, outputs)

    def forward(self, x):
        return self.head(self.backbone(x))


class LoraLinear(torch.nn.Module):
    """A frozen base linear plus a rank-4 adapter: base(x) + up(down(x))."""

    def __init__(self, base: torch.nn.Linear, rank: int = 4) -> None:
        super().__init__()
        self.base = base
        self.down = torch.nn.Linear(base.in_features, rank, bias=False)
        self.up = torch.nn.Linear(rank, base.out_features, bias=False)

    def forward(self, x):
        return self.base(x) + self.up(self.down(x))


class LoraModel(torch.nn.Module):
    def __init__(self, backbone: Backbone) -> None:
        super().__init__()
        self.first = LoraLinear(backbone.first)
        self.second = LoraLinear(backbone.second)

    def forward(self, x):
        return self.second(self.first(x).relu())


def _heads() -> list[torch.nn.Module]:
    torch.manual_seed(0)
    backbone = Backbone()
    return [WithHead(backbone, 10), WithHead(backbone, 3)]


def _lora() -> list[torch.nn.Module]:
    torch.manual_seed(1)
    backbone = Backbone()
    return [LoraModel(backbone) for _ in range(2)]  # each adapter its own random weights


def twin_heads() -> list[torch.nn.Module]:
    """Two heads of one shape on one backbone: both name their head `head.weight`, with
    other values, so only the bytes tell them apart (not in `SETS`: `share`'s load tests
    run every set)."""
    torch.manual_seed(2)
    backbone = Backbone()
    return [WithHead(backbone, 10), WithHead(backbone, 10)]


#: Each set's models, made afresh.
SETS = {"heads": _heads, "lora": _lora}


def export(model: torch.nn.Module, backend: str, inputs=INPUT, **config) -> bytes:
    """The `.pte` of `model`, portable or lowered to XNNPACK; `config`: ExecutorchBackendConfig's."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import ExecutorchBackendConfig, to_edge, to_edge_transform_and_lower

    with torch.no_grad():
        exported = torch.export.export(model.eval(), inputs)
    if backend == "xnnpack":
        edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
    else:
        edge = to_edge(exported)
    return edge.to_executorch(ExecutorchBackendConfig(**config)).buffer


_TOKENS = torch.randint(0, 256, (1, 8), generator=torch.Generator().manual_seed(3))
#: The llama's inputs per step: tokens and their position.
STEPS = {
    "prefill": (_TOKENS, torch.tensor([0])),
    "decode": (_TOKENS[:, :1], torch.tensor([8])),
}


class Step(torch.nn.Module):
    """One call of the transformer with the KV cache: tokens at `input_pos`."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, tokens, input_pos):
        return self.model(tokens, {"input_pos": input_pos})


def tiny_llama() -> torch.nn.Module:
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs

    torch.manual_seed(0)
    args = ModelArgs(
        dim=64,
        n_layers=2,
        n_heads=4,
        vocab_size=256,
        multiple_of=32,
        max_seq_len=32,
        max_context_len=32,
        use_kv_cache=True,
        enable_dynamic_shape=True,
    )
    return Step(construct_transformer(args).eval())


def export_step(model: torch.nn.Module, step: str, backend: str) -> bytes:
    """The `.pte` of one step of `tiny_llama`, as LLM exporters write each shape apart."""
    return export(model, backend, STEPS[step])
