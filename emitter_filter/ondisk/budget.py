"""A committed size budget for `.pte` files: `emitter-filter budget write` and `check`.

    pte-budget.json  {"schema": "emitter-filter-budget/1",
                      "files": {"models/model.pte": {"bytes": N, "storage": {...}, "parts": [...]}}}

`write_budget` records each file's size, its bytes per storage and its parts
(`explain`'s, without offsets' meaning: what `diff` needs to match them again).
`check_budget` explains each file again and compares it with its record: a file
larger than its recorded bytes plus the tolerance is over budget, and the
`diff` against the recorded parts says which entries grew, matched as `diff`
matches two files (`diff.diff_parts`): the recorded file's bytes are gone, so
each tensor's sha256 is recorded to match it by content (a budget written
before it was recorded matches by name and readers only). The pytest
plugin's `pte_budget` fixture and the pre-commit hook read the same file.
Each method's planned memory (`method_memory`) is recorded too, and a method that
plans more than its record plus the tolerance is over budget, named with the
memory ids that grew (a budget written before planned memory was recorded gates
bytes only). `benchmark_json` gives the sizes in the form github-action-benchmark reads
(`customSmallerIsBetter`: a list of `{name, unit, value}`).
"""

from __future__ import annotations

import contextlib
import fractions
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from emitter_filter.errors import PteFormatError
from emitter_filter.ondisk.budget_schema import schema_error
from emitter_filter.ondisk.diff import HAS_BYTES, SizeDiff, diff_parts, digest_parts, totals_of
from emitter_filter.ondisk.explain import Explanation, Part, explain_file
from emitter_filter.ondisk.method_memory import (
    memory_changes,
    memory_over_budget,
    memory_record,
    recorded_memory,
)
from emitter_filter.ondisk.read.byte_source import open_sources
from emitter_filter.ondisk.read.data_files import data_files_for
from emitter_filter.ondisk.read.readers import Reader
from emitter_filter.ondisk.write.small_files import write_text
from emitter_filter.ondisk.write.targets import check_outputs

__all__ = [
    "JSON_SCHEMA",
    "BudgetCheck",
    "record_explanation",
    "budget_document",
    "write_budget",
    "read_budget",
    "check_budget",
    "benchmark_json",
]

#: The value of the "schema" key of a budget file.
JSON_SCHEMA = "emitter-filter-budget/1"
# Where its JSON Schema is published (`budget_schema.BUDGET_SCHEMA`).
_SCHEMA_PAGE = "see docs/budget-schema.json"


def _part_record(part: Part, digest) -> dict:
    content = digest(part) if part.storage in HAS_BYTES and part.nbytes else None
    return {
        "storage": part.storage,
        "index": part.index,
        "tag": part.tag,
        "bytes": part.nbytes,
        "status": part.status,
        "dtype": part.dtype,
        "shape": None if part.shape is None else list(part.shape),
        "names": list(part.names),
        "readers": [[r.plan, r.op, r.arg, r.ordinal, r.key] for r in part.readers],
        **({} if content is None else {"sha256": content.hex()}),
    }


def _part_from_record(file: str, record: Mapping) -> Part:
    shape = record.get("shape")
    return Part(
        file,
        -1,
        int(record["bytes"]),
        record["storage"],
        record.get("index"),
        record.get("tag"),
        record.get("status", "live"),
        record.get("dtype"),
        None if shape is None else tuple(shape),
        tuple(record.get("names", ())),
        tuple(Reader(*reader) for reader in record.get("readers", ())),
    )


def record_explanation(explanation: Explanation, digest=None) -> dict:
    """One file's budget record: its size, bytes per storage and status, and its parts.

    `digest` (`diff.digest_parts` of the open file) adds each tensor's sha256.
    """
    digest = digest or (lambda part: None)
    return {
        "bytes": explanation.file_bytes,
        "totals": totals_of(explanation.parts),
        "parts": [_part_record(p, digest) for p in explanation.parts if p.storage != "padding"],
        "methods": memory_record(explanation.memory),
    }


def budget_document(
    paths: Sequence[str | os.PathLike],
    data: Sequence = (),
    *,
    data_beside: bool = True,
) -> tuple[dict, list[Explanation]]:
    """Explains each `.pte` with the `.ptd` files it reads: the budget file's document, and
    the explanations.

    Files are keyed by the path as given, so give them as the check will (relative
    to the repository, as pre-commit passes them). `data` and `data_beside` as
    `data_files.data_files_for` takes them: a program's record counts its `.ptd` files,
    so that the check sees one grow.
    """
    pte_files = [os.fspath(p) for p in paths]
    data_of = data_files_for(pte_files, data, beside=data_beside)
    explanations = [explain_file(p, files) for p, files in zip(pte_files, data_of, strict=True)]
    files = {}
    for path, ptds, explanation in zip(pte_files, data_of, explanations, strict=True):
        with contextlib.ExitStack() as stack:
            digest = digest_parts(open_sources(stack, (path, *ptds)))
            files[path] = {**record_explanation(explanation, digest), "data": list(ptds)}
    return {"schema": JSON_SCHEMA, "files": files}, explanations


def write_budget(
    paths: Sequence[str | os.PathLike],
    out: str | os.PathLike,
    data: Sequence = (),
    *,
    data_beside: bool = True,
) -> tuple[dict, list[Explanation]]:
    """Explains each `.pte` and writes their records to `out` (atomically), as
    `budget_document` makes them."""
    check_outputs([os.fspath(p) for p in paths], [os.fspath(out)], "budget write")
    document, explanations = budget_document(paths, data, data_beside=data_beside)
    write_text(out, json.dumps(document, indent=2) + "\n", inputs=[os.fspath(p) for p in paths])
    return document, explanations


def read_budget(path: str | os.PathLike) -> dict:
    """Reads a budget file, checking it against its JSON Schema (`budget_schema`).

    Raises:
        PteFormatError: Not a budget file of this schema: the first place that is not.
    """
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8") as f:
            document = json.load(f)
    except OSError as error:
        raise PteFormatError(name, f"cannot read: {error.strerror}") from error
    except (ValueError, RecursionError) as error:  # RecursionError: nested too deep
        raise PteFormatError(name, f"not JSON: {error}") from error
    if not isinstance(document, dict) or document.get("schema") != JSON_SCHEMA:
        found = document.get("schema") if isinstance(document, dict) else None
        raise PteFormatError(name, f"schema {found!r}, expected {JSON_SCHEMA!r}")
    problem = schema_error(document)
    if problem is not None:
        raise PteFormatError(name, f"not a budget file ({_SCHEMA_PAGE}): {problem}")
    for path, record in document["files"].items():
        for method, entry in record.get("methods", {}).items():
            for key in entry.get("memory_ids", {}):
                if not (key.isascii() and key.isdigit() and int(key) > 0):
                    raise PteFormatError(
                        name,
                        f"not a budget file ({_SCHEMA_PAGE}): files.{path}.methods.{method}"
                        f".memory_ids has {key!r}, not a memory id (1, 2, ...)",
                    )
    return document


@dataclass(frozen=True)
class BudgetCheck:
    """One file against its record.

    Attributes:
        path: The file, as given.
        explanation: The file explained now.
        budget_bytes: The recorded size; None when the budget has no record of it.
        allowed_bytes: The recorded size plus the tolerance.
        diff: The file against its record (None without a record).
        memory_over: A line per method planning more memory than its record allows
            (`method_memory.memory_over_budget`); None when the record has none.
    """

    path: str
    explanation: Explanation
    budget_bytes: int | None
    allowed_bytes: int | None
    diff: SizeDiff | None
    memory_over: tuple[str, ...] | None = None

    @property
    def bytes_over(self) -> bool:
        if self.diff is None or self.allowed_bytes is None:
            return True  # No record (then neither is set): nothing to be within.
        return self.diff.new_bytes > self.allowed_bytes

    @property
    def over(self) -> bool:
        return self.bytes_over or bool(self.memory_over)

    def summary(self) -> str:
        if self.diff is None:
            return f"{self.path}: no budget recorded (run emitter-filter budget write)"
        verdict = "over budget" if self.bytes_over else "within budget"
        lines = [
            f"{self.path}: {self.diff.new_bytes:,} bytes, budget {self.budget_bytes:,} "
            f"(allowed {self.allowed_bytes:,}): {verdict}"
        ]
        if self.memory_over is None:
            lines.append(f"{self.path}: no planned memory recorded (budget write records it)")
        else:
            lines += [f"{self.path}: over budget: {line}" for line in self.memory_over]
        return "\n".join(lines)


def check_budget(
    paths: Sequence[str | os.PathLike],
    budget: Mapping,
    tolerance_percent: float = 0.0,
    data: Sequence = (),
    *,
    data_beside: bool = True,
) -> list[BudgetCheck]:
    """Compares each `.pte`, with the `.ptd` files it reads (`data_files.data_files_for`
    of `data`), with its record in `budget` (what `read_budget` returned).

    Raises:
        ValueError: `tolerance_percent` is negative, infinite or not a number.
    """
    if not (math.isfinite(tolerance_percent) and tolerance_percent >= 0):
        raise ValueError(f"the tolerance must be a percentage, 0 or more: {tolerance_percent!r}")
    checks = []
    pte_files = [os.fspath(p) for p in paths]
    data_of = data_files_for(pte_files, data, beside=data_beside)
    for path, ptds in zip(pte_files, data_of, strict=True):
        record = budget["files"].get(path)
        explanation = explain_file(path, ptds)
        if record is None:
            checks.append(BudgetCheck(path, explanation, None, None, None))
            continue
        recorded = [_part_from_record(f"{path} (budget)", r) for r in record["parts"]]
        digests = {
            id(p): bytes.fromhex(r["sha256"])
            for p, r in zip(recorded, record["parts"], strict=True)
            if r.get("sha256")
        }
        with contextlib.ExitStack() as stack:
            read = digest_parts(open_sources(stack, (path, *ptds)))

            def digest(part: Part, read=read, digests=digests) -> bytes | None:
                return digests.get(id(part)) if id(part) in digests else read(part)

            changes = tuple(diff_parts(recorded, explanation.parts, digest))
        diff = SizeDiff(
            f"{path} (budget)",
            path,
            int(record["bytes"]),
            explanation.file_bytes,
            record.get("totals", {}),
            totals_of(explanation.parts),
            changes,
            memory_changes(recorded_memory(record["methods"]), explanation.memory)
            if "methods" in record
            else (),
        )
        memory_over = (
            memory_over_budget(record["methods"], explanation.memory, tolerance_percent)
            if "methods" in record
            else None
        )
        # Exactly, as a fraction: a float product overflows for a huge tolerance.
        allowed = int(record["bytes"] * (1 + fractions.Fraction(tolerance_percent) / 100))
        checks.append(
            BudgetCheck(path, explanation, int(record["bytes"]), allowed, diff, memory_over)
        )
    return checks


def benchmark_json(explanations: Sequence[Explanation]) -> list[dict]:
    """Sizes as github-action-benchmark's `customSmallerIsBetter` tool reads them.

    One entry per file (its bytes), and one per storage holding bytes
    (`model.pte constant`), so a chart shows which part moved.
    """
    entries = []
    for explanation in explanations:
        entries.append({"name": explanation.path, "unit": "bytes", "value": explanation.file_bytes})
        for storage, nbytes in totals_of(explanation.parts).items():
            if not storage.startswith("status:"):
                entries.append(
                    {"name": f"{explanation.path} {storage}", "unit": "bytes", "value": nbytes}
                )
    return entries
