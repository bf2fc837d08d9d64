"""`explain --html`: one self-contained page, drawn by headless Chromium offline.

The browser tests run Chromium as `tests.browser` does (offline, skipped where it is
missing); the page is also checked for external URLs (a check shown to catch one).
"""

from __future__ import annotations

import html
import json
import re
import struct
import zlib
from collections import Counter
from pathlib import Path

import pytest

from emitter_filter.cli import main
from emitter_filter.ondisk.explain import explain_file
from emitter_filter.ondisk.explain_page import COLOURS, render_explain_page
from tests.browser import external_urls, needs_chromium, run_chromium
from tests.files import GOLDEN, saved
from tests.layouts import build_constants

pytestmark = pytest.mark.filetools

WINDOW = (1200, 900)
CELL = re.compile(
    r'<div class="cell" data-bytes="(\d+)" data-label="([^"]*)" data-status="(\w+)"'
    r'[^>]*style="left: ([\d.]+)px; top: ([\d.]+)px; width: ([\d.]+)px; '
    r"height: ([\d.]+)px;"
)


@pytest.fixture
def page(tmp_path) -> Path:
    """A page for a file with live, dead, duplicated and padding bytes."""
    same = bytes(range(1, 129))
    constants = [same, bytes(range(50, 114)), same, bytes(i % 250 + 1 for i in range(1024))]
    pte = tmp_path / "model.pte"
    pte.write_bytes(build_constants(constants, frozenset({1})))
    out = tmp_path / "model.html"
    assert main(["explain", str(pte), "--html", str(out)]) == 0
    return out


def test_the_page_is_one_file_with_nothing_to_fetch(page):
    text = page.read_text()
    assert external_urls(text) == []
    assert "<script src" not in text and "<link" not in text and "<img" not in text


def test_the_url_check_catches_a_page_that_would_fetch():
    for bad in (
        '<script src="https://cdn.example/d3.js">',
        '<link href="//fonts.example/x">',
        "<style>body { background: url(x.png) }</style>",
        "@import 'x.css';",
    ):
        assert external_urls(bad), bad


def test_a_name_cannot_end_the_pages_script_early(tmp_path):
    pte, ptds = saved(GOLDEN / "plain" / "dirty")
    explanation = explain_file(pte, ptds)
    evil = explanation.parts[0].__class__(
        **{**explanation.parts[0].__dict__, "names": ("</script><b>x",)}
    )
    page = render_explain_page(
        explanation.__class__(
            explanation.path,
            explanation.files,
            (evil, *explanation.parts[1:]),
            (),
            explanation.audit,
        )
    )
    assert "</script><b>" not in page


@needs_chromium
def test_the_treemaps_areas_are_the_bytes_in_headless_chromium(page, tmp_path):
    dom = run_chromium(
        tmp_path, "--virtual-time-budget=5000", "--dump-dom", url=page.as_uri(), window=WINDOW
    ).stdout
    assert 'data-drawn="yes"' in dom, "the page's script did not draw"
    width = float(re.search(r'id="map" data-width="([\d.]+)"', dom)[1])
    height = float(re.search(r'data-height="([\d.]+)"', dom)[1])
    cells = [
        (int(b), label, status, *map(float, box)) for b, label, status, *box in CELL.findall(dom)
    ]
    explanation = explain_file(page.with_suffix(".pte"))
    assert sorted((c[0], c[1]) for c in cells) == sorted(
        (p.nbytes, p.label) for p in explanation.parts
    )
    assert {c[2] for c in cells} == {"live", "dead", "duplicated", "padding"}
    total = sum(c[0] for c in cells)
    for nbytes, label, _, left, top, w, h in cells:
        # Coordinates are written to 3 decimals: the area is right to that rounding.
        assert w * h == pytest.approx(nbytes / total * width * height, abs=(w + h) * 1e-3 + 1e-3)
        assert left + w <= width + 1e-2 and top + h <= height + 1e-2, label


class _Masks(dict):
    """Per-length masks of every byte's low 7 bits or high bit, for bytewise addition."""

    def __init__(self, byte: int) -> None:
        super().__init__()
        self.byte = byte

    def __missing__(self, length: int) -> int:
        self[length] = int.from_bytes(bytes([self.byte]) * length, "big")
        return self[length]


_LOW7, _HIGH1 = _Masks(0x7F), _Masks(0x80)


def _png_pixels(data: bytes) -> tuple[int, int, Counter]:
    """(width, height, colours of every 4th pixel of each row) of an 8-bit RGB(A) PNG."""
    width, height, depth, colour = struct.unpack(">IIBB", data[16:26])
    assert depth == 8 and colour in (2, 6), (depth, colour)
    chunks, at = [], 8
    while at < len(data):
        (length,), kind = struct.unpack(">I", data[at : at + 4]), data[at + 4 : at + 8]
        if kind == b"IDAT":
            chunks.append(data[at + 8 : at + 8 + length])
        at += 12 + length
    raw, step = zlib.decompress(b"".join(chunks)), 3 if colour == 2 else 4
    stride, previous, colours = width * step, bytearray(width * step), Counter()
    for row in range(height):
        start = row * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        if kind == 2:  # "Up", most of Chromium's rows: bytewise sums of two big integers
            a, b = int.from_bytes(line, "big"), int.from_bytes(previous, "big")
            low = (a & _LOW7[stride]) + (b & _LOW7[stride])
            line = bytearray((low ^ ((a ^ b) & _HIGH1[stride])).to_bytes(stride, "big"))
            kind = 0
        for i in range(stride if kind else 0):
            left = line[i - step] if i >= step else 0
            up, corner = previous[i], previous[i - step] if i >= step else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                near = min(
                    (abs(p - left), 0, left), (abs(p - up), 1, up), (abs(p - corner), 2, corner)
                )
                line[i] = (line[i] + near[2]) & 255
        colours.update(tuple(line[i : i + 3]) for i in range(0, stride, step * 4))
        previous = line
    return width, height, colours


@needs_chromium
def test_the_screenshot_shows_each_status_colour(page, tmp_path):
    shot = tmp_path / "shot.png"
    run_chromium(
        tmp_path,
        "--virtual-time-budget=5000",
        f"--screenshot={shot}",
        url=page.as_uri(),
        window=WINDOW,
    )
    width, height, seen = _png_pixels(shot.read_bytes())
    assert (width, height) == WINDOW
    explanation = explain_file(page.with_suffix(".pte"))
    # The map is 560 px high and about the window wide; a quarter of each row is sampled.
    # Half of a status's share of it must show its colour: the legend's swatches do not.
    samples = 560 * (WINDOW[0] - 40) / 4
    for status in ("live", "dead", "duplicated", "padding"):
        share = (
            sum(p.nbytes for p in explanation.parts if p.status == status) / explanation.file_bytes
        )
        colour = COLOURS[status]
        rgb = tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
        assert seen[rgb] > share * samples / 2, f"{status} ({colour}): {seen[rgb]} pixels"


# Appended to a copy of the page: after its script has drawn, measures what a reader sees.
_MEASURE = """<script>
const width = document.documentElement.clientWidth;
const inside = e => e.getBoundingClientRect().right <= width + 0.5;
const labelled = [...document.querySelectorAll(".cell")].filter(c => c.textContent);
document.body.dataset.measure = JSON.stringify({
  labelled: labelled.length,
  clipped: labelled.filter(c => c.scrollWidth > c.clientWidth || c.scrollHeight > c.clientHeight)
                   .map(c => c.dataset.label),
  title: inside(document.querySelector("h1")) && document.querySelector("h1").scrollWidth
         <= document.querySelector("h1").clientWidth,
  keys: [...document.querySelectorAll(".key")].map(k => k.getBoundingClientRect().width),
  legend: [...document.querySelectorAll(".entry")].every(inside),
  page: document.documentElement.scrollWidth <= width,
});
</script>"""


@needs_chromium
@pytest.mark.parametrize("window", [(600, 900), (1600, 900)])
def test_labels_fit_their_cells_and_the_header_fits_the_window(tmp_path, window):
    # Many parts of very different sizes, and a long file name, as real files have.
    constants = [
        bytes((i + j) % 251 + 1 for j in range(16 * (1 + (i * 37) % 64))) for i in range(40)
    ]
    pte = tmp_path / ("a_long_model_name_from_a_real_project_quantized_int8_" * 2 + "final.pte")
    pte.write_bytes(build_constants(constants, frozenset(range(0, 40, 3))))
    out = tmp_path / "page.html"
    assert main(["explain", str(pte), "--html", str(out)]) == 0
    out.write_text(out.read_text().replace("</body>", _MEASURE + "</body>"))
    dom = run_chromium(
        tmp_path, "--virtual-time-budget=5000", "--dump-dom", url=out.as_uri(), window=window
    ).stdout
    measure = json.loads(html.unescape(re.search(r'data-measure="([^"]*)"', dom)[1]))
    assert measure["labelled"] > 0, "every label hidden"
    assert measure["clipped"] == []
    assert measure["title"] and measure["legend"] and measure["page"], measure
    assert measure["keys"] == [12] * len(COLOURS), "the legend's swatches are squeezed"


def test_explain_html_says_where_it_wrote(tmp_path, capsys):
    pte, _ = saved(GOLDEN / "plain" / "dirty")
    out = tmp_path / "page.html"
    assert main(["explain", str(pte), "--html", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    json.loads(captured.out)  # stdout stays one JSON document
    assert f"wrote {out} ({out.stat().st_size:,} B)" in captured.err
