"""The summary table, as aligned text for a terminal or as Markdown for the README."""

from __future__ import annotations

from collections.abc import Sequence

from bench.results import DedupeSummary, ModelSummary

__all__ = [
    "format_bytes",
    "format_table",
    "format_dedupe_table",
    "table_rows",
    "dedupe_rows",
    "COLUMNS",
    "DEDUPE_COLUMNS",
]

#: (header, what it means): printed under the table by `--help` and the dashboard.
COLUMNS = (
    ("model", "zoo case"),
    (
        "constants",
        "bytes in the constant, mutable and external (.ptd) spaces before pruning; "
        "delegate blobs and their named data are not counted",
    ),
    ("before", ".pte + .ptd bytes, ExecuTorch as shipped"),
    ("after", ".pte + .ptd bytes, prune_constants=True"),
    ("saved", "before - after, and its share of before"),
    ("dead", "bytes emitter_filter.report says it dropped"),
    ("emit up", "to_executorch seconds, upstream (median)"),
    ("emit pruned", "to_executorch seconds, pruned (median), and pruned / upstream"),
    ("filter", "seconds in the filter (median)"),
    ("share", "filter seconds / to_executorch seconds of the same call (median)"),
    (
        "peak RSS up/pruned",
        "peak resident memory of a fresh process building and emitting the model",
    ),
    ("emit +RSS up/pruned", "peak resident memory added during to_executorch alone"),
)


def format_bytes(n: int | None) -> str:
    """Binary units with three significant figures: `12.0 MiB`, `327 KiB`."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            if unit == "B":
                return f"{int(value)} B"
            return f"{value:.3g} {unit}" if abs(value) < 100 else f"{value:.0f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _seconds(s: float) -> str:
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"


def _row(s: ModelSummary) -> list[str]:
    return [
        s.model,
        format_bytes(s.constant_bytes),
        format_bytes(s.bytes_before),
        format_bytes(s.bytes_after),
        f"{format_bytes(s.saved_bytes)} ({s.saved_share:.0%})",
        format_bytes(s.dead_bytes),
        _seconds(s.upstream_seconds),
        f"{_seconds(s.pruned_seconds)} ({s.time_ratio:.2f}x)",
        _seconds(s.filter_seconds),
        f"{s.filter_share:.2%}",
        f"{format_bytes(s.peak_rss_upstream)} / {format_bytes(s.peak_rss_pruned)}",
        f"{format_bytes(s.emit_rss_upstream)} / {format_bytes(s.emit_rss_pruned)}",
    ]


def table_rows(summaries: Sequence[ModelSummary]) -> tuple[list[str], list[list[str]]]:
    """The headers and the cells of the model table, one row per model, in their order."""
    return [name for name, _ in COLUMNS], [_row(s) for s in summaries]


def format_table(summaries: Sequence[ModelSummary], *, markdown: bool = False) -> str:
    """The table of `summaries`, one row per model, in their order."""
    return _format(*table_rows(summaries), markdown)


#: Columns of the `dedupe_constants` table (`bench_models.test_dedupe`).
DEDUPE_COLUMNS = (
    ("model", "zoo case with tied weights"),
    ("plain", ".pte + .ptd bytes, ExecuTorch as shipped"),
    ("pruned", ".pte + .ptd bytes, prune_constants=True"),
    (
        "pruned + deduplicated",
        ".pte + .ptd bytes, prune_constants and dedupe_constants, and their share of plain",
    ),
    (
        "emit deduplicated",
        "to_executorch seconds, pruned + deduplicated (median), and over "
        "upstream's (emit up in the table above)",
    ),
    ("dedupe", "seconds in the deduplication (median)"),
    ("dedupe share", "dedupe seconds / to_executorch seconds of the same call (median)"),
)


def dedupe_rows(summaries: Sequence[DedupeSummary]) -> tuple[list[str], list[list[str]]]:
    """The headers and the cells of the deduplication table, one row per model."""
    rows = [
        [
            s.model,
            format_bytes(s.bytes_plain),
            format_bytes(s.bytes_pruned),
            f"{format_bytes(s.bytes_deduped)} ({s.deduped_share:.1%} of plain)",
            f"{_seconds(s.deduped_seconds)} ({s.time_ratio:.2f}x)",
            _seconds(s.dedupe_seconds),
            f"{s.dedupe_share:.2%}",
        ]
        for s in summaries
    ]
    return [name for name, _ in DEDUPE_COLUMNS], rows


def format_dedupe_table(summaries: Sequence[DedupeSummary], *, markdown: bool = False) -> str:
    """Bytes plain / pruned / deduplicated, the call's time and the dedupe's share of it."""
    return _format(*dedupe_rows(summaries), markdown)


def _format(headers: list[str], rows: list[list[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=True)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    return "\n".join(lines)
