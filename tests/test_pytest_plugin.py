"""The pytest plugin, run on small suites written here with `pytester`.

Each suite serializes one Linear model with an unused 128-byte buffer ("dirty")
or without it ("clean") and writes the `.pte` to the suite's directory, so the
bytes each mode wrote can be compared with what ExecuTorch writes on its own.
"""

from __future__ import annotations

import json

import pytest

from emitter_filter.ondisk.audit import audit_file

pytest_plugins = ["pytester"]

SUITE = """
import sys
from pathlib import Path

import pytest
import torch
from executorch.exir import ExecutorchBackendConfig, to_edge


class Linear(torch.nn.Module):
    def __init__(self, dead):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 3)
        if dead:
            self.register_buffer("unused", torch.arange(32, dtype=torch.float32))

    def forward(self, x):
        return self.lin(x)


def serialize(name, dead):
    exported = torch.export.export(Linear(dead), (torch.ones(2, 4),))
    Path(f"{name}.pte").write_bytes(to_edge(exported).to_executorch().buffer)


def test_dirty():
    serialize("dirty", dead=True)


def test_clean():
    serialize("clean", dead=False)


@pytest.mark.emitter_filter_exempt("keeps its dead buffer on purpose")
def test_exempt():
    serialize("exempt", dead=True)


def test_budget(pte_budget):
    pte_budget.max_dead_bytes = 0
    serialize("budget", dead=True)
    assert [p.dead_bytes for p in pte_budget.programs] == [128]


def test_broken():
    serialize("broken", dead=True)
    assert False, "broken on its own"


def test_external():
    exported = torch.export.export(Linear(dead=True), (torch.ones(2, 4),))
    config = ExecutorchBackendConfig(external_constants=True)
    manager = to_edge(exported).to_executorch(config)
    Path("external.pte").write_bytes(manager.buffer)
    manager.write_tensor_data_to_file(".")


def test_hook_untouched():
    serialize("untouched", dead=True)
    # Idle, the plugin imports none of emitter_filter's ExecuTorch side.
    assert "emitter_filter.inprocess.hook" not in sys.modules
"""

DEAD_BYTES = 128  # the unused buffer: 32 float32


@pytest.fixture(scope="module", autouse=True)
def imported(tmp_path_factory):
    """Serializes once here, so that the in-process runs import no torch module afresh.

    pytester forgets the modules an in-process run imported; torch cannot import
    some of them twice (a second TORCH_LIBRARY registration).
    """
    from emitter_filter.inprocess import hook  # noqa: F401  (one hook module for every run)

    namespace = {}
    exec(compile(SUITE, "test_suite.py", "exec"), namespace)
    namespace["serialize"](str(tmp_path_factory.mktemp("warm") / "warm"), dead=True)


@pytest.fixture
def suite(pytester):
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def _run(pytester, *args):
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)


def test_gate_fails_only_the_test_whose_program_carries_dead_bytes(suite):
    result = _run(suite, "-k", "dirty or clean", "--emitter-filter-max-dead-bytes", "0")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*1 of 1 programs this test serialized carry more than 0 dead bytes*",
            "program 1 (methods forward): 128 dead constant bytes > 0 allowed*",
            "*128 B  unused  constant[[]*[]] plan 'forward' value *",  # the FQN, first
            "emitter_filter: 2 programs audited, 128 dead bytes",
            "FAILED test_suite.py::test_dirty - emitter_filter: 1 of 1 programs*",
        ]
    )
    # Audited, not pruned: the file written still carries the dead buffer.
    assert audit_file(suite.path / "dirty.pte").dead_bytes == DEAD_BYTES


def test_gate_passes_when_the_dead_bytes_are_within_the_limit(suite):
    result = _run(suite, "-k", "dirty or clean", "--emitter-filter-max-dead-bytes", str(DEAD_BYTES))
    result.assert_outcomes(passed=2)


def test_a_test_that_fails_on_its_own_also_shows_the_finding(suite):
    result = _run(suite, "-k", "broken", "--emitter-filter-max-dead-bytes", "0")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*AssertionError: broken on its own*",
            "*- emitter_filter: dead bytes -*",
            "program 1 (methods forward): 128 dead constant bytes > 0 allowed*",
        ]
    )


def test_forced_pruning_writes_the_clean_program(suite):
    result = _run(
        suite,
        "-k",
        "dirty or clean",
        "--emitter-filter-prune",
        "--emitter-filter-max-dead-bytes",
        "0",
    )
    result.assert_outcomes(passed=2)
    assert (suite.path / "dirty.pte").read_bytes() == (suite.path / "clean.pte").read_bytes()
    from emitter_filter.inprocess import hook

    assert not hook.is_enabled()  # the run's end turned forced pruning off again


def test_report_has_one_record_per_serialized_program(suite):
    path = suite.path / "out" / "report.json"
    result = _run(
        suite,
        "-k",
        "dirty or clean or exempt or external or broken",
        "--emitter-filter-report",
        str(path),
    )
    result.assert_outcomes(passed=4, failed=1)  # a report alone gates nothing
    report = json.loads(path.read_text())
    assert (report["schema"], report["prune"], report["max_dead_bytes"]) == (
        "emitter-filter-pytest/1",
        False,
        None,
    )
    records = {r["test"].rsplit("::", 1)[1]: r for r in report["programs"]}
    assert sorted(records) == [
        "test_broken",
        "test_clean",
        "test_dirty",
        "test_exempt",
        "test_external",
    ]
    dirty, clean = records["test_dirty"], records["test_clean"]
    assert dirty["methods"] == ["forward"] and not dirty["pruned"]
    assert (dirty["dead_bytes"], clean["dead_bytes"]) == (DEAD_BYTES, 0)
    assert dirty["file_bytes"] == (suite.path / "dirty.pte").stat().st_size
    assert dirty["constant_bytes"] - clean["constant_bytes"] == DEAD_BYTES
    assert [(d["space"], d["bytes"]) for d in dirty["largest_dead"]] == [("constant", DEAD_BYTES)]
    assert dirty["bytes_before"] is None and dirty["dropped_bytes"] is None
    assert dirty["seconds"]["serialize"] > 0 and dirty["seconds"]["audit"] > 0
    assert records["test_exempt"]["exempt"] and dirty["error"] is None
    # The .ptd reaches the audit: the figures are those of the files on disk.
    external, ptds = records["test_external"], sorted(suite.path.glob("*.ptd"))
    assert ptds and external["error"] is None
    on_disk = audit_file(suite.path / "external.pte", ptds)
    assert external["file_bytes"] == on_disk.file_bytes
    assert (external["constant_bytes"], external["dead_bytes"]) == (
        on_disk.constant_bytes,
        on_disk.dead_bytes,
    )


def test_require_data_passes_programs_serialized_with_their_ptd(suite):
    # external_constants=True: ExecuTorch writes the weights to a .ptd beside the .pte.
    result = _run(suite, "-k", "external or clean", "--emitter-filter-require-data")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["emitter_filter: 2 programs audited, * dead bytes"])


def test_report_of_a_pruned_run_has_bytes_before_and_after(suite):
    path = suite.path / "report.json"
    result = _run(
        suite, "-k", "dirty", "--emitter-filter-prune", "--emitter-filter-report", str(path)
    )
    result.assert_outcomes(passed=1)
    (record,) = json.loads(path.read_text())["programs"]
    assert record["pruned"] and record["dead_bytes"] == 0
    assert record["dropped_bytes"] == DEAD_BYTES
    assert record["bytes_before"]["constant"] - record["bytes_after"]["constant"] == DEAD_BYTES
    assert record["seconds"]["prune"] > 0


def test_exempt_test_is_neither_gated_nor_pruned(suite):
    path = suite.path / "report.json"
    result = _run(
        suite,
        "-k",
        "exempt",
        "--emitter-filter-prune",
        "--emitter-filter-max-dead-bytes",
        "0",
        "--emitter-filter-report",
        str(path),
    )
    result.assert_outcomes(passed=1)
    (record,) = json.loads(path.read_text())["programs"]
    assert record["exempt"] and not record["pruned"] and record["dead_bytes"] == DEAD_BYTES


def test_budget_fixture_gates_its_test_without_any_option(suite):
    result = _run(suite, "-k", "budget")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*program 1 (methods forward): 128 dead constant bytes > 0*"])


def test_budget_fixture_overrides_the_command_line_limit(suite):
    result = _run(suite, "-k", "budget", "--emitter-filter-max-dead-bytes", "1000")
    result.assert_outcomes(failed=1)


def test_idle_plugin_changes_no_byte_and_imports_no_hook(suite):
    """Fresh processes, so that no earlier test has imported or installed the hook."""
    outcomes, written = {}, {}
    for mode, args in (("off", ("-p", "no:emitter_filter")), ("idle", ())):
        result = suite.runpytest_subprocess("-p", "no:cacheprovider", "-k", "untouched", *args)
        outcomes[mode] = {k: v for k, v in result.parseoutcomes().items() if k != "warnings"}
        written[mode] = (suite.path / "untouched.pte").read_bytes()
    assert outcomes["idle"] == outcomes["off"] == {"passed": 1, "deselected": 6}
    assert written["idle"] == written["off"]
    assert audit_file(written["idle"]).dead_bytes == DEAD_BYTES  # not pruned


def test_negative_limit_is_a_usage_error(suite):
    result = _run(suite, "--emitter-filter-max-dead-bytes", "-1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--emitter-filter-max-dead-bytes -1: expected N >= 0*"])


def test_an_executorch_the_hook_does_not_know_is_a_usage_error(suite, monkeypatch):
    from emitter_filter import _upstream

    monkeypatch.setattr(_upstream, "installed_executorch_version", lambda: "0.1.0")
    result = _run(suite, "--emitter-filter-prune")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*emitter_filter supports executorch*0.1.0*"])
    result = _run(suite, "-k", "clean")  # idle, the plugin needs no executorch check
    result.assert_outcomes(passed=1, deselected=6)
