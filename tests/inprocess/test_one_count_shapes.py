"""One count where one stored constant is read in two shapes (issue: one count of every byte).

The emitter stores equal bytes once (it looks constants up by their bytes' hash): a
buffer `forward` never reads that holds a used weight's bytes in another shape is
one constant entry read by a live value and a dead one, as in ExecuTorch's
KeywordSpotting example. `share` gives each layout its own key on one `.ptd`
segment. Every tool must count that segment live, and prune must free only what is
unread (`tests.one_count.check_one_count`); the shared and pruned programs still
compute what the originals compute.
"""

from __future__ import annotations

import torch
from executorch.exir import to_edge
from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer

from emitter_filter.ondisk.audit import audit_file
from emitter_filter.ondisk.audit_set import audit_set
from emitter_filter.ondisk.explain import explain_file
from emitter_filter.ondisk.prune import prune_file
from emitter_filter.ondisk.share import share_files
from tests.one_count import check_one_count

INPUT = (torch.randn(2, 64, generator=torch.Generator().manual_seed(3)),)


class Reshaped(torch.nn.Module):
    """A backbone whose weight's bytes an unread buffer repeats as [64, 64, 1, 1], plus
    an unread buffer of its own bytes and a head of `outputs`."""

    def __init__(self, backbone: torch.nn.Linear, outputs: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = torch.nn.Linear(64, outputs)
        self.register_buffer("as_conv", backbone.weight.detach().clone().reshape(64, 64, 1, 1))
        self.register_buffer("calibration", torch.randn(32, 32))

    def forward(self, x):
        return self.head(self.backbone(x).relu())


def _programs(root) -> list:
    torch.manual_seed(0)
    backbone = torch.nn.Linear(64, 64)
    paths = []
    for number, outputs in enumerate((10, 3)):
        exported = torch.export.export(Reshaped(backbone, outputs).eval(), INPUT)
        path = root / f"head{number}.pte"
        path.write_bytes(to_edge(exported).to_executorch().buffer)
        paths.append(path)
    return paths


def _forward(pte, ptd=None):
    program = pte.read_bytes()
    data = None if ptd is None else ptd.read_bytes()  # both kept alive while the module runs
    module = (
        _load_for_executorch_from_buffer(program)
        if data is None
        else _load_for_executorch_from_buffer(program, data)
    )
    return module.forward(INPUT)[0]


def test_a_constant_read_in_two_shapes_counts_once_everywhere(tmp_path):
    originals = _programs(tmp_path)
    audit = audit_file(originals[0])
    # The weight's entry is read by the live linear and the dead buffer: live, 0 dead
    # bytes; only the calibration buffer's 4,096 bytes are dead.
    assert audit.dead_bytes == 32 * 32 * 4 and audit.dead_values >= 2
    parts = [p for p in explain_file(originals[0]).parts if len(p.layouts) > 1]
    assert [p.status for p in parts] == ["live"]
    assert {shape for _, shape in parts[0].layouts} == {(64, 64), (64, 64, 1, 1)}
    assert parts[0].shape == (64, 64)  # the live reader's layout first
    for number, original in enumerate(originals):
        check_one_count(original, [], tmp_path / f"pruned-original{number}")

    out = tmp_path / "shared"
    report = share_files(originals, out)
    ptd = out / "shared.ptd"
    assert report.shared_contents > 0
    assert report.dead_bytes == 2 * audit.dead_bytes
    outputs = [out / p.name for p in originals]
    assert audit_set(outputs, [ptd]).dead_bytes == report.dead_bytes
    for number, (original, shared) in enumerate(zip(originals, outputs, strict=True)):
        check_one_count(shared, [ptd], tmp_path / f"pruned-shared{number}")
        # One .ptd segment under two keys (the two layouts), read by the live one: live.
        explained = explain_file(shared, [ptd])
        two_keys = [p for p in explained.parts if p.storage == "external" and len(p.names) == 2]
        assert two_keys and all(p.status == "live" for p in two_keys)
        pruned = tmp_path / f"pruned-shared{number}" / shared.name
        want = _forward(original)
        assert torch.equal(_forward(shared, ptd), want)
        assert torch.equal(_forward(pruned, tmp_path / f"pruned-shared{number}" / ptd.name), want)


def test_prune_reports_the_bytes_its_outputs_lose(tmp_path):
    originals = _programs(tmp_path)
    share_files(originals, tmp_path / "shared")
    shared, ptd = tmp_path / "shared" / originals[0].name, tmp_path / "shared" / "shared.ptd"
    (tmp_path / "p").mkdir()
    report = prune_file(shared, tmp_path / "p" / "x.pte", [ptd], tmp_path / "p")
    before = audit_file(shared, [ptd])
    after = audit_file(tmp_path / "p" / "x.pte", [tmp_path / "p" / "shared.ptd"])
    assert sum(d.nbytes for d in report.dropped) == before.dead_bytes
    assert before.constant_bytes - after.constant_bytes == before.dead_bytes
