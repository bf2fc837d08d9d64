"""`explain --html`: one self-contained page with a treemap of a file's bytes.

The page carries its data (the explanation's JSON), script and style inline:
nothing is fetched, so it opens offline, from a CI artefact or a mail. The
treemap is squarified (Bruls, Huizing, van Wijk), grouped by file for a set of
programs, then by storage, then by module path (where the parts have names) or
reader, then one rectangle per part:
each rectangle's area is its bytes' share of the page's area, colour its status.
A cell shows the longest label that fits it whole (for a set, with its file's
name first), or none. Hovering shows a
part's details; clicking pins them. Below it, the bytes by storage and status.
"""

from __future__ import annotations

import html
import json
import os

from emitter_filter.ondisk.explain import STATUSES, Explanation
from emitter_filter.ondisk.write.small_files import write_text
from emitter_filter.program.scalar_types import dtype_label

__all__ = ["COLOURS", "render_explain_page", "write_explain_page"]

#: The colour of each status on the page (colour-blind safe: Tableau 10).
COLOURS = {
    "live": "#4e79a7",
    "dead": "#e15759",
    "duplicated": "#f28e2b",
    "shared": "#59a14f",
    "padding": "#bab0ac",
}

_STYLE = """
body { font: 14px system-ui, sans-serif; margin: 16px; color: #222; }
h1 { font-size: 18px; margin: 0 0 8px; overflow-wrap: anywhere; }
#files { overflow-wrap: anywhere; margin-bottom: 4px; }
#legend { margin-bottom: 8px; }
.entry { white-space: nowrap; margin-right: 12px; display: inline-block; }
#map { position: relative; width: 100%; height: 560px; background: #eee; }
.cell { position: absolute; box-sizing: border-box; border: 1px solid #fff;
        overflow: hidden; font-size: 11px; line-height: 13px; color: #fff; cursor: pointer;
        white-space: nowrap; }
.cell:hover { outline: 2px solid #000; z-index: 1; }
#details { min-height: 3em; margin: 8px 0; white-space: pre-wrap; font-family: monospace; }
table { border-collapse: collapse; margin-top: 8px; }
td, th { padding: 2px 10px; text-align: right; border-bottom: 1px solid #ddd; }
td:first-child, th:first-child { text-align: left; }
.key { display: inline-block; width: 12px; height: 12px; margin-right: 4px; }
"""

# Squarified treemap: lays `items` (each {size}) out in the rectangle, rows along
# its shorter side, keeping each row's worst aspect ratio as low as it can.
_SCRIPT = """
const data = JSON.parse(document.getElementById("data").textContent);
const colours = JSON.parse(document.getElementById("colours").textContent);
const dtypes = JSON.parse(document.getElementById("dtypes").textContent);
function worst(row, side, scale) {
  const sum = row.reduce((a, b) => a + b.size, 0) * scale;
  let max = 0, min = Infinity;
  for (const r of row) { max = Math.max(max, r.size * scale); min = Math.min(min, r.size * scale); }
  return Math.max(side * side * max / (sum * sum), (sum * sum) / (side * side * min));
}
function squarify(items, x, y, w, h, place) {
  const total = items.reduce((a, b) => a + b.size, 0);
  if (!total) return;
  const scale = (w * h) / total;
  let rest = items.slice().sort((a, b) => b.size - a.size);
  while (rest.length) {
    const side = Math.min(w, h);
    const row = [rest[0]];
    let i = 1;
    while (i < rest.length && worst(row.concat([rest[i]]), side, scale) <= worst(row, side, scale)) {
      row.push(rest[i]); i++;
    }
    rest = rest.slice(i);
    // The row spans the shorter side; its thickness gives it exactly its area.
    const thick = row.reduce((a, b) => a + b.size, 0) * scale / side;
    let along = 0;
    for (const r of row) {
      const length = r.size * scale / thick;
      if (w >= h) place(r, x, y + along, thick, length); else place(r, x + along, y, length, thick);
      along += length;
    }
    if (w >= h) { x += thick; w -= thick; } else { y += thick; h -= thick; }
  }
}
function group(parts, key) {
  const groups = new Map();
  for (const p of parts) {
    const k = key(p);
    if (!groups.has(k)) groups.set(k, {name: k, size: 0, children: []});
    const g = groups.get(k); g.size += p.bytes; g.children.push(p);
  }
  return [...groups.values()];
}
function moduleOrReader(p) {
  const tensor = ["constant", "mutable", "external"].includes(p.storage);
  const fqn = tensor ? p.names[0] : undefined;
  if (fqn) return fqn.includes(".") ? fqn.slice(0, fqn.lastIndexOf(".")) : "(top level)";
  return p.readers.length ? p.readers[0].replace(/ in plan .*/, "") : "(" + p.storage + ")";
}
function describe(p) {
  return [p.label + "  " + p.bytes.toLocaleString("en") + " bytes  " + p.status,
          "file " + p.file + " at " + p.offset.toLocaleString("en"),
          p.dtype ? "dtype " + dtypes[p.dtype] + "  shape [" + p.shape.join(", ") + "]" : "",
          p.names.length ? "names " + p.names.join(", ") : "",
          p.readers.length ? "read by " + p.readers.join("; ") : "",
          p.copies.length ? "copies " + p.copies.join(", ") : ""].filter(Boolean).join("\\n");
}
function draw() {
  const map = document.getElementById("map");
  map.textContent = "";
  const width = map.clientWidth, height = map.clientHeight;
  const details = document.getElementById("details");
  let pinned = null;
  // A set of programs: a level per file first, then storage, then module or reader.
  const levels = [...(data.programs ? [p => p.file] : []), p => p.storage, moduleOrReader];
  function lay(parts, depth, x, y, w, h) {
    if (depth < levels.length) {
      squarify(group(parts, levels[depth]), x, y, w, h,
               (g, x, y, w, h) => lay(g.children, depth + 1, x, y, w, h));
      return;
    }
    squarify(parts.map(p => ({size: p.bytes, part: p})), x, y, w, h, (c, x, y, w, h) => {
      const p = c.part, cell = document.createElement("div");
      cell.className = "cell";
      cell.style.cssText = `left:${x.toFixed(3)}px;top:${y.toFixed(3)}px;` +
        `width:${w.toFixed(3)}px;height:${h.toFixed(3)}px;background:${colours[p.status]}`;
      cell.dataset.bytes = p.bytes; cell.dataset.label = p.label; cell.dataset.status = p.status;
      cell.dataset.file = p.file;
      cell.title = describe(p);
      const tensor = ["constant", "mutable", "external"].includes(p.storage);
      const name = tensor && p.names.length ? p.names[0] + " " : "";
      // A set of programs: each box says whose it is, where that fits.
      const file = data.programs ? p.file.split("/").pop() + ": " : "";
      const full = name + p.label + " " + p.bytes.toLocaleString("en") + " B";
      map.appendChild(cell);
      // The longest label that fits the cell whole, or none: a clipped label misleads.
      for (const text of [file + full, file + p.label, full, p.label]) {
        cell.textContent = text;
        if (cell.scrollWidth <= cell.clientWidth && cell.scrollHeight <= cell.clientHeight) break;
        cell.textContent = "";
      }
      cell.onmouseenter = () => { if (!pinned) details.textContent = describe(p); };
      cell.onclick = () => { pinned = pinned === p ? null : p; details.textContent = describe(p); };
    });
  }
  lay(data.parts, 0, 0, 0, width, height);
  map.dataset.width = width; map.dataset.height = height; map.dataset.drawn = "yes";
}
draw();
window.addEventListener("resize", draw);
"""


def _script_json(value) -> str:
    """JSON safe inside a `<script>` element: no `</` can end it early."""
    return json.dumps(value).replace("</", "<\\/")


def render_explain_page(explanation: Explanation) -> str:
    """The page's HTML: the treemap, a details line, and the table by storage and status."""
    document = explanation.to_json()
    rows = []
    for storage, row in explanation.storage_status().items():
        cells = "".join(f"<td>{row[s]:,}</td>" for s in STATUSES)
        rows.append(
            f"<tr><td>{html.escape(storage)}</td><td>{sum(row.values()):,}</td>{cells}</tr>"
        )
    totals = "".join(f"<td>{document['status'][s]:,}</td>" for s in STATUSES)
    keys = "".join(
        f'<span class="entry"><span class="key" style="background:{COLOURS[s]}"></span>{s}</span>'
        for s in STATUSES
    )
    files = ", ".join(f"{html.escape(os.path.basename(p))} ({n:,} B)" for p, n in explanation.files)
    head = "".join(f"<th>{s}</th>" for s in STATUSES)
    dtypes = {p.dtype: dtype_label(p.dtype) for p in explanation.parts if p.dtype}
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{html.escape(os.path.basename(explanation.path))}: where the bytes go</title>
<style>{_STYLE}</style></head>
<body>
<h1>{html.escape(explanation.path)}: {explanation.file_bytes:,} bytes</h1>
<div id="files">{files}</div>
<div id="legend">{keys}</div>
<div id="map"></div>
<div id="details">Hover over a rectangle for its details; click to pin them.</div>
<table id="summary"><tr><th>storage</th><th>bytes</th>{head}</tr>
{"".join(rows)}
<tr><th>total</th><th>{explanation.file_bytes:,}</th>{totals}</tr></table>
<script type="application/json" id="data">{_script_json(document)}</script>
<script type="application/json" id="colours">{_script_json(COLOURS)}</script>
<script type="application/json" id="dtypes">{_script_json(dtypes)}</script>
<script>{_SCRIPT}</script>
</body></html>
"""


def write_explain_page(explanation: Explanation, out: str | os.PathLike) -> None:
    """Writes `render_explain_page` to `out`, atomically, never over the files explained."""
    write_text(out, render_explain_page(explanation), inputs=[p for p, _ in explanation.files])
