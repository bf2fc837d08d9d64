"""`emitter-filter demo`: the files it writes are what it says, checked here on their own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer
from torch.fx.passes.infra.pass_base import PassResult

import emitter_filter
from emitter_filter import _upstream, demo
from emitter_filter.cli import main

# The demo model's dead constants, from its definition: (shape, bytes).
LEAKS = [
    ((256, 256), 256 * 256 * 4),  # the float buffer `calibration`
    ((256,), 256 * 4),  # the float parameter `scale`, orphaned by the transform pass
    ((), 8),  # BatchNorm's int64 `num_batches_tracked`
]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """`emitter-filter demo --out DIR` run once, as a user runs it: (completed process, DIR)."""
    out = tmp_path_factory.mktemp("demo") / "out"
    command = Path(sys.executable).parent / "emitter-filter"
    result = subprocess.run(
        [str(command), "demo", "--out", str(out)], capture_output=True, text=True
    )
    return result, out


def test_demo_exits_0_and_says_the_outputs_are_identical(demo_run):
    result, _ = demo_run
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].endswith(": outputs identical")
    assert "INFO emitter_filter.demo: auditing both files" in result.stderr


def test_demo_says_nothing_on_stderr_that_is_not_its_own(demo_run):
    """torchao's library warnings, torch's deprecation and the runtime's CPU probe are not the
    user's to act on."""
    result, _ = demo_run
    others = [line for line in result.stderr.splitlines() if "emitter_filter" not in line]
    assert others == []


def test_demo_plain_file_carries_exactly_the_models_leaks(demo_run):
    _, out = demo_run
    audit = emitter_filter.audit_file(out / "model.pte")
    assert sorted((d.shape, d.nbytes) for d in audit.dead) == sorted(LEAKS)
    assert audit.dead_bytes == sum(nbytes for _, nbytes in LEAKS)


def test_demo_pruned_file_has_nothing_dead_and_is_what_prune_writes(demo_run, tmp_path):
    _, out = demo_run
    pruned = out / "model.pruned.pte"
    assert emitter_filter.audit_file(pruned).dead_bytes == 0
    emitter_filter.prune_file(out / "model.pte", tmp_path / "small.pte")
    assert (tmp_path / "small.pte").read_bytes() == pruned.read_bytes()


def test_demo_files_compute_the_same_outputs_in_the_portable_runtime(demo_run):
    _, out = demo_run
    inputs = (torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(3)),)
    plain_bytes = (out / "model.pte").read_bytes()
    pruned_bytes = (out / "model.pruned.pte").read_bytes()
    plain = _load_for_executorch_from_buffer(plain_bytes).forward(inputs)
    pruned = _load_for_executorch_from_buffer(pruned_bytes).forward(inputs)
    assert len(plain) == len(pruned) == 1
    assert torch.equal(plain[0], pruned[0])


def test_demo_prints_the_size_of_each_file_it_wrote(demo_run):
    result, out = demo_run
    for name in ("model.pte", "model.pruned.pte"):
        path = out / name
        assert f"wrote {path}" in result.stdout
        assert f"{path.stat().st_size:,} bytes" in result.stdout


def test_demo_exits_1_and_names_the_check_when_a_leak_stays(tmp_path, monkeypatch, capsys):
    # Without the pass, `scale` stays in use: the filter rightly drops only two constants.
    monkeypatch.setattr(demo, "fold_multiply_by_parameter", lambda gm: PassResult(gm, False))
    assert main(["demo", "--out", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert "emitter-filter demo: the filter dropped (name, bytes)" in captured.err
    assert "expected the leaks' [('bn.num_batches_tracked', 8)" in captured.err
    assert captured.out.splitlines()[-1].endswith(": outputs identical")


def test_demo_refuses_when_every_export_is_pruned(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "emitter_filter", "demo", "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env={**os.environ, emitter_filter.ENV_PRUNE: "1"},
    )
    assert result.returncode == 2
    assert "so the demo has no plain export to compare with" in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("missing", ["torch", "executorch"])
def test_demo_without_torch_or_executorch_says_to_install_it_in_one_line(missing, tmp_path):
    code = (
        f"import sys; sys.modules[{missing!r}] = None\n"
        "from emitter_filter.cli import main\n"
        f"sys.exit(main(['demo', '--out', {str(tmp_path / 'out')!r}]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("emitter-filter: the demo needs torch and executorch (")
    assert lines[0].endswith(_upstream.install_hint())
    assert not (tmp_path / "out").exists()


def test_default_out_dir_is_a_new_directory_in_the_given_one(tmp_path):
    assert demo.default_out_dir(tmp_path) == tmp_path / "emitter-filter-demo"
    (tmp_path / "emitter-filter-demo").mkdir()
    (tmp_path / "emitter-filter-demo-2").write_text("")
    assert demo.default_out_dir(tmp_path) == tmp_path / "emitter-filter-demo-3"
