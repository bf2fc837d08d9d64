"""Prefill and decode of a tiny llama, exported as two files, shared and run (slow: a minute).

ExecuTorch's own `examples/models/llama` transformer with a tiny config and
random weights (fixed seed), a KV cache (mutable buffers: never moved), one
program per step shape as LLM exporters write them separately (`tests.model_sets`).
"""

from __future__ import annotations

import inspect

import pytest
import torch
from executorch.runtime import Runtime

from emitter_filter.ondisk.audit_set import audit_set
from emitter_filter.ondisk.share import share_files
from tests.model_sets import STEPS, export_step, tiny_llama

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        "data_path" not in inspect.signature(Runtime.load_program).parameters,
        reason="this executorch's Runtime.load_program takes no .ptd (data_path, added in 1.5)",
    ),
]


@pytest.mark.parametrize("backend", ["portable", "xnnpack"])
def test_prefill_and_decode_share_their_weights_and_compute_as_before(backend, tmp_path):
    model = tiny_llama()
    originals = []
    for name in STEPS:
        path = tmp_path / f"{name}.pte"
        path.write_bytes(export_step(model, name, backend))
        originals.append(path)
    out = tmp_path / "out"
    report = share_files(originals, out)
    weights = sum(p.numel() * 4 for p in model.parameters())
    # The weights (all but the few below --min-bytes) are stored once, not twice.
    assert report.shared_bytes > weights * 0.9 and report.saved_bytes > weights * 0.8
    runtime = Runtime.get()
    for path, inputs in zip(originals, STEPS.values(), strict=True):
        want = runtime.load_program(str(path)).load_method("forward").execute(list(inputs))
        program = runtime.load_program(str(out / path.name), data_path=str(out / "shared.ptd"))
        got = program.load_method("forward").execute(list(inputs))
        assert torch.equal(want[0], got[0]), path.name
    after = audit_set([out / p.name for p in originals], [out / "shared.ptd"])
    assert after.dead_bytes == 0 and after.shared == ()
