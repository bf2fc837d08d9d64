"""`pte_budget.check_size`: a test fails when a `.pte` it wrote outgrows the committed budget.

A suite written here with `pytester` (run in a subprocess: torch cannot be
imported twice in one process) writes a `.pte`, records its budget, writes a
larger one, and checks it with the fixture.
"""

from __future__ import annotations

pytest_plugins = ["pytester"]

SUITE = """
from pathlib import Path

import torch
from executorch.exir import to_edge


class Linear(torch.nn.Module):
    def __init__(self, extra):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 3)
        self.extra = torch.nn.Linear(4, 64) if extra else None

    def forward(self, x):
        y = self.lin(x)
        return y if self.extra is None else (y, self.extra(x))


def write(extra):
    exported = torch.export.export(Linear(extra), (torch.ones(2, 4),))
    Path("model.pte").write_bytes(to_edge(exported).to_executorch().buffer)


def test_record():
    write(extra=False)
    from emitter_filter.cli import main
    assert main(["budget", "write", "model.pte", "-o", "pte-budget.json"]) == 0


def test_within(pte_budget):
    write(extra=False)
    (check,) = pte_budget.check_size("model.pte")
    assert not check.over


def test_grown(pte_budget):
    write(extra=True)
    pte_budget.check_size("model.pte")
"""


def test_a_test_whose_pte_outgrows_the_budget_fails_naming_the_new_tensors(pytester):
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*model.pte: * bytes, budget * (allowed *): over budget*",
            "*added    constant[[]*]  (FLOAT (float32) [[]64, 4[]])*",
            "FAILED test_suite.py::test_grown*",
        ]
    )


MEMORY_SUITE = """
from pathlib import Path

import torch
from executorch.exir import to_edge


def write(rows):
    torch.manual_seed(0)
    exported = torch.export.export(torch.nn.Linear(4, 64), (torch.ones(rows, 4),))
    Path("model.pte").write_bytes(to_edge(exported).to_executorch().buffer)


def test_record():
    write(rows=2)
    from emitter_filter.cli import main
    assert main(["budget", "write", "model.pte", "-o", "pte-budget.json"]) == 0


def test_more_rows(pte_budget):
    write(rows=512)
    pte_budget.check_size("model.pte", tolerance_percent=5)
"""


def test_a_test_whose_method_plans_more_memory_fails_naming_it(pytester):
    """The same weights on 512 rows where there were 2: the file's bytes within the
    tolerance, its planned activations not."""
    pytester.makepyfile(test_suite=MEMORY_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*model.pte: * bytes, budget * (allowed *): within budget*",
            "*model.pte: over budget: forward: planned memory * B, budget * B (allowed *)*",
            "FAILED test_suite.py::test_more_rows*",
        ]
    )
