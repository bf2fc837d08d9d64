"""Prefill and decode of a tiny llama, exported as two files, shared and run (slow: a minute).

ExecuTorch's own `examples/models/llama` transformer with a tiny config and
random weights (fixed seed), a KV cache (mutable buffers: never moved), one
program per step shape as LLM exporters write them separately.
"""

from __future__ import annotations

import inspect

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.examples.models.llama.llama_transformer import construct_transformer
from executorch.examples.models.llama.model_args import ModelArgs
from executorch.exir import to_edge, to_edge_transform_and_lower
from executorch.runtime import Runtime

from emitter_filter.ondisk.audit_set import audit_set
from emitter_filter.ondisk.share import share_files

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        "data_path" not in inspect.signature(Runtime.load_program).parameters,
        reason="this executorch's Runtime.load_program takes no .ptd (data_path, added in 1.5)",
    ),
]

_TOKENS = torch.randint(0, 256, (1, 8), generator=torch.Generator().manual_seed(3))
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


def _tiny_llama() -> torch.nn.Module:
    torch.manual_seed(0)
    args = ModelArgs(
        dim=64, n_layers=2, n_heads=4, vocab_size=256, multiple_of=32, max_seq_len=32,
        max_context_len=32, use_kv_cache=True, enable_dynamic_shape=True,
    )
    return Step(construct_transformer(args).eval())


@pytest.mark.parametrize("backend", ["portable", "xnnpack"])
def test_prefill_and_decode_share_their_weights_and_compute_as_before(backend, tmp_path):
    model = _tiny_llama()
    originals = []
    for name, inputs in STEPS.items():
        with torch.no_grad():
            exported = torch.export.export(model, inputs)
        if backend == "xnnpack":
            edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
        else:
            edge = to_edge(exported)
        path = tmp_path / f"{name}.pte"
        path.write_bytes(edge.to_executorch().buffer)
        originals.append(path)
    out = tmp_path / "out"
    report = share_files(originals, out)
    weights = sum(p.numel() * 4 for p in model.parameters())
    # The weights (all but the few below --min-bytes) are stored once, not twice.
    assert report.shared_bytes > weights * 0.9 and report.saved_bytes > weights * 0.8
    runtime = Runtime.get()
    for path, inputs in zip(originals, STEPS.values()):
        want = runtime.load_program(str(path)).load_method("forward").execute(list(inputs))
        program = runtime.load_program(str(out / path.name), data_path=str(out / "shared.ptd"))
        got = program.load_method("forward").execute(list(inputs))
        assert torch.equal(want[0], got[0]), path.name
    after = audit_set([out / p.name for p in originals], [out / "shared.ptd"])
    assert after.dead_bytes == 0 and after.shared == ()
