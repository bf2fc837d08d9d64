"""`--verify` on the sets of `tests.model_sets` (programs exported separately with weights in
common, portable and lowered to XNNPACK): merge, split and share of them pass; with the
ExecuTorch install, whose pybindings `--verify` runs in.
"""

from __future__ import annotations

import pytest

from emitter_filter import cli
from tests.model_sets import SETS, export


@pytest.fixture(
    scope="module",
    params=[(s, b) for s in SETS for b in ("portable", "xnnpack")],
    ids=lambda p: f"{p[0]}-{p[1]}",
)
def programs(request, tmp_path_factory):
    name, backend = request.param
    root = tmp_path_factory.mktemp(f"{name}-{backend}")
    paths = []
    for number, model in enumerate(SETS[name]()):
        paths.append(root / f"program{number}.pte")
        paths[-1].write_bytes(export(model, backend))
    return paths


def _verified(capsys, *argv, methods: int) -> None:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert (code, err) == (0, ""), err
    assert f"verified in ExecuTorch's pybindings: {methods} method" in out, out


def test_merge_split_and_share_of_a_set_verify(programs, tmp_path, capsys):
    renames = [f"--method=m{i}={p.name}:forward" for i, p in enumerate(programs)]
    merged = tmp_path / "merged.pte"
    _verified(capsys, "merge", *programs, "-o", merged, *renames, "--verify", methods=len(programs))
    for number in range(len(programs)):
        _verified(
            capsys,
            "split",
            merged,
            "--method",
            f"m{number}",
            "-o",
            tmp_path / f"m{number}.pte",
            "--verify",
            methods=1,
        )
    _verified(
        capsys, "share", *programs, "--out", tmp_path / "shared", "--verify", methods=len(programs)
    )
    _verified(
        capsys,
        "share",
        *programs,
        "--out",
        tmp_path / "pruned",
        "--prune",
        "--dedupe",
        "--verify",
        methods=len(programs),
    )
