"""ExecuTorch native packages (`.ptn`) built with `executorch.exir.native.to_native`.

`forward` reads a linear layer and two buffers of equal bytes (stored once: `aliases.json`);
with two methods, `double` reads the same linear and a constant of its own. The golden copy
(`tests/golden/ptn/two.ptn`) keeps the torch-free tests meaningful; rewrite it with
`python -m tests.native_packages`.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["GOLDEN_PTN", "write_ptn"]

GOLDEN_PTN = Path(__file__).parent / "golden" / "ptn" / "two.ptn"


def _models():
    import torch

    class Forward(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(8, 4)
            self.register_buffer("offset", torch.ones(4))
            self.register_buffer("shift", torch.ones(4))

        def forward(self, x):
            return self.linear(x) + self.offset + self.shift

    class Double(torch.nn.Module):
        def __init__(self, linear) -> None:
            super().__init__()
            self.linear = linear

        def forward(self, x):
            return self.linear(x) * 2

    torch.manual_seed(0)
    forward = Forward()
    return forward, Double(forward.linear)


def write_ptn(path: Path, methods: int = 2) -> Path:
    """A `.ptn` of one method (`forward`) or two (`forward`, `double`) at `path`."""
    import torch
    from executorch.exir.native import to_native

    forward, double = _models()
    example = (torch.randn(2, 8),)
    programs = {"forward": torch.export.export(forward, example)}
    if methods == 2:
        programs["double"] = torch.export.export(double, example)
    to_native(programs).save(str(path))
    return path


if __name__ == "__main__":
    write_ptn(GOLDEN_PTN)
