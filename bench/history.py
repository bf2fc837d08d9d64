"""`python -m bench --history`: the runs of several commits on one page, with the steps marked.

Each `results.json` is one run; pytest-benchmark records in it the commit, the
commit's time, and the machine. Runs are grouped by machine: the CPU's name, its
core count, the architecture and the OS (not the host name, which a CI runner or
a container gets anew for every job). Figures are only compared within a group:
one machine's against another's would measure the machines.

Per model and machine, three charts over the runs: the bytes written before
pruning, after pruning and after deduplication; the filter's and the
deduplication's share of `to_executorch`; and the `to_executorch` time pruned
(and deduplicated) over upstream's, each measured in one run.

A step is marked where a figure moved past the `--compare` limit
(`Thresholds.exceeds`) against the previous run of the same machine that has it:
up, where `--compare` of the later run against the earlier would fail; down,
where that of the earlier against the later would. Byte figures take the bytes
limit; shares take the share limit, judged only where the baseline's
`to_executorch` took at least `share_min_seconds`, as `--compare` judges them.
The time ratios are drawn and not judged: `--compare` does not judge them.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from bench.compare import Thresholds
from bench.page import Series, Step, chart_figure, html_table, render_page, write_page
from bench.results import (
    DedupeSummary,
    ModelSummary,
    ResultsError,
    costliest_call,
    load_results,
    summarize,
    summarize_dedupe,
)

__all__ = [
    "ORDERS",
    "FIGURES",
    "Figure",
    "Run",
    "MachineHistory",
    "load_run",
    "group_runs",
    "render_history",
    "write_history",
    "format_steps",
]

logger = logging.getLogger(__name__)

#: How `--order` sorts the runs: by the commit's time (then the run's), by the run's, or as given.
ORDERS = ("commit", "run", "given")


@dataclass(frozen=True)
class Run:
    """One `results.json`: its commit, its machine, and its models' summaries."""

    path: Path
    commit: str
    dirty: bool
    commit_time: str
    run_time: str
    machine: str
    summaries: dict[str, ModelSummary]
    dedupe: dict[str, DedupeSummary]

    @property
    def label(self) -> str:
        """The short commit, with `+` for a dirty work tree."""
        return (self.commit[:7] or "?") + ("+" if self.dirty else "")


def _machine(results: dict) -> str:
    machine = results.get("machine_info") or {}
    cpu = machine.get("cpu") or {}
    name = cpu.get("brand_raw") or machine.get("processor") or "unknown CPU"
    return (
        f"{name}, {cpu.get('count', '?')} CPUs, {machine.get('machine', '?')}, "
        f"{machine.get('system', '?')}"
    )


def load_run(path: Path) -> Run:
    """Reads one run; `ResultsError` names the file."""
    results = load_results(path)
    try:
        summaries = summarize(results)
        dedupe = summarize_dedupe(results)
    except ResultsError as error:
        raise ResultsError(f"{path}: {error}") from error
    commit = results.get("commit_info") or {}
    return Run(
        path=Path(path),
        commit=str(commit.get("id") or ""),
        dirty=bool(commit.get("dirty")),
        commit_time=str(commit.get("time") or ""),
        run_time=str(results.get("datetime") or ""),
        machine=_machine(results),
        summaries={s.model: s for s in summaries},
        dedupe={d.model: d for d in dedupe},
    )


def _timestamp(text: str) -> float | None:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def _order(runs: Sequence[Run], order: str) -> list[Run]:
    if order == "given":
        return list(runs)
    if order not in ORDERS:
        raise ValueError(f"order {order!r}: expected one of {ORDERS}")

    def key(run: Run) -> tuple[float, float]:
        ran = _timestamp(run.run_time) or 0.0
        committed = _timestamp(run.commit_time) if order == "commit" else None
        return (ran if committed is None else committed, ran)

    return sorted(runs, key=key)  # stable: equal keys keep the order given


@dataclass(frozen=True)
class Figure:
    """A figure drawn over the runs; `judged_as` names its `Thresholds` limit, or None."""

    key: str
    label: str
    chart: str
    judged_as: str | None
    color: str
    read: Callable[[ModelSummary | None, DedupeSummary | None], float | None]


def _of_model(attribute: str):
    return lambda summary, dedupe: None if summary is None else getattr(summary, attribute)


def _of_dedupe(attribute: str):
    return lambda summary, dedupe: None if dedupe is None else getattr(dedupe, attribute)


FIGURES = (
    Figure(
        "bytes_before", "before pruning", "bytes", "bytes", "#c44e52", _of_model("bytes_before")
    ),
    Figure("bytes_after", "after pruning", "bytes", "bytes", "#4c72b0", _of_model("bytes_after")),
    Figure(
        "bytes_deduped",
        "after deduplication",
        "bytes",
        "bytes",
        "#dd8452",
        _of_dedupe("bytes_deduped"),
    ),
    Figure("filter_share", "filter", "shares", "share", "#4c72b0", _of_model("filter_share")),
    Figure(
        "dedupe_share", "deduplication", "shares", "share", "#dd8452", _of_dedupe("dedupe_share")
    ),
    Figure("time_ratio", "pruned / upstream", "ratios", None, "#4c72b0", _of_model("time_ratio")),
    Figure(
        "dedupe_time_ratio",
        "deduplicated / upstream",
        "ratios",
        None,
        "#dd8452",
        _of_dedupe("time_ratio"),
    ),
)

#: (chart, title, unit, reference line): the charts drawn per model, in this order.
_CHARTS = (
    ("bytes", ".pte + .ptd bytes", "bytes", None),
    ("shares", "share of the same to_executorch call", "percent", None),
    ("ratios", "to_executorch time over upstream's", "ratio", 1.0),
)


def _format(figure: Figure, value: float) -> str:
    if figure.chart == "bytes":
        return f"{value:,.0f} B"
    if figure.chart == "shares":
        return f"{value:.3%}"
    return f"{value:.2f}x"


@dataclass(frozen=True)
class MachineHistory:
    """The runs of one machine, in order, and what moved between them."""

    machine: str
    runs: tuple[Run, ...]
    thresholds: Thresholds

    @property
    def models(self) -> list[str]:
        """Every model of any run, in the latest run's order, then the others as they come."""
        models: list[str] = []
        for run in reversed(self.runs):
            models += [m for m in run.summaries if m not in models]
        return models

    def value(self, index: int, model: str, figure: Figure) -> float | None:
        run = self.runs[index]
        return figure.read(run.summaries.get(model), run.dedupe.get(model))

    def values(self, model: str, figure: Figure) -> tuple[float | None, ...]:
        return tuple(self.value(i, model, figure) for i in range(len(self.runs)))

    def judges(self, baseline: int, model: str, figure: Figure) -> bool:
        """Whether `--compare` judges the figure with run `baseline` as its baseline."""
        if figure.judged_as != "share":
            return figure.judged_as is not None
        summary = self.runs[baseline].summaries.get(model)
        return summary is not None and self.thresholds.judges_share(summary)

    def movement(self, before: int, after: int, model: str, figure: Figure) -> Step | None:
        """The step from run `before` to run `after`, or None where the figure did not move."""
        old, new = self.value(before, model, figure), self.value(after, model, figure)
        if old is None or new is None or figure.judged_as is None:
            return None
        kind = figure.judged_as
        for direction, base_run, now_run in (("up", before, after), ("down", after, before)):
            baseline, now = self.value(base_run, model, figure), self.value(now_run, model, figure)
            if not self.judges(base_run, model, figure):
                continue
            if self.thresholds.exceeds(kind, baseline, now):
                limit = self.thresholds.limit(kind, baseline)
                return Step(
                    after,
                    direction,
                    (
                        f"{model} {figure.label}: {_format(figure, old)} at "
                        f"{self.runs[before].label} -> {_format(figure, new)} at "
                        f"{self.runs[after].label}; {self.runs[now_run].label} is past the limit "
                        f"{_format(figure, limit)} of {self.runs[base_run].label}"
                    ),
                )
        return None

    def steps(self, model: str, figure: Figure) -> tuple[Step, ...]:
        """Every step of a figure, each run against the previous run that has the figure."""
        present = [i for i, v in enumerate(self.values(model, figure)) if v is not None]
        # Neighbouring pairs: one fewer than the items, so zip stops early on purpose.
        found = (
            self.movement(a, b, model, figure) for a, b in zip(present, present[1:], strict=False)
        )
        return tuple(step for step in found if step is not None)


def group_runs(
    runs: Sequence[Run], thresholds: Thresholds, order: str = "commit"
) -> list[MachineHistory]:
    """The runs by machine, each group in `order` (see `ORDERS`); groups by first appearance."""
    ordered = _order(runs, order)
    machines = list(dict.fromkeys(run.machine for run in ordered))
    return [
        MachineHistory(machine, tuple(r for r in ordered if r.machine == machine), thresholds)
        for machine in machines
    ]


def _run_labels(history: MachineHistory) -> list[str]:
    """Each run's label, with `#2`, `#3` after a commit that was run again."""
    labels, seen = [], {}
    for run in history.runs:
        seen[run.label] = seen.get(run.label, 0) + 1
        labels.append(run.label if seen[run.label] == 1 else f"{run.label}#{seen[run.label]}")
    return labels


def _model_charts(history: MachineHistory, model: str) -> str:
    labels = _run_labels(history)
    figures = []
    for chart, title, unit, reference in _CHARTS:
        series = [
            Series(f.key, f.label, f.color, history.values(model, f), history.steps(model, f))
            for f in FIGURES
            if f.chart == chart and any(v is not None for v in history.values(model, f))
        ]
        if series:
            figures.append(
                chart_figure(
                    "lines",
                    title,
                    unit,
                    labels,
                    series,
                    reference=reference,
                    attributes={"data-model": model, "data-chart": chart},
                )
            )
    return f'<div class="charts">{"".join(figures)}</div>'


def _change(figure: Figure, old: float | None, new: float) -> str:
    if old is None:
        return "-"
    if figure.chart == "shares":
        return f"{(new - old) * 100:+.3f} points"
    return f"{(new / old - 1):+.2%}" if old else "-"


def _against(
    history: MachineHistory, base: int | None, last: int, model: str, figure: Figure
) -> tuple[str, Step | None]:
    """The cell of the latest run against run `base`: the change and the rule's verdict."""
    if base is None:
        return "-", None
    step = history.movement(base, last, model, figure)
    if step is not None:
        verdict = f"moved {step.direction}"
    elif history.judges(base, model, figure) or history.judges(last, model, figure):
        verdict = "within"
    else:
        verdict = "not judged"
    change = _change(figure, history.value(base, model, figure), history.value(last, model, figure))
    return f"{change}, {verdict}", step


def _comparison_row(
    history: MachineHistory, model: str, figure: Figure
) -> tuple[list[str], str] | None:
    """A row of the table, and its class (the direction it moved), or None without the figure."""
    present = [i for i, v in enumerate(history.values(model, figure)) if v is not None]
    if not present:
        return None
    first, last = (present[0] if len(present) > 1 else None), present[-1]
    previous = present[-2] if len(present) > 1 else None
    cells = [model, f"{figure.chart}: {figure.label}"]
    # Each column is one run of the group; a figure missing there is shown from another run.
    for index, column in ((first, 0), (previous, len(history.runs) - 2), (last, -1)):
        if index is None:
            cells.append("-")
            continue
        text = _format(figure, history.value(index, model, figure))
        same = history.runs[index] is history.runs[column]
        cells.append(text if same else f"{text} ({history.runs[index].label})")
    steps = []
    for base in (first, previous):
        text, step = _against(history, base, last, model, figure)
        cells.append(text)
        steps += [step.direction] if step else []
    return cells, ("moved-up" if "up" in steps else "moved-down" if steps else "")


def _comparison_table(history: MachineHistory) -> str:
    """Per model and figure, the latest run against the first and the previous that have it."""
    runs = history.runs
    headers = [
        "model",
        "figure",
        f"first ({runs[0].label})",
        f"previous ({runs[-2].label if len(runs) > 1 else '-'})",
        f"latest ({runs[-1].label})",
        "latest vs first",
        "latest vs previous",
    ]
    found = [_comparison_row(history, m, f) for m in history.models for f in FIGURES]
    rows = [row for row in found if row is not None]
    return html_table(
        headers,
        [cells for cells, _ in rows],
        row_classes=[css for _, css in rows],
        table_class="latest",
    )


def _runs_table(histories: Sequence[MachineHistory]) -> str:
    headers = ["machine", "run", "commit", "commit time", "run time", "models", "file"]
    rows = [
        [
            f"{m + 1}",
            label,
            run.commit or "?",
            run.commit_time or "?",
            run.run_time or "?",
            str(len(run.summaries)),
            run.path.name
            if run.path.name != "results.json"
            else f"{run.path.parent.name}/{run.path.name}",
        ]
        for m, history in enumerate(histories)
        for label, run in zip(_run_labels(history), history.runs, strict=True)
    ]
    return html_table(headers, rows, table_class="runs")


def _rule(thresholds: Thresholds) -> str:
    return (
        f"<p id='rule'>The rule of <code>python -m bench --compare</code>: "
        f"{html.escape(thresholds.describe())}. A step is marked where a figure crossed that "
        "limit against the previous run of the same machine: up (&#9650;, red), where "
        "<code>--compare</code> of the later run against the earlier would fail; down "
        "(&#9660;, green), where the earlier run against the later would. The bytes limit "
        "applies to the bytes before pruning, after pruning and after deduplication; the "
        "share limit to the filter's and the deduplication's shares. The to_executorch "
        "ratios are drawn, not judged, as <code>--compare</code> does not judge them.</p>"
    )


def _summary(histories: Sequence[MachineHistory]) -> str:
    runs = sum(len(h.runs) for h in histories)
    steps = [
        step for h in histories for model in h.models for f in FIGURES for step in h.steps(model, f)
    ]
    up = sum(step.direction == "up" for step in steps)
    text = (
        f"{runs} runs on {len(histories)} machine{'s' if len(histories) != 1 else ''}; "
        f"{len(steps)} steps past the --compare limits ({up} up, {len(steps) - up} down)."
    )
    for number, history in enumerate(histories, 1):
        latest = history.runs[-1]
        costliest = costliest_call(list(latest.summaries.values()), list(latest.dedupe.values()))
        if costliest is not None:
            text += f" Machine {number}, latest run ({latest.label}): {costliest.describe()}."
    return f'<p class="summary" id="summary">{html.escape(text)}</p>'


def render_history(histories: Sequence[MachineHistory]) -> str:
    """The history page: the rule, the runs, and per machine its table and its models' charts."""
    sections = []
    for number, history in enumerate(histories, 1):
        models = "".join(
            f"<h3>{html.escape(model)}</h3>{_model_charts(history, model)}"
            for model in history.models
        )
        sections.append(
            f'<section class="machine" data-machine="{html.escape(history.machine)}">'
            f"<h2>Machine {number}: {html.escape(history.machine)}</h2>"
            f"<p>{len(history.runs)} runs, first {html.escape(history.runs[0].label)}, "
            f"latest {html.escape(history.runs[-1].label)}.</p>"
            f"<h3>The latest run against the first and the previous</h3>"
            f"{_comparison_table(history)}{models}</section>"
        )
    return render_page(
        "emitter_filter benchmarks across commits",
        "<h1>emitter_filter benchmarks across commits</h1>"
        + _summary(histories)
        + _rule(histories[0].thresholds if histories else Thresholds())
        + "<p>Runs of different machines are shown apart, each machine named by its CPU, "
        "core count, architecture and OS (a host name changes with every CI job). Every "
        "ratio and share divides figures of one run.</p>"
        + _runs_table(histories)
        + "".join(sections),
    )


def write_history(path: Path, histories: Sequence[MachineHistory]) -> None:
    """Writes `render_history(histories)` to `path`."""
    write_page(path, render_history(histories))
    logger.info("wrote %s", path)


def format_steps(histories: Sequence[MachineHistory]) -> str:
    """One line per step, for the terminal."""
    lines = [
        f"machine {number}: {step.direction}: {step.reason}"
        for number, history in enumerate(histories, 1)
        for model in history.models
        for f in FIGURES
        for step in history.steps(model, f)
    ]
    return "\n".join(lines) if lines else "no step past the --compare limits"
