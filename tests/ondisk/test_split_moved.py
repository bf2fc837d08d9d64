"""`split` where the kept methods pack longer than the input's program (issue 55, finding 8).

ExecuTorch's training programs (`dnf_v5`, `dnf_v7` among them) were packed to end at
their segment base; the program `split` packs for their methods is a few bytes
longer, and `split` refused it ("the program without the other methods does not end
before the segment data"). A new name longer than the old does the same to any
program: the segment data is moved on, keeping its alignment, as `merge` places it.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from emitter_filter.cli import main
from emitter_filter.ondisk.analyse.validate import validate_file
from emitter_filter.ondisk.read.read_pte import read_pte, read_pte_program
from emitter_filter.program.reachability import DataSpace
from tests.files import GOLDEN
from tests.layouts import with_program_changed

#: Longer than any slack before a segment base: the program cannot end before it.
LONG = "forward_" + "x" * 600


def _constants(path: Path) -> list[bytes]:
    data, pte = path.read_bytes(), read_pte(str(path))
    return [
        data[e.offset : e.offset + e.nbytes]
        for _, e in sorted(pte.entries[DataSpace.CONSTANT].items())
    ]


@pytest.mark.filetools
def test_split_moves_the_segment_data_when_the_program_kept_ends_past_it(tmp_path, capsys):
    pte = (GOLDEN / "plain" / "dirty" / "model.pte").read_bytes()

    def with_training_method(program) -> None:
        # forward's training method: kept, and renamed, with it.
        plans = program.executionPlan
        training = copy.deepcopy(plans[0])
        training.name = b"__et_training_fqn_forward"
        plans.append(training)

    src = tmp_path / "a.pte"
    src.write_bytes(with_program_changed(pte, with_training_method))
    base = read_pte_program(str(src)).pte.segment_base_offset
    out = tmp_path / "s.pte"
    assert main(["split", str(src), "--method", f"{LONG}=forward", "-o", str(out)]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith(f"{src} -> {out}: {src.stat().st_size:,} -> ")
    read = read_pte_program(str(out))
    assert [p.name for p in read.pte.plans] == [LONG, f"__et_training_fqn_{LONG}"]
    assert read.pte.segment_base_offset > base
    assert validate_file(out).valid
    assert read.pte.segment_base_offset % (base & -base) == 0  # the alignment it had
    pruned = tmp_path / "p.pte"
    assert main(["prune", str(src), "-o", str(pruned)]) == 0
    assert _constants(out) == _constants(pruned)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pte", "p.pte", "s.pte"]


@pytest.mark.slow
def test_a_training_program_split_under_a_longer_name_trains_as_its_input(tmp_path):
    """A program ExecuTorch's training API writes (`forward` and its `__et_training_*`
    methods), split under a name that makes the program longer: the training runtime
    finds the renamed method's training methods and computes the input's loss."""
    torch = pytest.importorskip("torch")
    from executorch.exir import to_edge
    from executorch.extension.training import _load_for_executorch_for_training_from_buffer
    from torch.export.experimental import _export_forward_backward

    class Train(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(3, 3)
            self.loss = torch.nn.CrossEntropyLoss()

        def forward(self, x, y):
            return self.loss(self.linear(x).softmax(dim=0), y)

    torch.manual_seed(0)
    inputs = (torch.tensor([0.5, -1.0, 2.0]), torch.tensor([1.0, 0.0, 0.0]))
    exported = _export_forward_backward(torch.export.export(Train(), inputs, strict=True))
    src = tmp_path / "train.pte"
    src.write_bytes(to_edge(exported).to_executorch().buffer)
    out = tmp_path / "s.pte"
    assert main(["split", str(src), "--method", f"{LONG}=forward", "-o", str(out)]) == 0
    assert (
        read_pte_program(str(out)).pte.segment_base_offset
        > read_pte_program(str(src)).pte.segment_base_offset
    )
    before = _load_for_executorch_for_training_from_buffer(src.read_bytes())
    after = _load_for_executorch_for_training_from_buffer(out.read_bytes())
    expected = before.forward_backward("forward", inputs)
    got = after.forward_backward(LONG, inputs)
    assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))
    assert [
        torch.equal(a, b)
        for a, b in zip(
            before.named_gradients().values(), after.named_gradients().values(), strict=True
        )
    ] == [True, True]
