"""`diff OLD_DIR NEW_DIR`: two sets of programs, matched by file name, without torch."""

from __future__ import annotations

import json
import shutil

import pytest

from emitter_filter.cli import main
from emitter_filter.ondisk.diff_set import diff_sets
from emitter_filter.ondisk.share import share_files
from tests.files import GOLDEN, saved

pytestmark = pytest.mark.filetools


@pytest.fixture
def release(tmp_path):
    """Last release's files: the tests' plain and clean programs, apart."""
    old = tmp_path / "old"
    old.mkdir()
    for case in ("plain", "clean"):
        shutil.copyfile(saved(GOLDEN / case / "dirty")[0], old / f"{case}.pte")
    return old


def test_programs_are_matched_by_file_name_with_their_shared_ptd(release, tmp_path):
    share_files(sorted(release.glob("*.pte")), tmp_path / "new", min_bytes=1)
    result = diff_sets(release, tmp_path / "new")
    assert [name for name, _ in result.programs] == ["clean.pte", "plain.pte"]
    assert result.added == result.removed == ()
    files = lambda d: sum(p.stat().st_size for p in d.iterdir())  # noqa: E731
    assert (result.old_bytes, result.new_bytes) == (files(release), files(tmp_path / "new"))
    # Each program now reads its weights from shared.ptd: the constants moved to it.
    for _, diff in result.programs:
        assert diff.new_bytes > 0 and any(
            "external" in c.new.storage for c in diff.changes if c.new is not None
        )


def test_added_and_removed_programs_and_the_growth_gate(release, tmp_path, capsys):
    new = tmp_path / "new"
    new.mkdir()
    shutil.copyfile(release / "plain.pte", new / "plain.pte")
    shutil.copyfile(saved(GOLDEN / "mutated" / "dirty")[0], new / "mutated.pte")
    assert main(["diff", str(release), str(new), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["added"] == ["mutated.pte"] and document["removed"] == ["clean.pte"]
    assert list(document["programs"]) == ["plain.pte"]
    grew = (new / "mutated.pte").stat().st_size > (release / "clean.pte").stat().st_size
    code = main(["diff", str(release), str(new), "--max-growth", "0"])
    assert code == (1 if grew else 0)
    assert main(["diff", str(release), str(new / "plain.pte")]) == 2
    assert f"{release} is a directory but {new / 'plain.pte'} is a file" in capsys.readouterr().err
    assert main(["diff", str(tmp_path / "gone"), str(release)]) == 2
    assert (
        f"{release} is a directory but {tmp_path / 'gone'} is not there" in capsys.readouterr().err
    )
    assert main(["diff", str(release), str(new), "--old-data", "x.ptd"]) == 2
    assert (
        "--old-data, --new-data and the --*-names options take two .pte files"
        in capsys.readouterr().err
    )
    assert main(["diff", str(release), str(tmp_path)]) == 2
    assert "no .pte file" in capsys.readouterr().err
