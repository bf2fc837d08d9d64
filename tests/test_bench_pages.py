"""The bench's pages in headless Chromium: they draw offline, and what they draw is the JSON.

Each page is opened from disk with every host name unresolvable and a network
log kept; the test then reads the DOM after the page's script ran and checks
each drawn point against the figure computed here from the raw `results.json`
(not through `bench.results`), and its position against its value.

Chromium runs as `tests.browser` runs it (offline; skipped where it is missing).
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest

# `bench/` is a top-level package of the repository, not part of the installed wheel.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.cli import EXIT_OK, main  # noqa: E402
from tests import bench_runs  # noqa: E402
from tests.browser import external_urls, needs_chromium, page_requests, run_chromium  # noqa: E402

_TIED = "tied_embedding_32000x288"
pytestmark = needs_chromium


@dataclass(eq=False)  # compared by identity: two cells of the same text are two cells
class _Element:
    tag: str
    attrs: dict[str, str]
    figure: dict[str, str] | None
    text: str = ""


@dataclass
class _Dom(HTMLParser):
    """The elements of a dumped DOM, each with the attributes of the figure it is in."""

    elements: list[_Element] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__()
        self._figure: dict[str, str] | None = None
        self._open: list[_Element] = []

    def handle_starttag(self, tag, attrs):
        attrs = {k: v or "" for k, v in attrs}
        if tag == "figure":
            self._figure = attrs
        element = _Element(tag, attrs, self._figure)
        self.elements.append(element)
        if tag not in ("meta", "br", "img", "link", "input"):
            self._open.append(element)

    def handle_endtag(self, tag):
        while self._open and self._open.pop().tag != tag:
            pass
        if tag == "figure":
            self._figure = None

    def handle_data(self, data):
        for element in self._open:
            element.text += data

    def find(self, tag: str, css: str | None = None, **attrs) -> list[_Element]:
        return [
            e
            for e in self.elements
            if e.tag == tag
            and (css is None or css in e.attrs.get("class", "").split())
            and all(e.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())
        ]


@dataclass
class _Rendered:
    dom: _Dom
    requests: list[str]


def _open(page: Path, tmp_path: Path) -> _Rendered:
    """The DOM of `page` once its script ran, and what it fetched, in headless Chromium."""
    netlog = tmp_path / "netlog.json"
    completed = run_chromium(
        tmp_path,
        "--virtual-time-budget=5000",
        "--dump-dom",
        url=page.resolve().as_uri(),
        netlog=netlog,
    )
    dom = _Dom()
    dom.feed(completed.stdout)
    return _Rendered(dom, page_requests(netlog))


def _assert_self_contained(page: Path, rendered: _Rendered) -> None:
    assert rendered.requests == [], "the page fetched something"
    assert external_urls(page.read_text()) == []


def _median(info: dict, key: str) -> float:
    return statistics.median(info[key])


def _raw(path: Path) -> dict[tuple[str, str], dict]:
    """A run's extra_info by (model, mode), read straight from the JSON."""
    return {
        (b["extra_info"]["model"], b["extra_info"]["mode"]): b["extra_info"]
        for b in json.loads(path.read_text())["benchmarks"]
    }


def _expected_history(paths: list[Path]) -> dict[tuple[str, str], list[float]]:
    """Per (model, series key), the figure of each run, from the raw JSON."""
    expected: dict[tuple[str, str], list[float]] = {}
    for path in paths:
        raw = _raw(path)
        for model in {m for m, _ in raw}:
            up, pruned, deduped = (raw.get((model, m)) for m in ("upstream", "pruned", "deduped"))
            figures = {
                "bytes_before": up["total_bytes"],
                "bytes_after": pruned["total_bytes"],
                "filter_share": _median(pruned, "filter_share"),
                "time_ratio": _median(pruned, "to_executorch_seconds")
                / _median(up, "to_executorch_seconds"),
            }
            if deduped:
                figures.update(
                    bytes_deduped=deduped["total_bytes"],
                    dedupe_share=_median(deduped, "dedupe_share"),
                    dedupe_time_ratio=_median(deduped, "to_executorch_seconds")
                    / _median(up, "to_executorch_seconds"),
                )
            for key, value in figures.items():
                expected.setdefault((model, key), []).append(value)
    return expected


def _assert_linear(points: list[_Element], along: str, inverted: bool) -> None:
    """The drawn position `along` is one linear map of the value for every point of a chart."""
    values = [float(p.attrs["data-value"]) for p in points]
    positions = [float(p.attrs[along]) for p in points]
    low, high = values.index(min(values)), values.index(max(values))
    if values[low] == values[high]:
        assert len(set(positions)) == 1
        return
    slope = (positions[high] - positions[low]) / (values[high] - values[low])
    assert (slope < 0) is inverted, "a larger value is drawn higher (lines) or longer (bars)"
    for value, position in zip(values, positions, strict=True):
        assert position == pytest.approx(positions[low] + slope * (value - values[low]), abs=0.01)


def test_the_history_page_draws_three_points_per_line_and_the_step_at_the_third(tmp_path):
    paths = bench_runs.three_commits(tmp_path)
    out = tmp_path / "out"
    assert main(["--history", *map(str, paths), "--out", str(out)]) == EXIT_OK
    rendered = _open(out / "history.html", tmp_path)
    _assert_self_contained(out / "history.html", rendered)
    dom = rendered.dom

    expected = _expected_history(paths)
    drawn: dict[tuple[str, str], list[float]] = {}
    for point in dom.find("circle", "point"):
        key = (point.figure["data-model"], point.attrs["data-series"])
        assert int(point.attrs["data-index"]) == len(drawn.setdefault(key, []))
        drawn[key].append(float(point.attrs["data-value"]))
    assert drawn.keys() == expected.keys()
    for key, values in drawn.items():
        assert len(values) == 3, key
        assert values == pytest.approx(expected[key], rel=1e-9), key

    charts = dom.find("figure", "chart")
    assert len(charts) == 6 and all(c.attrs.get("data-drawn") == "true" for c in charts)
    for chart in charts:
        points = [p for p in dom.find("circle", "point") if p.figure is chart.attrs]
        _assert_linear(points, "cy", inverted=True)
        for series in {p.attrs["data-series"] for p in points}:
            xs = [float(p.attrs["cx"]) for p in points if p.attrs["data-series"] == series]
            assert xs == sorted(xs) and len(set(xs)) == 3

    steps = {
        (
            s.figure["data-model"],
            s.attrs["data-series"],
            s.attrs["data-index"],
            s.attrs["data-direction"],
        )
        for s in dom.find("g", "step")
    }
    assert steps == {
        (_TIED, key, "2", "up") for key in ("bytes_before", "bytes_after", "bytes_deduped")
    }
    (rule,) = [e for e in dom.elements if e.attrs.get("id") == "rule"]
    assert "a regression is pruned .pte+.ptd bytes > baseline x 1.005" in rule.text
    labels = [t.text for t in dom.find("text", "run-label")]
    assert labels[:3] == ["1111111", "2222222", "3333333"]


def test_the_run_page_shows_the_dedupe_table_the_time_ratios_and_the_costliest_call(tmp_path):
    pytest.importorskip("matplotlib")
    path = bench_runs.write(
        tmp_path / "results.json",
        bench_runs.quick_run(commit="1" * 40, commit_time="2026-11-21T00:00:00+00:00"),
    )
    assert main(["--results", str(path), "--out", str(tmp_path)]) == EXIT_OK
    rendered = _open(tmp_path / "dashboard.html", tmp_path)
    _assert_self_contained(tmp_path / "dashboard.html", rendered)
    dom = rendered.dom

    raw = _raw(path)
    upstream = {m: _median(raw[(m, "upstream")], "to_executorch_seconds") for m, _ in raw}
    expected = {
        (m, "pruned"): _median(raw[(m, "pruned")], "to_executorch_seconds") / upstream[m]
        for m in upstream
    }
    expected[(_TIED, "deduped")] = (
        _median(raw[(_TIED, "deduped")], "to_executorch_seconds") / upstream[_TIED]
    )
    (chart,) = dom.find("figure", "chart", id="time-ratios")
    assert chart.attrs.get("data-drawn") == "true"
    bars = dom.find("rect", "bar")
    labels = json.loads(
        next(e for e in dom.elements if e.tag == "script" and e.figure is chart.attrs).text
    )["labels"]
    drawn = {
        (labels[int(b.attrs["data-index"])], b.attrs["data-series"]): float(b.attrs["data-value"])
        for b in bars
    }
    assert drawn == pytest.approx(expected, rel=1e-9)
    _assert_linear(
        [
            _Element(
                "rect", {**b.attrs, "end": str(float(b.attrs["x"]) + float(b.attrs["width"]))}, None
            )
            for b in bars
        ],
        "end",
        inverted=False,
    )

    (table,) = dom.find("table", "dedupe")
    cells = [e.text for e in dom.elements if e.tag == "td" and e in _inside(dom, table)]
    deduped = raw[(_TIED, "deduped")]["total_bytes"] / raw[(_TIED, "upstream")]["total_bytes"]
    assert cells[0] == _TIED and f"({deduped:.1%} of plain)" in cells[3]
    assert cells[4].endswith(f"({expected[(_TIED, 'deduped')]:.2f}x)")
    assert cells[6] == f"{_median(raw[(_TIED, 'deduped')], 'dedupe_share'):.2%}"

    worst = max(expected, key=expected.get)
    assert worst == (_TIED, "deduped")
    (summary,) = [e for e in dom.elements if e.attrs.get("id") == "costliest"]
    assert summary.text == (
        f"costliest call: {_TIED} pruned + deduplicated, to_executorch "
        f"{expected[worst]:.2f}x upstream's (medians, same run)"
    )


def _inside(dom: _Dom, container: _Element) -> list[_Element]:
    """The elements after `container` up to the next element of its tag (tables do not nest)."""
    start = dom.elements.index(container) + 1
    rest = dom.elements[start:]
    end = next((i for i, e in enumerate(rest) if e.tag == container.tag), len(rest))
    return rest[:end]


def test_the_network_check_sees_a_page_that_fetches(tmp_path):
    """The check above can fail: a page that loads an image from a host is caught."""
    page = tmp_path / "fetches.html"
    page.write_text(
        '<!DOCTYPE html><html><body><img src="https://bench.invalid/a.png"></body></html>'
    )
    rendered = _open(page, tmp_path)
    assert rendered.requests == ["https://bench.invalid/a.png"]
    with pytest.raises(AssertionError, match="fetched"):
        _assert_self_contained(page, rendered)
