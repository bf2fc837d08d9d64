"""Programs as LLM exporters write them: `forward` and the constant methods each exporter
adds (ExecuTorch's `constant_methods` argument of `to_edge` /
`to_edge_transform_and_lower`), with the values it gives them.

- `export_llama` (`executorch/examples/models/llama/export_llama_lib.py`,
  `_load_llama_model_metadata`): 7 methods; a prefill and a decode differ only in
  `enable_dynamic_shape`.
- optimum-executorch (`optimum/exporters/executorch/utils.py`,
  `save_config_to_constant_methods`, the values that are not None for a llama-like
  config): 12 methods, equal for a base model and its fine-tune; every export is
  written as `model.pte`.

The models: `tests.model_sets.tiny_llama` (ExecuTorch's llama transformer with a KV
cache), and `TiedLM`, a causal LM whose output projection is its embedding (tied
embeddings, as most small HF models have): lowered to XNNPACK, the embedding's bytes
are written twice, as the portable `embedding`'s constant and as XNNPACK named data.
"""

from __future__ import annotations

import copy

import torch

__all__ = [
    "TOKENS",
    "TiedLM",
    "llama_methods",
    "optimum_methods",
    "export_with_methods",
    "base_and_fine_tunes",
]

TOKENS = (torch.randint(0, 256, (1, 8), generator=torch.Generator().manual_seed(5)),)


def llama_methods(
    *, dynamic: bool, max_seq_len: int = 32, n_layers: int = 2, vocab_size: int = 256
) -> dict:
    """`export_llama`'s metadata for `tiny_llama`, without `--metadata`."""
    return {
        "get_max_seq_len": max_seq_len,
        "get_max_context_len": max_seq_len,
        "get_n_layers": n_layers,
        "get_vocab_size": vocab_size,
        "use_kv_cache": True,
        "use_sdpa_with_kv_cache": False,
        "enable_dynamic_shape": dynamic,
    }


def optimum_methods(
    *, dim: int = 64, n_heads: int = 4, n_layers: int = 1, vocab_size: int = 256
) -> dict:
    """optimum-executorch's metadata for a float32 llama-like config with a KV cache."""
    return {
        "get_dtype": 6,
        "get_bos_id": 1,
        "get_eos_id": 2,
        "get_head_dim": dim / n_heads,
        "get_n_kv_heads": n_heads,
        "get_n_layers": n_layers,
        "get_vocab_size": vocab_size,
        "get_max_batch_size": 1,
        "get_max_seq_len": 32,
        "use_kv_cache": True,
        "use_sdpa_with_kv_cache": False,
        "enable_dynamic_shape": True,
    }


class TiedLM(torch.nn.Module):
    """Embedding, one layer, and the embedding again as the output projection."""

    def __init__(self, vocab_size: int = 256, dim: int = 64) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab_size, dim)
        self.layer = torch.nn.Linear(dim, dim)
        self.lm_head = torch.nn.Linear(dim, vocab_size, bias=False)
        self.lm_head.weight = self.embed.weight

    def forward(self, tokens):
        return self.lm_head(self.layer(self.embed(tokens)).relu())


def base_and_fine_tunes(count: int = 3) -> list[TiedLM]:
    """A base model and `count - 1` fine-tunes of its layer (embeddings unchanged)."""
    torch.manual_seed(11)
    base = TiedLM().eval()
    models = [base]
    for number in range(1, count):
        tuned = copy.deepcopy(base)  # still tied: the copy keeps one Parameter for both
        with torch.no_grad():
            tuned.layer.weight.add_(
                torch.randn(
                    tuned.layer.weight.shape, generator=torch.Generator().manual_seed(number)
                )
                * 0.01
            )
        models.append(tuned)
    return models


def export_with_methods(model: torch.nn.Module, backend: str, inputs, methods: dict) -> bytes:
    """The `.pte` of `model` with `methods` as constant methods, portable or XNNPACK."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge, to_edge_transform_and_lower

    with torch.no_grad():
        exported = torch.export.export(model.eval(), inputs)
    if backend == "xnnpack":
        edge = to_edge_transform_and_lower(
            exported, partitioner=[XnnpackPartitioner()], constant_methods=methods
        )
    else:
        edge = to_edge(exported, constant_methods=methods)
    return edge.to_executorch().buffer
