"""On disk, `--names FILE` names constant-segment entries as the in-process report does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from emitter_filter.cli import main
from emitter_filter.ondisk.audit import audit_file
from emitter_filter.ondisk.read.state_file import read_state_file
from tests.files import CASES
from tests.programs import _inputs, _model

REPO = Path(__file__).resolve().parents[2]


def _names(entries) -> list:
    return [(d.space, d.index, [(n.name, n.kind, n.plan) for n in d.names]) for d in entries]


@pytest.fixture(scope="module")
def pt2(tmp_path_factory) -> dict[str, Path]:
    """Each case's model, exported and saved with `torch.export.save`."""
    base = tmp_path_factory.mktemp("pt2")
    paths = {}
    for case in CASES:
        paths[case] = base / f"{case}.pt2"
        torch.export.save(torch.export.export(_model(case), _inputs(case)), paths[case])
    return paths


@pytest.mark.parametrize("case", CASES)
def test_names_from_a_pt2_are_the_in_process_reports(built, pt2, case):
    state = read_state_file(pt2[case])
    report = audit_file(built[case].pte, built[case].ptds, names=state)
    assert _names(report.dead) == _names(built[case].report.dropped)
    assert all(d.names for d in report.dead)


def test_without_names_constant_segment_entries_have_none(built):
    report = audit_file(built["plain"].pte)
    assert [d.names for d in report.dead] == [(), ()]
    assert [d.label() for d in report.dead] == ["constant[3]", "constant[4]"]


def test_names_from_an_etrecord_are_the_same(tmp_path):
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    import emitter_filter

    exported = torch.export.export(_model("plain"), _inputs("plain"))
    edge = to_edge_transform_and_lower(
        exported, partitioner=[XnnpackPartitioner()], generate_etrecord=True
    )
    manager = edge.to_executorch()
    manager.save(str(tmp_path / "model.pte"))
    manager.get_etrecord().save(str(tmp_path / "etrecord.bin"))
    report = audit_file(tmp_path / "model.pte", names=tmp_path / "etrecord.bin")
    assert {n.name for d in report.dead for n in d.names} == {"unused", "odd"}
    pruned = torch.export.export(_model("plain"), _inputs("plain"))
    in_process = emitter_filter.report(
        to_edge_transform_and_lower(pruned, partitioner=[XnnpackPartitioner()]).to_executorch(
            emitter_filter.ExecutorchBackendConfig(prune_constants=True)
        )
    )
    assert _names(report.dead) == _names(in_process.dropped)


def test_audit_json_and_table_show_the_names(built, pt2, capsys):
    assert main(["audit", str(built["plain"].pte), "--names", str(pt2["plain"]), "--json"]) == 0
    dead = json.loads(capsys.readouterr().out)["dead"]
    assert [(d["names"], d["readable_by_name"]) for d in dead] == [
        ([{"name": "unused", "kind": "buffer", "plan": "forward"}], False),
        ([{"name": "odd", "kind": "buffer", "plan": "forward"}], False),
    ]
    assert main(["audit", str(built["plain"].pte), "--names", str(pt2["plain"])]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[-1] for line in lines[-2:]] == ["unused", "odd"]


def test_the_table_marks_an_external_constant_readable_by_name(built, capsys):
    case = built["external"]
    assert main(["audit", str(case.pte), *[a for p in case.ptds for a in ("--data", str(p))]]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2].endswith("unused (readable by name)")


def test_prune_json_shows_the_names(built, pt2, tmp_path, capsys):
    out = tmp_path / "model.pte"
    code = main(
        ["prune", str(built["plain"].pte), "-o", str(out), "--json", "--names", str(pt2["plain"])]
    )
    assert code == 0
    dropped = json.loads(capsys.readouterr().out)["dropped"]
    assert [[n["name"] for n in d["names"]] for d in dropped] == [["unused"], ["odd"]]
    assert out.read_bytes() == built["plain"].pruned_pte.read_bytes()


def test_a_names_file_that_is_neither_is_exit_2(built, tmp_path, capsys):
    bad = tmp_path / "weights.bin"
    bad.write_bytes(b"not a zip")
    assert main(["audit", str(built["plain"].pte), "--names", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{bad}: not a .pt2 or an ETRecord" in err


def test_a_plain_audit_from_the_command_line_does_not_import_torch(built):
    code = (
        "import sys\n"
        "from emitter_filter.cli import main\n"
        f"assert main(['audit', {str(built['plain'].pte)!r}]) == 0\n"
        "assert 'torch' not in sys.modules, 'audit imported torch'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr


def test_keep_with_names_keeps_a_constant_segment_entry_as_in_process(built, pt2, tmp_path):
    import dataclasses

    import emitter_filter
    from tests.programs import _config, _lower

    config = dataclasses.replace(
        _config("plain", emitter_filter.ExecutorchBackendConfig),
        prune_constants=True,
        keep_constants=("unused",),
    )
    kept = _lower(_model("plain"), "plain").to_executorch(config).buffer
    out = tmp_path / "model.pte"
    assert (
        main(
            [
                "prune",
                str(built["plain"].pte),
                "-o",
                str(out),
                "--names",
                str(pt2["plain"]),
                "--keep",
                "unused",
            ]
        )
        == 0
    )
    assert out.read_bytes() == kept
    assert kept not in (built["plain"].pte.read_bytes(), built["plain"].pruned_pte.read_bytes())
