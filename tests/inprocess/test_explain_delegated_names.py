"""`explain --by module --names`: the weights XNNPACK keeps as named data (keys that are the
SHA-256 of their bytes) are placed under the module whose state they were stored from, a
convolution's too (XNNPACK permutes its weight to [out, h, w, in])."""

from __future__ import annotations

import torch

from emitter_filter.ondisk.explain import explain_file
from tests.model_sets import export


class ConvHead(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(16, 64, 3)
        self.head = torch.nn.Sequential(torch.nn.Linear(64, 32))

    def forward(self, x):
        return self.head(self.conv(x).mean((2, 3)))


def test_xnnpack_named_data_is_placed_under_its_module_with_names(tmp_path):
    torch.manual_seed(0)
    model, inputs = ConvHead().eval(), (torch.randn(1, 16, 8, 8),)
    pte = tmp_path / "m.pte"
    pte.write_bytes(export(model, "xnnpack", inputs))
    pt2 = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(model, inputs), pt2)

    named = [p for p in explain_file(pte, names=pt2).parts if p.storage == "named_data"]
    assert sorted({p.group("module") for p in named}) == ["conv", "head.0"]
    placed = {name for p in named for name in p.state_names}
    assert placed == {"conv.weight", "conv.bias", "head.0.weight", "head.0.bias"}
    for part in named:  # the key first, then what --names found stored in it
        assert len(part.names[0]) == 64 and part.names[1:] == part.state_names
    unnamed = explain_file(pte).parts
    assert {p.group("module") for p in unnamed if p.storage == "named_data"} == {"(named_data)"}
