"""The model of ExecuTorch #9659 ("Remove unused parameters before serializing"), written once.

The issue this project answers filed a pt2e-quantized MLP lowered to XNNPACK;
its imports are from an older ExecuTorch, so here it is in executorch 1.5.1's
names: `XNNPACKQuantizer` from `executorch.backends.xnnpack.quantizer`, and
`prepare_pt2e`/`convert_pt2e` from torchao, calibrated once between them.
The tests (`tests.builders`) and the benchmarks (`bench.zoo`) both build it from
here. Importing this module imports torch; ExecuTorch and torchao load only
when a program is built.
"""

from __future__ import annotations

import torch
from torch.export import ExportedProgram

__all__ = ["SeedModel", "quantized_seed_program"]


class SeedModel(torch.nn.Module):
    """The issue's `SimpleModel`: two linears with ReLUs, 16 -> 1024 -> 16."""

    def __init__(self) -> None:
        super().__init__()
        self.linear1 = torch.nn.Linear(16, 1024)
        self.relu1 = torch.nn.ReLU()
        self.linear2 = torch.nn.Linear(1024, 16)
        self.relu2 = torch.nn.ReLU()

    def forward(self, x):
        return self.relu2(self.linear2(self.relu1(self.linear1(x))))


def quantized_seed_program(model: torch.nn.Module, inputs: tuple) -> ExportedProgram:
    """The issue's flow up to `torch.export`: pt2e static per-tensor quantization, non-strict.

    Args:
        model: A `SeedModel` in eval mode (its weights are the caller's seed). Not modified.
        inputs: The example inputs, also the one calibration batch.
    """
    from executorch.backends.transforms.duplicate_dynamic_quant_chain import (
        DuplicateDynamicQuantChainPass,
    )
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    graph = torch.export.export(model, inputs).module()
    quantizer = XNNPACKQuantizer()
    quantizer.set_global(get_symmetric_quantization_config(is_per_channel=False))
    prepared = prepare_pt2e(graph, quantizer)
    prepared(*inputs)  # calibrate once, as the flow does between prepare and convert
    converted = convert_pt2e(prepared)
    DuplicateDynamicQuantChainPass()(converted)
    return torch.export.export(converted, inputs, strict=False)
