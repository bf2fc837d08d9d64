"""The shell of the bench's pages: one self-contained HTML file, and charts its own script draws.

A chart is a `<figure class="chart">` that holds its spec as JSON; `charts.js`,
inlined in every page, draws each one as SVG when the page opens, with every
point's figure in its `data-value`. What a person sees is thus drawn from the
numbers in the page itself, and a browser test can read both. The page's
Content-Security-Policy allows no fetch at all, so it opens the same offline and
from an archived CI artifact.

A spec is `{"kind": "lines" | "bars", "title", "unit": "bytes" | "percent" |
"ratio", "labels": [...], "series": [Series.to_json()...], "reference": float |
None, "reference_label", "zero": bool}`: lines have one x position per label (a
run), bars one row per label (a model); a series has one value per label, None
where it has none.
"""

from __future__ import annotations

import html
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Step", "Series", "chart_figure", "html_table", "render_page", "write_page", "STYLE"]

_SCRIPT = Path(__file__).with_name("charts.js")
_CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em auto; max-width: 1160px; color: #222; }
table { border-collapse: collapse; font-size: 12px; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: right; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; }
dl { display: grid; grid-template-columns: max-content auto; gap: 2px 1em; }
dt { font-weight: bold; } dd { margin: 0; font-family: monospace; }
figure { margin: 1.5em 0; } svg { max-width: 100%; height: auto; }
.charts { display: flex; flex-wrap: wrap; gap: 0 12px; } .charts figure { margin: 0.5em 0; }
.legend td, .legend th { text-align: left; white-space: normal; }
table.latest td:nth-child(2), table.runs td:nth-child(3) { text-align: left; }
.moved-up { background: #f8d7d7; } .moved-down { background: #d9f0dc; }
.summary { font-size: 15px; padding: 6px 10px; background: #f3f3f3; border-left: 4px solid #888; }
"""


@dataclass(frozen=True)
class Step:
    """A marker on a line: the figure at `index` moved past a threshold, `up` or `down`."""

    index: int
    direction: str
    reason: str

    def to_json(self) -> dict:
        return {"index": self.index, "direction": self.direction, "reason": self.reason}


@dataclass(frozen=True)
class Series:
    """One line or one set of bars: a value per label of its chart, None where there is none."""

    key: str
    label: str
    color: str
    values: tuple[float | None, ...]
    steps: tuple[Step, ...] = field(default=())

    def to_json(self) -> dict:
        return {
            "key": self.key,
            "label": self.label,
            "color": self.color,
            "values": list(self.values),
            "steps": [step.to_json() for step in self.steps],
        }


def chart_figure(
    kind: str,
    title: str,
    unit: str,
    labels: Sequence[str],
    series: Sequence[Series],
    *,
    reference: float | None = None,
    reference_label: str = "",
    zero: bool = False,
    attributes: Mapping[str, str] | None = None,
) -> str:
    """A `<figure class="chart">` that the page's script draws; `attributes` go on the figure."""
    spec = {
        "kind": kind,
        "title": title,
        "unit": unit,
        "labels": list(labels),
        "series": [s.to_json() for s in series],
        "reference": reference,
        "reference_label": reference_label,
        "zero": zero,
    }
    # `<` escaped so that no value can close the script element.
    data = json.dumps(spec, allow_nan=False).replace("<", "\\u003c")
    extra = "".join(f' {name}="{html.escape(value)}"' for name, value in (attributes or {}).items())
    return (
        f'<figure class="chart"{extra}><script type="application/json" class="chart-spec">'
        f"{data}</script><noscript>{html.escape(title)}: drawn by the page's script; "
        "the figures are in the tables.</noscript></figure>"
    )


def html_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    row_titles: Sequence[str] | None = None,
    row_classes: Sequence[str] | None = None,
    table_class: str = "",
) -> str:
    """A table of text cells (escaped here); a row's title is its tooltip."""
    lines = [f'<table class="{table_class}">' if table_class else "<table>", "<thead><tr>"]
    lines += [f"<th>{html.escape(h)}</th>" for h in headers]
    lines.append("</tr></thead><tbody>")
    for index, row in enumerate(rows):
        title = f' title="{html.escape(row_titles[index])}"' if row_titles else ""
        css = f' class="{row_classes[index]}"' if row_classes and row_classes[index] else ""
        lines.append(f"<tr{title}{css}>")
        lines += [f"<td>{html.escape(cell)}</td>" for cell in row]
        lines.append("</tr>")
    lines.append("</tbody></table>")
    return "".join(lines)


def render_page(title: str, body: str) -> str:
    """A whole page: `body` (HTML) with the style, the no-fetch policy and the chart script."""
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        f"<title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body>{body}"
        f"<script>{_SCRIPT.read_text(encoding='utf-8')}</script></body></html>"
    )


def write_page(path: Path, text: str) -> None:
    """Writes `text` to `path` atomically; never replaces what is not a regular file.

    Raises:
        OSError: `path` exists and is not a regular file, or cannot be written.
    """
    path = Path(path)
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise FileExistsError(f"{path}: exists and is not a regular file; not replaced")
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
