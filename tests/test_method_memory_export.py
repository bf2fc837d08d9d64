"""A model whose hidden layer grows from 64 to 4,096 wide, exported with executorch: explain
shows the planned bytes the emitter wrote, diff names the growth, budget check fails on it."""

from __future__ import annotations

import pytest
import torch

from emitter_filter.cli import main
from emitter_filter.ondisk.explain import explain_file


class _Hidden(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(width)
        self.up = torch.nn.Linear(16, width)
        self.down = torch.nn.Linear(width, 16)
        for parameter in self.parameters():
            parameter.data = torch.randn(parameter.shape, generator=generator) * 0.01

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def _export(width: int) -> tuple[bytes, list[int]]:
    """The portable `.pte`, and the `non_const_buffer_sizes` the emitter planned."""
    from executorch.exir import to_edge

    with torch.no_grad():
        exported = torch.export.export(_Hidden(width).eval(), (torch.ones(4, 16),))
    program = to_edge(exported).to_executorch()
    sizes = list(program.executorch_program.execution_plan[0].non_const_buffer_sizes)
    return program.buffer, sizes


@pytest.mark.slow
def test_a_wider_hidden_layer_is_planned_memory_that_every_tool_names(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    narrow, narrow_sizes = _export(64)
    wide, wide_sizes = _export(4096)
    (tmp_path / "narrow.pte").write_bytes(narrow)
    (tmp_path / "wide.pte").write_bytes(wide)
    for name, sizes in (("narrow.pte", narrow_sizes), ("wide.pte", wide_sizes)):
        (method,) = explain_file(name).to_json()["methods"]
        assert sizes[0] == 0  # reserved by ExecuTorch
        assert method["planned_bytes"] == sum(sizes)
        assert [m["planned_bytes"] for m in method["memory_ids"]] == sizes[1:]
    # The activations of 4 rows: 4,096 floats wide where they were 64.
    assert sum(wide_sizes) - sum(narrow_sizes) >= 4 * (4096 - 64) * 4
    assert main(["diff", "narrow.pte", "wide.pte"]) == 0
    assert "planned memory: forward memory id 1: planned grew" in capsys.readouterr().out
    (tmp_path / "model.pte").write_bytes(narrow)
    assert main(["budget", "write", "model.pte", "-o", "pte-budget.json"]) == 0
    (tmp_path / "model.pte").write_bytes(wide)
    capsys.readouterr()
    assert main(["budget", "check", "model.pte", "--budget", "pte-budget.json"]) == 1
    assert "forward: planned memory" in capsys.readouterr().out
