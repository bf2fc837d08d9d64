"""What `verify` compares and what it found: the programs, the method pairs, the first
difference, and the report that renders itself (`VerifyReport.to_json`, `verify --json`).

Data only, no runtime: `compare` runs the pairs and builds these.
"""

from __future__ import annotations

from dataclasses import dataclass

from emitter_filter.errors import VerifyError

__all__ = ["JSON_SCHEMA", "Program", "MethodPair", "Difference", "VerifyReport"]

#: The value of the "schema" key of `VerifyReport.to_json()` (`verify --json`).
JSON_SCHEMA = "emitter-filter-verify/1"


@dataclass(frozen=True)
class Program:
    """A `.pte` as a runtime loads it: with its `.ptd` files (at most one)."""

    pte: str
    data: tuple[str, ...] = ()

    def data_file(self) -> str | None:
        """The one `.ptd` a runtime's Python API takes, or None."""
        if len(self.data) > 1:
            raise VerifyError(
                f"{self.pte} loads with {len(self.data)} .ptd files "
                f"({', '.join(self.data)}); the runtimes' Python APIs load one"
            )
        return self.data[0] if self.data else None


@dataclass(frozen=True)
class MethodPair:
    """The method `new_method` of `new`, to compute what `old_method` of `old` computes."""

    new: Program
    new_method: str
    old: Program
    old_method: str

    def describe(self) -> str:
        return (
            f"{self.new.pte} method {self.new_method!r} (from {self.old.pte} method "
            f"{self.old_method!r})"
        )


@dataclass(frozen=True)
class Difference:
    """Where a new method first computes otherwise.

    Attributes:
        pair: The methods compared.
        output: The index of the first output that differs, or None when the method
            does not load or run, or its inputs or output count differ.
        reason: What differs, one line.
    """

    pair: MethodPair
    output: int | None
    reason: str

    def line(self) -> str:
        where = "" if self.output is None else f" output {self.output}"
        return f"{self.pair.describe()}{where}: {self.reason}"


@dataclass(frozen=True)
class VerifyReport:
    """What `verify_pairs` ran.

    Attributes:
        runtime: The runtime both sides ran in.
        verified: The pairs that computed alike, in order.
        difference: The first that did not, or None; the pairs after it are not run.
        seeded: How many of the methods ran on seeded inputs (the rest on `--inputs`).
        seconds: Wall time.
    """

    runtime: str
    verified: tuple[MethodPair, ...]
    difference: Difference | None
    seeded: int
    seconds: float

    @property
    def ok(self) -> bool:
        return self.difference is None

    def summary(self) -> str:
        """One line, for the CLI."""
        if self.difference is not None:
            where = f" in {self.runtime}" if self.runtime else " (the files' metadata)"
            return f"verify failed{where}: {self.difference.line()}"
        count = len(self.verified)
        given = count - self.seeded
        return (
            f"verified in {self.runtime}: {count} method{'s' if count != 1 else ''}, "
            f"outputs bit-identical ("
            + (f"{self.seeded} on seeded inputs" if self.seeded else "")
            + (", " if self.seeded and given else "")
            + (f"{given} on --inputs" if given else "")
            + f") in {self.seconds:.2f} s"
        )

    def to_json(self) -> dict:
        def pair(p: MethodPair) -> dict:
            return {
                "new": p.new.pte,
                "new_method": p.new_method,
                "new_data": list(p.new.data),
                "old": p.old.pte,
                "old_method": p.old_method,
                "old_data": list(p.old.data),
            }

        difference = self.difference
        return {
            "schema": JSON_SCHEMA,
            "runtime": self.runtime,
            "ok": self.ok,
            "verified": [pair(p) for p in self.verified],
            "difference": None
            if difference is None
            else {
                **pair(difference.pair),
                "output": difference.output,
                "reason": difference.reason,
            },
            "seeded": self.seeded,
            "seconds": self.seconds,
        }
