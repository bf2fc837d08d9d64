"""A `.ptd` given where a program is expected, and a `.pte` where a `.ptd` is: every command
says what the file is and how to give it, in one line (the reader decides it, once)."""

from __future__ import annotations

import shutil

import pytest

from emitter_filter import cli
from tests.files import GOLDEN

pytestmark = pytest.mark.filetools

EXTERNAL = GOLDEN / "external" / "dirty"

AS_PROGRAM = [
    ["audit", "{ptd}"],
    ["explain", "{ptd}"],
    ["prune", "{ptd}", "-o", "{out}/o.pte"],
    ["diff", "{pte}", "{ptd}"],
    ["share", "{pte}", "{ptd}", "--out", "{out}/shared"],
    ["merge", "{ptd}", "-o", "{out}/o.pte"],
    ["merge", "{pte}", "{ptd}", "-o", "{out}/o.pte", "--inline"],
    ["split", "{ptd}", "-o", "{out}/o.pte", "--method", "forward"],
    ["budget", "write", "{ptd}", "-o", "{out}/budget.json"],
    ["verify", "{ptd}", "{ptd}"],
]


@pytest.fixture
def files(tmp_path):
    """weights.ptd alone in a directory (no program beside it), and a program."""
    (tmp_path / "out").mkdir()
    ptd = shutil.copy(EXTERNAL / "_default_external_constant.ptd", tmp_path / "weights.ptd")
    pte = shutil.copy(EXTERNAL / "model.pte", tmp_path / "model.pte")
    return {"ptd": ptd, "pte": pte, "out": tmp_path / "out"}


@pytest.mark.parametrize("argv", AS_PROGRAM, ids=lambda a: " ".join(a[:2]))
def test_a_ptd_given_as_a_program_is_named_a_data_file_to_give_with_data(argv, files, capsys):
    code = cli.main([word.format(**files) for word in argv])
    err = capsys.readouterr().err
    assert code == 2
    assert err == (
        f"emitter-filter: {files['ptd']}: a .ptd data file, not a program: give it with --data, "
        "beside the .pte that loads it\n"
    )


def test_a_program_given_as_data_is_named_a_program(files, capsys):
    code = cli.main(["audit", str(files["pte"]), "--data", str(files["pte"])])
    assert code == 2
    assert capsys.readouterr().err == (
        f"emitter-filter: {files['pte']}: a .pte program, not a .ptd data file: give it as a "
        "program, and its .ptd with --data\n"
    )
