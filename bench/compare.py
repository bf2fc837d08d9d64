"""Regression check of a run against a baseline run: `python -m bench --compare`.

Two figures per model can regress:

- pruned bytes (`.pte` + `.ptd` with `prune_constants=True`): deterministic for a
  given ExecuTorch, so the allowance is small and only covers serializer drift;
- the filter's share of `to_executorch` time: a ratio measured within one call,
  which cancels most of the machine's noise but not all of it, so the allowance
  is a factor plus an absolute slack. It is judged only for models whose
  `to_executorch` took at least `share_min_seconds` in the baseline: below that,
  a call of ~10 ms against a filter of ~0.2 ms moves by whole points when a
  neighbour process wakes up (measured: 0.2% in one run, 1.4% in the next).

Models present in only one of the two runs are listed and do not fail the check:
a quick run compared with a full baseline is a normal thing to do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bench.results import ModelSummary
from bench.table import format_bytes

__all__ = ["Thresholds", "Finding", "Comparison", "compare"]


@dataclass(frozen=True)
class Thresholds:
    """How much worse a figure may get before it is a regression.

    Attributes:
        bytes_growth: Allowed relative growth of pruned bytes (0.005 = +0.5%).
        share_factor: Allowed factor on the filter's share of `to_executorch`.
        share_slack: Allowed absolute growth of the share on top (0.002 = +0.2 points).
        share_min_seconds: The share is judged only when the baseline's upstream
            `to_executorch` took at least this long.
    """

    bytes_growth: float = 0.005
    share_factor: float = 1.5
    share_slack: float = 0.002
    share_min_seconds: float = 0.25

    def describe(self) -> str:
        return (
            f"a regression is pruned .pte+.ptd bytes > baseline x {1 + self.bytes_growth:g}, "
            f"or filter share > baseline share x {self.share_factor:g} + "
            f"{self.share_slack * 100:g} percentage points (share judged where the "
            f"baseline's to_executorch took >= {self.share_min_seconds:g} s)"
        )

    def judges_share(self, baseline: ModelSummary) -> bool:
        return baseline.upstream_seconds >= self.share_min_seconds

    def bytes_limit(self, baseline: int) -> float:
        return baseline * (1 + self.bytes_growth)

    def share_limit(self, baseline: float) -> float:
        return baseline * self.share_factor + self.share_slack

    def limit(self, kind: str, baseline: float) -> float:
        """The limit of a "bytes" or a "share" figure whose baseline value is `baseline`."""
        if kind == "bytes":
            return self.bytes_limit(baseline)
        if kind == "share":
            return self.share_limit(baseline)
        raise ValueError(f"kind {kind!r}: expected 'bytes' or 'share'")

    def exceeds(self, kind: str, baseline: float, now: float) -> bool:
        """Whether `now` is past the limit of `baseline`.

        The one rule of `--compare`, which the history page also applies to
        every byte figure and every share it draws.
        """
        return now > self.limit(kind, baseline)


@dataclass(frozen=True)
class Finding:
    """One model's comparison; `regressions` is empty when it passed."""

    model: str
    baseline: ModelSummary | None
    current: ModelSummary | None
    regressions: tuple[str, ...]

    @property
    def status(self) -> str:
        if self.baseline is None:
            return "new"
        if self.current is None:
            return "not run"
        return "REGRESSED" if self.regressions else "ok"


@dataclass(frozen=True)
class Comparison:
    findings: tuple[Finding, ...]
    thresholds: Thresholds

    @property
    def regressed(self) -> bool:
        return any(f.regressions for f in self.findings)

    def format(self) -> str:
        """A table of every model's bytes and share, baseline -> current, with the verdict."""
        lines = [f"threshold: {self.thresholds.describe()}"]
        header = ("model", "pruned bytes (base -> now)", "filter share (base -> now)", "status")
        rows = [header]
        for f in self.findings:
            b, c = f.baseline, f.current
            unjudged = " (not judged)" if b and not self.thresholds.judges_share(b) else ""
            rows.append(
                (
                    f.model,
                    f"{format_bytes(b.bytes_after) if b else '-'} -> {format_bytes(c.bytes_after) if c else '-'}",
                    f"{f'{b.filter_share:.2%}' if b else '-'} -> {f'{c.filter_share:.2%}' if c else '-'}"
                    + unjudged,
                    f.status,
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        lines += [
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in rows
        ]
        for f in self.findings:
            lines += [f"{f.model}: {reason}" for reason in f.regressions]
        return "\n".join(lines)


def _regressions(base: ModelSummary, now: ModelSummary, thresholds: Thresholds) -> tuple[str, ...]:
    found = []
    bytes_limit = thresholds.bytes_limit(base.bytes_after)
    if thresholds.exceeds("bytes", base.bytes_after, now.bytes_after):
        found.append(
            f"pruned bytes {now.bytes_after:,} > limit {bytes_limit:,.0f} "
            f"(baseline {base.bytes_after:,})"
        )
    share_limit = thresholds.share_limit(base.filter_share)
    if thresholds.judges_share(base) and thresholds.exceeds(
        "share", base.filter_share, now.filter_share
    ):
        found.append(
            f"filter share {now.filter_share:.3%} > limit {share_limit:.3%} "
            f"(baseline {base.filter_share:.3%})"
        )
    return tuple(found)


def compare(
    baseline: Sequence[ModelSummary],
    current: Sequence[ModelSummary],
    thresholds: Thresholds = Thresholds(),
) -> Comparison:
    """Compares two runs model by model. Neither argument is modified."""
    base = {s.model: s for s in baseline}
    now = {s.model: s for s in current}
    findings = []
    for model in [*base, *(m for m in now if m not in base)]:
        b, c = base.get(model), now.get(model)
        regressions = _regressions(b, c, thresholds) if b and c else ()
        findings.append(Finding(model, b, c, regressions))
    return Comparison(tuple(findings), thresholds)
