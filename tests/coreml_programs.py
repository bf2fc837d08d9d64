"""A Core ML multifunction program, exported with coremltools on this machine.

Two methods of one Linear (`forward`, `prefill`) lowered with `CoreMLPartitioner`:
`CoreMLBackend.preprocess_multimethod` stores the model once as named data and gives
each method a `CMJR` reference. The export takes ~15 s and its key holds a uuid, so
`tests/golden/coreml/multifunction.pte` (6 KB) is the file the default run reads;
`python -m tests.coreml_programs` writes it again.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from tests.files import GOLDEN

COREML_GOLDEN = GOLDEN / "coreml" / "multifunction.pte"


class _Linear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x)


def export_multifunction() -> bytes:
    """The program's bytes: `forward` on 2 rows, `prefill` on 5, one shared model."""
    from executorch.backends.apple.coreml.partition import CoreMLPartitioner
    from executorch.exir import to_edge_transform_and_lower

    model = _Linear()
    programs = {
        "forward": torch.export.export(model, (torch.ones(2, 4),)),
        "prefill": torch.export.export(model, (torch.ones(5, 4),)),
    }
    edge = to_edge_transform_and_lower(programs, partitioner=[CoreMLPartitioner()])
    return edge.to_executorch().buffer


if __name__ == "__main__":
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else COREML_GOLDEN
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(export_multifunction())
