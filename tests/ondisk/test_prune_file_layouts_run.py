"""Real programs written as other producers write them: `prune` keeps the program and its results.

The session's models (`conftest.built`), as ExecuTorch wrote them, are written
again in other layouts (`tests/layouts.relayout`: every default field written
out, the 24-byte extended header of older releases, other segment alignment
and header padding). Pruned on disk, each must be the program the in-process
prune writes (ExecuTorch's deserializer reads the same plans, constants and
named data), compute bit-identical outputs in the portable runtime, and
audit clean; with nothing dead, the file comes back byte for byte.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from emitter_filter.ondisk.audit import audit_file
from emitter_filter.ondisk.prune import prune_file
from tests.layouts import relayout

PRODUCERS = {
    "every-default-written": {"force_defaults": True},
    "24-byte-header": {"header_length": 24},
    "aligned-4096-header-64": {"segment_alignment": 4096, "padded": 64},
    "aligned-16-defaults-written": {"segment_alignment": 16, "force_defaults": True},
}
MODELS = ("plain", "external", "xnnpack", "mutated", "clean")


def _run(pte: Path, ptds, inputs) -> list[torch.Tensor]:
    from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer

    # The runtime owns neither buffer: keep both referenced while the module lives.
    pte_bytes = pte.read_bytes()
    ptd_bytes = ptds[0].read_bytes() if ptds else None
    module = _load_for_executorch_from_buffer(pte_bytes, ptd_bytes)
    outputs = [list(module.run_method("forward", inputs)) for _ in range(2)]
    del module
    return [t for step in outputs for t in step]


def _program(path: Path):
    from executorch.exir._serialize._program import deserialize_pte_binary

    pte = deserialize_pte_binary(path.read_bytes())
    pte.program.segments = []
    store = pte.named_data
    named = (
        {}
        if store is None
        else {key: bytes(store.buffers[e.buffer_index]) for key, e in store.pte_data.items()}
    )
    return pte.program, pte.mutable_data, named


@pytest.mark.parametrize("producer", PRODUCERS)
@pytest.mark.parametrize("model", MODELS)
def test_a_relaid_file_prunes_to_the_same_program_with_the_same_results(
    built, tmp_path, model, producer
):
    case = built[model]
    dirty = tmp_path / "dirty.pte"
    dirty.write_bytes(relayout(case.pte.read_bytes(), **PRODUCERS[producer]))
    out = tmp_path / "out"
    out.mkdir()
    report = prune_file(dirty, out / "model.pte", case.ptds, out)
    ptds = sorted(out.glob("*.ptd"))
    assert audit_file(out / "model.pte", ptds).dead_bytes == 0
    if model == "clean":
        assert report.dropped == () and report.dropped_values == 0
        assert (out / "model.pte").read_bytes() == dirty.read_bytes()
    assert _program(out / "model.pte") == _program(case.pruned_pte)
    assert [p.read_bytes() for p in ptds] == [p.read_bytes() for p in case.pruned_ptds]
    expected = _run(case.pte, case.ptds, case.inputs)
    got = _run(out / "model.pte", ptds, case.inputs)
    assert len(got) == len(expected)
    assert all(torch.equal(g, e) for g, e in zip(got, expected, strict=True))

    again = tmp_path / "again"
    again.mkdir()
    prune_file(out / "model.pte", again / "model.pte", ptds, again)
    assert (again / "model.pte").read_bytes() == (out / "model.pte").read_bytes()
