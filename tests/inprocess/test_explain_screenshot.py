"""The treemap picture of docs/explain.md, made here: the page of the in-process example's
`model.pte` in headless Chromium, the whole page in the window (no table row cut through).

`EMITTER_FILTER_SCREENSHOTS=docs .venv/bin/python -m pytest tests/inprocess/test_explain_screenshot.py`
writes it there as `explain-treemap.png`.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower

import emitter_filter
from emitter_filter.cli import main
from tests.browser import needs_chromium, run_chromium

WINDOW = (1200, 1150)

# The page's height, with the window's: the screenshot holds the whole page only if it fits.
_MEASURE = """<script>
document.body.dataset.measure = JSON.stringify({
  page: document.documentElement.scrollHeight, window: window.innerHeight,
  table: document.getElementById("summary").getBoundingClientRect().bottom,
});
</script>"""


class ConvBN(torch.nn.Module):
    """docs/in-process.md's example: XNNPACK takes the weights, a buffer nothing reads."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(16, 64, 3)
        self.bn = torch.nn.BatchNorm2d(64)
        self.register_buffer("calibration", torch.randn(64, 256))  # never read

    def forward(self, x):
        return self.bn(self.conv(x)).relu()


@needs_chromium
def test_the_docs_treemap_shows_the_whole_page(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the page's title names the file as given: model.pte
    torch.manual_seed(0)
    exported = torch.export.export(ConvBN().eval(), (torch.randn(1, 16, 32, 32),))
    torch.export.save(exported, tmp_path / "model.pt2")
    edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
    edge.to_executorch(emitter_filter.ExecutorchBackendConfig()).save(str(tmp_path / "model.pte"))
    page = tmp_path / "model.html"
    assert main(["explain", "model.pte", "--names", "model.pt2", "--html", "model.html"]) == 0
    measured = tmp_path / "measured.html"
    measured.write_text(page.read_text().replace("</body>", _MEASURE + "</body>"))
    dom = run_chromium(
        tmp_path, "--virtual-time-budget=5000", "--dump-dom", url=measured.as_uri(), window=WINDOW
    ).stdout
    sizes = json.loads(html.unescape(re.search(r'data-measure="([^"]*)"', dom)[1]))
    assert sizes["page"] <= sizes["window"] and sizes["table"] <= sizes["window"], sizes
    shot = tmp_path / "explain-treemap.png"
    run_chromium(
        tmp_path,
        "--virtual-time-budget=5000",
        "--hide-scrollbars",
        f"--screenshot={shot}",
        url=page.as_uri(),
        window=WINDOW,
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("EMITTER_FILTER_SCREENSHOTS"):
        shutil.copyfile(shot, os.path.join(os.environ["EMITTER_FILTER_SCREENSHOTS"], shot.name))
