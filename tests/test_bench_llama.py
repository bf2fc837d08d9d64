"""`bench.llama`'s options for the tied fp32 export (`bench.bench_proof_llama`), without the
exporter: the checkpoint it writes and the command line it builds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# `bench/` is a top-level package of the repository, not part of the installed wheel.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import llama  # noqa: E402


def test_a_tied_checkpoint_stores_the_embedding_as_the_head_in_a_tensor_of_its_own(tmp_path):
    """One checkpoint (about 4 s): the untied one is `bench.worker`'s, which the suite runs."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("executorch.examples.models.llama.llama_transformer")

    checkpoint, _ = llama.write_checkpoint(tmp_path / "checkpoint", tied=True)
    state = torch.load(checkpoint)
    embedding, head = state["tok_embeddings.weight"], state["output.weight"]
    assert embedding.shape == (32000, 288)
    assert torch.equal(embedding, head)
    # Two tensors, not one: the exporter sees two parameters, as a stories checkpoint gives.
    assert embedding.untyped_storage().data_ptr() != head.untyped_storage().data_ptr()
    # Only those two: every other weight is random on its own.
    assert not torch.equal(
        state["layers.0.attention.wq.weight"], state["layers.1.attention.wq.weight"]
    )


def test_the_fp32_command_line_asks_for_no_quantization_and_keeps_the_rest():
    paths = (Path("w.pth"), Path("params.json"), Path("out"))
    quantized = llama.exporter_argv(*paths)
    fp32 = llama.exporter_argv(*paths, quantize=False)
    assert "--quantization_mode" in quantized
    assert [
        a for a in quantized if a not in ("--quantization_mode", "8da4w", "--group_size", "32")
    ] == fp32
