"""`explain A.pte B.pte ...`: a set of files explained as one, without torch.

Separately exported programs of the tests' model (the golden `plain` and `clean` programs
store the same weights) before and after `share`.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

from emitter_filter.cli import main
from emitter_filter.ondisk.explain_page import render_explain_page
from emitter_filter.ondisk.explain_set import explain_set
from emitter_filter.ondisk.share import share_files
from tests.browser import needs_chromium, run_chromium
from tests.files import GOLDEN, saved

pytestmark = pytest.mark.filetools


@pytest.fixture
def programs(tmp_path):
    paths = []
    for case in ("plain", "clean"):
        pte, _ = saved(GOLDEN / case / "dirty")
        paths.append(tmp_path / f"{case}.pte")
        shutil.copyfile(pte, paths[-1])
    return paths


def _between_files(explanation) -> int:
    """Bytes the set stores again in another file: its duplicated parts whose copies are in
    other files."""
    return sum(
        p.nbytes
        for p in explanation.parts
        if p.status == "duplicated"
        and any(not c.startswith(p.file.rsplit("/", 1)[-1] + ":") for c in p.copies)
    )


def test_the_parts_add_up_to_the_files_and_what_share_stores_once_is_duplicated(programs, tmp_path):
    explanation = explain_set(programs, min_bytes=1)  # the golden programs' weights are small
    assert explanation.file_bytes == sum(p.stat().st_size for p in programs)
    assert sum(p.nbytes for p in explanation.parts) == explanation.file_bytes
    report = share_files(programs, tmp_path / "shared", min_bytes=1)
    assert report.shared_bytes > 0 and _between_files(explanation) == report.shared_bytes
    after = explain_set(
        [tmp_path / "shared" / p.name for p in programs],
        [tmp_path / "shared" / "shared.ptd"],
        min_bytes=1,
    )
    assert _between_files(after) == 0
    assert (
        sum(p.nbytes for p in after.parts)
        == after.file_bytes
        == sum(f.stat().st_size for f in (tmp_path / "shared").iterdir())
    )
    # The shared .ptd's entries once, read by both programs.
    ptd = [p for p in after.parts if p.file.endswith("shared.ptd") and p.readers]
    assert ptd and all(
        {m.split(":")[0] for m in p.methods} == {"plain.pte", "clean.pte"} for p in ptd
    )


def test_the_cli_explains_a_set_as_text_json_and_a_page(programs, tmp_path, capsys):
    assert main(["explain", *map(str, programs), "--top", "100", "--min-bytes", "1"]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"2 programs: {sum(p.stat().st_size for p in programs):,} bytes")
    assert re.search(r"clean\.pte:constant\[\d+\]\s+duplicated", text)
    assert main(["explain", *map(str, programs), "--json", "--html", str(tmp_path / "s.html")]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [p["path"] for p in document["programs"]] == list(map(str, programs))
    assert sum(p["bytes"] for p in document["parts"]) == document["file_bytes"]


def test_a_set_refuses_names_node_data_and_a_file_given_twice(programs, capsys):
    for option in (["--names", "x.pt2"], ["--node-data", "x.json"]):
        assert main(["explain", *map(str, programs), *option]) == 2
        assert "takes one program, not a set" in capsys.readouterr().err
    assert main(["explain", str(programs[0]), str(programs[0])]) == 2
    assert "given twice" in capsys.readouterr().err


@needs_chromium
def test_the_page_of_a_set_has_a_level_per_program(programs, tmp_path):
    page = tmp_path / "set.html"
    page.write_text(render_explain_page(explain_set(programs)))
    dom = run_chromium(
        tmp_path, "--virtual-time-budget=5000", "--dump-dom", url=page.as_uri()
    ).stdout
    assert 'data-drawn="yes"' in dom
    # Each program's cells are one block: the boxes around each file's cells do not overlap.
    cells = re.findall(
        r'data-file="([^"]*)"[^>]*style="left: ([\d.]+)px; top: ([\d.]+)px; '
        r"width: ([\d.]+)px; height: ([\d.]+)px;",
        dom,
    )
    assert len(cells) == len(explain_set(programs).parts)
    boxes = {}
    for file, *box in cells:
        left, top, width, height = map(float, box)
        x0, y0, x1, y1 = boxes.get(file, (left, top, left + width, top + height))
        boxes[file] = (min(x0, left), min(y0, top), max(x1, left + width), max(y1, top + height))
    (a, b) = boxes.values()
    overlap = min(a[2], b[2]) - max(a[0], b[0]), min(a[3], b[3]) - max(a[1], b[1])
    assert len(boxes) == 2 and min(overlap) <= 1e-2, boxes


@needs_chromium
def test_the_page_of_a_set_names_each_programs_file_on_its_boxes(programs, tmp_path):
    page = tmp_path / "set.html"
    page.write_text(render_explain_page(explain_set(programs)))
    dom = run_chromium(
        tmp_path, "--virtual-time-budget=5000", "--dump-dom", url=page.as_uri()
    ).stdout
    labels = re.findall(r'class="cell"[^>]*>([^<]+)</div>', dom)
    for program in programs:
        assert any(label.startswith(f"{program.name}: ") for label in labels), labels
