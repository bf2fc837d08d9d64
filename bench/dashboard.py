"""`dashboard.html`: one self-contained page of charts and the tables, drawn from `results.json`.

The charts of sizes, times and memory are drawn by matplotlib from the summaries
of the JSON and inlined as SVG; the chart of each call's time over upstream's is
drawn by the page's own script from the figures it holds (`bench.page`), so a
browser test can check its bars against the JSON. The page opens anywhere,
offline, and can be archived next to the JSON it came from.
"""

from __future__ import annotations

import html
import io
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench.page import Series, chart_figure, html_table, render_page, write_page
from bench.results import DedupeSummary, ModelSummary, costliest_call
from bench.table import COLUMNS, DEDUPE_COLUMNS, dedupe_rows, format_bytes, table_rows

__all__ = ["render_dashboard", "write_dashboard", "render_suite_dashboard"]

logger = logging.getLogger(__name__)

_MIB = float(1 << 20)
_SCALED_PREFIX = "scaled_"
_SHARE_TARGET = 0.01  # issue 2: the filter should cost <= 1% of to_executorch


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # no display; must precede the pyplot import
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "font.size": 9})
    return plt


def _svg(figure) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    figure.clf()
    text = buffer.getvalue()
    # Inline SVG needs no XML prolog or DOCTYPE.
    return text[text.index("<svg") :]


def _bytes_chart(plt, summaries: Sequence[ModelSummary]) -> str:
    figure, axes = plt.subplots(figsize=(8, 0.45 * len(summaries) + 1.2))
    names = [s.model for s in summaries]
    rows = range(len(summaries))
    axes.barh(
        [r + 0.2 for r in rows],
        [s.bytes_before / _MIB for s in summaries],
        0.4,
        label="before (ExecuTorch as shipped)",
        color="#c44e52",
    )
    axes.barh(
        [r - 0.2 for r in rows],
        [s.bytes_after / _MIB for s in summaries],
        0.4,
        label="after (prune_constants=True)",
        color="#4c72b0",
    )
    for r, s in zip(rows, summaries, strict=True):
        if s.saved_bytes:
            axes.annotate(
                f"-{s.saved_share:.0%}",
                (s.bytes_before / _MIB, r + 0.2),
                xytext=(3, -3),
                textcoords="offset points",
            )
    axes.set_yticks(list(rows), names)
    axes.set_xscale("log")
    axes.set_xlabel(".pte + .ptd size (MiB, log scale)")
    axes.set_title("Bytes written, before and after pruning")
    axes.legend(loc="lower right")
    return _svg(figure)


def _size_mib(s: ModelSummary) -> float:
    """A model's size on the charts' x axis: what ExecuTorch writes for it unpruned.

    Not the constant bytes: a fully delegated model has none outside its
    delegate's blobs, and a log axis has no place for 0.
    """
    return s.bytes_before / _MIB


def _scaling_chart(plt, summaries: Sequence[ModelSummary]) -> str:
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    scaled = [s for s in summaries if s.model.startswith(_SCALED_PREFIX)]
    others = [s for s in summaries if not s.model.startswith(_SCALED_PREFIX)]
    for group, style, label in ((scaled, "o-", "scaled family"), (others, "s", "other models")):
        if not group:
            continue
        x = [_size_mib(s) for s in group]
        left.plot(x, [s.filter_seconds * 1000 for s in group], style, label=label)
        right.plot(x, [s.filter_share * 100 for s in group], style, label=label)
    for s in summaries:
        right.annotate(
            s.model,
            (_size_mib(s), s.filter_share * 100),
            xytext=(3, 3),
            textcoords="offset points",
            fontsize=7,
        )
    right.axhline(_SHARE_TARGET * 100, color="#c44e52", linestyle="--", label="1% target")
    left.set(
        xscale="log",
        yscale="log",
        xlabel=".pte + .ptd before pruning (MiB)",
        ylabel="filter time (ms, median)",
        title="Filter time against model size",
    )
    right.set(
        xscale="log",
        xlabel=".pte + .ptd before pruning (MiB)",
        ylabel="share of to_executorch (%, median)",
        title="Filter share of to_executorch",
    )
    right.set_ylim(bottom=0)
    left.legend()
    right.legend()
    return _svg(figure)


def _emit_time_chart(plt, summaries: Sequence[ModelSummary]) -> str:
    figure, axes = plt.subplots(figsize=(8, 3.8))
    x = [_size_mib(s) for s in summaries]
    axes.plot(x, [s.upstream_seconds for s in summaries], "o", label="upstream", color="#c44e52")
    axes.plot(
        x, [s.pruned_seconds for s in summaries], "x", label="pruned", color="#4c72b0", markersize=8
    )
    axes.set(
        xscale="log",
        yscale="log",
        xlabel=".pte + .ptd before pruning (MiB)",
        ylabel="to_executorch (s, median)",
        title="to_executorch wall time, same run",
    )
    axes.legend()
    return _svg(figure)


def _memory_chart(plt, summaries: Sequence[ModelSummary]) -> str | None:
    measured = [s for s in summaries if s.peak_rss_upstream and s.peak_rss_pruned]
    if not measured:
        return None
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 0.4 * len(measured) + 1.5), sharey=True)
    rows = range(len(measured))
    for axes, up, pruned, title in (
        (left, "peak_rss_upstream", "peak_rss_pruned", "Peak RSS of a fresh process"),
        (right, "emit_rss_upstream", "emit_rss_pruned", "RSS added during to_executorch"),
    ):
        axes.barh(
            [r + 0.2 for r in rows],
            [(getattr(s, up) or 0) / _MIB for s in measured],
            0.4,
            label="upstream",
            color="#c44e52",
        )
        axes.barh(
            [r - 0.2 for r in rows],
            [(getattr(s, pruned) or 0) / _MIB for s in measured],
            0.4,
            label="pruned",
            color="#4c72b0",
        )
        axes.set(xlabel="MiB", title=title)
        axes.legend(loc="lower right")
    left.set_yticks(list(rows), [s.model for s in measured])
    return _svg(figure)


def _ratio_chart(summaries: Sequence[ModelSummary], dedupe: Sequence[DedupeSummary]) -> str:
    """Each model's whole `to_executorch` call against upstream's, pruned and deduplicated.

    The call's cost, whatever part of it the filter's own timer covers.
    """
    deduped = {d.model: d.time_ratio for d in dedupe}
    series = [
        Series(
            "pruned",
            "prune_constants=True / upstream",
            "#4c72b0",
            tuple(s.time_ratio for s in summaries),
        ),
    ]
    if deduped:
        series.append(
            Series(
                "deduped",
                "+ dedupe_constants=True / upstream",
                "#dd8452",
                tuple(deduped.get(s.model) for s in summaries),
            )
        )
    return chart_figure(
        "bars",
        "to_executorch time over upstream's (medians, same run)",
        "ratio",
        [s.model for s in summaries],
        series,
        reference=1.0,
        reference_label="1x: as fast as ExecuTorch as shipped",
        attributes={"id": "time-ratios"},
    )


def _tables(summaries: Sequence[ModelSummary], dedupe: Sequence[DedupeSummary]) -> str:
    """The model table, the deduplication table (where a model has one), and their columns."""
    headers, rows = table_rows(summaries)
    parts = [html_table(headers, rows, row_titles=[s.description for s in summaries])]
    columns = list(COLUMNS)
    if dedupe:
        headers, rows = dedupe_rows(dedupe)
        parts.append("<h2>Tied weights stored once (dedupe_constants=True)</h2>")
        parts.append(html_table(headers, rows, table_class="dedupe"))
        columns += [(f"dedupe: {name}", meaning) for name, meaning in DEDUPE_COLUMNS]
    legend = html_table(["column", "meaning"], columns, table_class="legend")
    parts.append(f"<details><summary>Columns</summary>{legend}</details>")
    return "".join(parts)


def _run_facts(results: Mapping) -> list[tuple[str, str]]:
    machine = results.get("machine_info") or {}
    commit = results.get("commit_info") or {}
    bench = results.get("bench") or {}
    cpu = machine.get("cpu") or {}
    return [
        ("date", str(results.get("datetime", "?"))),
        ("command", str(bench.get("command", "?"))),
        ("selection", str(bench.get("markexpr") or "all")),
        (
            "machine",
            f"{machine.get('node', '?')}, {cpu.get('brand_raw', machine.get('processor', '?'))}, "
            f"{cpu.get('count', '?')} CPUs",
        ),
        ("python", str(machine.get("python_version", bench.get("python", "?")))),
        ("commit", f"{commit.get('id', '?')}{' (dirty)' if commit.get('dirty') else ''}"),
    ]


def _ram_section(ram: Mapping | None) -> str:
    """The table `bench/bench_ram.py` wrote to `ram.json` beside the results, if it did."""
    if ram is None:
        return ""
    from bench.bench_ram import COLUMNS as RAM_COLUMNS, describe, table_rows as ram_rows

    return (
        '<h2 id="ram">RAM: two programs as files, shared, merged, exported together</h2>'
        f"<p>{html.escape(describe(ram))}</p>"
        + html_table([h for h, _ in RAM_COLUMNS], ram_rows(ram["rows"]), table_class="ram")
    )


def render_dashboard(
    results: Mapping,
    summaries: Sequence[ModelSummary],
    dedupe: Sequence[DedupeSummary] = (),
    ram: Mapping | None = None,
) -> str:
    """The dashboard page for `results` (a loaded `results.json`) and its summaries, with
    `ram` (a loaded `ram.json`, `bench/bench_ram.py`'s) where there is one."""
    plt = _pyplot()
    charts = [
        _bytes_chart(plt, summaries),
        _scaling_chart(plt, summaries),
        _emit_time_chart(plt, summaries),
        _memory_chart(plt, summaries),
    ]
    plt.close("all")
    facts = "".join(
        f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in _run_facts(results)
    )
    saved = sum(s.saved_bytes for s in summaries)
    costliest = costliest_call(summaries, dedupe)
    figures = "".join(f"<figure>{chart}</figure>" for chart in charts if chart)
    return render_page(
        "emitter_filter benchmarks",
        "<h1>emitter_filter: what pruning saves and costs</h1>"
        + (
            f'<p class="summary" id="costliest">{html.escape(costliest.describe())}</p>'
            if costliest
            else ""
        )
        + f"<dl>{facts}</dl>"
        f"<p>{len(summaries)} models; {html.escape(format_bytes(saved))} not written in total. "
        "Every ratio compares figures from this run only.</p>"
        f"{_tables(summaries, dedupe)}"
        f"{_ratio_chart(summaries, dedupe) if summaries else ''}"
        f"{figures}"
        f"{_ram_section(ram)}",
    )


def write_dashboard(
    path: Path,
    results: Mapping,
    summaries: Sequence[ModelSummary],
    dedupe: Sequence[DedupeSummary] = (),
    ram: Mapping | None = None,
) -> None:
    """Writes `render_dashboard(...)` to `path`."""
    write_page(path, render_dashboard(results, summaries, dedupe, ram))
    logger.info("wrote %s", path)


# --- The pytest plugin's report (`--emitter-filter-report`) -------------------------

_LARGEST_PROGRAMS = 30


def _suite_chart(plt, programs: Sequence[Mapping]) -> str | None:
    """The largest programs' bytes: live, dead and duplicated, as the plugin audited them."""
    shown = sorted(programs, key=lambda p: -p["file_bytes"])[:_LARGEST_PROGRAMS]
    if not shown:
        return None
    figure, axes = plt.subplots(figsize=(8, 0.3 * len(shown) + 1.2))
    rows = range(len(shown))
    dead = [(p["dead_bytes"] or 0) / 1024 for p in shown]
    duplicated = [(p["duplicated_bytes"] or 0) / 1024 for p in shown]
    rest = [p["file_bytes"] / 1024 - d - u for p, d, u in zip(shown, dead, duplicated, strict=True)]
    axes.barh(rows, rest, label="live, stored once", color="#4c72b0")
    axes.barh(rows, duplicated, left=rest, label="duplicated", color="#dd8452")
    axes.barh(
        rows,
        dead,
        left=[r + u for r, u in zip(rest, duplicated, strict=True)],
        label="dead",
        color="#c44e52",
    )
    axes.set_yticks(list(rows), [_program_label(p) for p in shown])
    axes.invert_yaxis()
    axes.set_xlabel("KiB written (.pte + .ptd)")
    axes.set_title(f"The {len(shown)} largest programs the suite serialized")
    axes.legend(loc="lower right")
    return _svg(figure)


def _program_label(program: Mapping) -> str:
    test = program["test"] or "(outside a test)"
    return f"{test.rsplit('::', 1)[-1]} [{', '.join(program['methods'])}]"


def _count(value) -> str:
    return "-" if value is None else f"{value:,}"


def render_suite_dashboard(report: Mapping) -> str:
    """The page for a pytest plugin report: totals, the largest programs, and one row each."""
    programs = report["programs"]
    totals = {
        key: sum(p[key] or 0 for p in programs)
        for key in ("file_bytes", "dead_bytes", "duplicated_bytes", "dropped_bytes")
    }
    plt = _pyplot()
    chart = _suite_chart(plt, programs)
    plt.close("all")
    head = [
        "test",
        "methods",
        "pruned",
        "file bytes",
        "dead",
        "duplicated",
        "dropped",
        "largest dead entry",
    ]
    rows = []
    for p in programs:
        largest = p["largest_dead"][0] if p["largest_dead"] else None
        cells = [
            p["test"] or "-",
            ", ".join(p["methods"]),
            "yes" if p["pruned"] else "no",
            _count(p["file_bytes"]),
            _count(p["dead_bytes"]),
            _count(p["duplicated_bytes"]),
            _count(p["dropped_bytes"]),
            "-"
            if largest is None
            else f"{largest['bytes']:,} B {largest['space']}[{largest['index']}] "
            f"{largest['name'] or ''}".rstrip(),
        ]
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    options = f"prune: {report['prune']}, max dead bytes: {report['max_dead_bytes']}"
    return render_page(
        "emitter_filter: a test suite's programs",
        "<h1>emitter_filter: the programs a test suite serialized</h1>"
        f"<p>{len(programs)} programs ({html.escape(options)}): "
        f"{totals['file_bytes']:,} bytes written, {totals['dead_bytes']:,} dead, "
        f"{totals['duplicated_bytes']:,} duplicated, {totals['dropped_bytes']:,} dropped "
        "by pruning.</p>"
        + (f"<figure>{chart}</figure>" if chart else "")
        + "<table><thead><tr>"
        + "".join(f"<th>{h}</th>" for h in head)
        + "</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>",
    )
