"""`budget write` and `budget check`: record the files' sizes in a committed budget, and
fail on growth past it."""

from __future__ import annotations

import argparse
import json
import sys

from emitter_filter.cli.common import (
    EXIT_DEAD_BYTES,
    EXIT_OK,
    _add_data_arguments,
    _add_hud_arguments,
    _hud_file,
    _hud_usage,
    _percent,
    _print_growth,
    _usage_error,
)


def _add_budget_parsers(commands) -> list[argparse.ArgumentParser]:
    """budget and its two actions, write and check."""
    budget = commands.add_parser(
        "budget",
        help="record .pte sizes in a committed budget file, and check files against it",
        description=(
            "budget write FILE... -o pte-budget.json records each file's bytes, bytes per "
            "storage, entries and each method's planned memory; budget check FILE... --budget "
            "pte-budget.json exits 1 if a file grew past its budget (or has none), printing the "
            "diff against the recorded entries, or a method plans more memory than recorded. "
            "--benchmark-json writes the sizes for github-action-benchmark "
            "(customSmallerIsBetter)."
        ),
    )
    actions = budget.add_subparsers(dest="budget_action", required=True, metavar="ACTION")
    write = _add_write_parser(actions)
    check = _add_check_parser(actions)
    for action in (write, check):
        _add_file_arguments(action)
    return [budget, write, check]


def _add_write_parser(actions) -> argparse.ArgumentParser:
    write = actions.add_parser(
        "write",
        help="record the files' sizes and entries",
        description=(
            "Explain each FILE.pte and record its bytes, its bytes per storage and status, "
            "its parts (each tensor's sha256 too, to match it again by content) and each "
            "method's planned memory (non_const_buffer_sizes, per memory id) in "
            "BUDGET.json, keyed by the path as given; commit it. Never writes over an input; "
            "writes atomically, with --benchmark-json both or neither. Exit 2 if a file is "
            "malformed or an output cannot be written."
        ),
    )
    write.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="BUDGET.json",
        help="where to write the budget (replaced atomically; commit it)",
    )
    return write


def _add_check_parser(actions) -> argparse.ArgumentParser:
    check = actions.add_parser(
        "check",
        help="fail on growth past the recorded budget",
        description=(
            "Explain each FILE.pte again and compare it with its record in BUDGET.json: a "
            "file larger than its recorded bytes plus --tolerance percent, or with no record, "
            "is over budget, and the diff against the recorded parts says which entries grew; "
            "so is a method planning more memory than its record plus --tolerance, named with "
            "the memory ids that grew (a budget written before planned memory was recorded "
            "gates bytes only). Exit 1 if a file is over budget, 2 if a file is malformed or BUDGET.json does "
            "not follow its schema (docs/budget-schema.json)."
        ),
    )
    check.add_argument(
        "--budget",
        required=True,
        metavar="BUDGET.json",
        help="the budget that budget write recorded",
    )
    check.add_argument(
        "--tolerance",
        type=_percent,
        default=0.0,
        metavar="PCT",
        help="allow this much growth, in percent of the recorded bytes (and of each method's "
        "recorded planned memory)",
    )
    check.add_argument(
        "--markdown",
        action="store_true",
        help="print the diffs as tables for a pull request's comment",
    )
    _add_hud_arguments(check)
    return check


def _add_file_arguments(action: argparse.ArgumentParser) -> None:
    """The program files and their .ptd files, and --benchmark-json: both actions'."""
    action.add_argument(
        "pte",
        nargs="+",
        metavar="FILE.pte",
        help="the program files, named as the check will name them "
        "(relative to the repository, as pre-commit passes them)",
    )
    action.add_argument(
        "--benchmark-json",
        metavar="OUT.json",
        help="also write the sizes as github-action-benchmark reads them",
    )
    _add_data_arguments(action, "each program's .ptd counts in its size", old_ptd=False)


def _budget(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    from emitter_filter.ondisk.write.targets import check_outputs

    writing = options.budget_action == "write"
    refused_hud = None if writing else _hud_usage(options)
    if refused_hud:
        return _usage_error("budget check", refused_hud)
    # Every output refused, or every one written: checked before any work.
    outputs = [
        o
        for o in (
            options.output if writing else None,
            options.benchmark_json,
            None if writing else options.hud_json,
        )
        if o is not None
    ]
    inputs = [*options.pte, *([] if writing else [options.budget])]
    check_outputs(inputs, outputs, f"budget {options.budget_action}")
    if writing:
        return _budget_write(options, inputs)
    return _budget_check(options, inputs)


def _budget_write(options: argparse.Namespace, inputs: list[str]) -> int:
    """`budget write`: the budget (and --benchmark-json) written, one line saying so."""
    from emitter_filter.ondisk.budget import budget_document
    from emitter_filter.ondisk.write.small_files import write_files

    document, explanations = budget_document(
        options.pte, options.data, data_beside=options.data_beside
    )
    files = [(options.output, (json.dumps(document, indent=2) + "\n").encode())]
    files += _benchmark_files(options, explanations)
    write_files(files, inputs, "budget write")
    print(
        f"wrote {options.output}: "
        + ", ".join(f"{e.path} {e.file_bytes:,} B" for e in explanations)
    )
    return EXIT_OK


def _budget_check(options: argparse.Namespace, inputs: list[str]) -> int:
    """`budget check`: each file's line, the diff of each over budget; exit 1 if one is."""
    from emitter_filter.ondisk.budget import check_budget, read_budget
    from emitter_filter.ondisk.write.small_files import write_files

    checks = check_budget(
        options.pte,
        read_budget(options.budget),
        options.tolerance,
        options.data,
        data_beside=options.data_beside,
    )
    explanations = [c.explanation for c in checks]
    over = [c for c in checks if c.over]
    files = _benchmark_files(options, explanations)
    if options.hud_json is not None:
        files.append(_hud_file(options, explanations))
    write_files(files, inputs, "budget check")
    for check in checks:
        print(check.summary())
        if check.over and check.diff is not None:
            print(check.diff.to_markdown() if options.markdown else check.diff.to_text())
    for check in over:
        if check.diff is not None and check.bytes_over:
            _print_growth(check.diff, f"the budget ({check.allowed_bytes:,} B allowed)")
        for line in check.memory_over or ():
            print(f"emitter-filter: {check.path}: {line}", file=sys.stderr)
    return EXIT_DEAD_BYTES if over else EXIT_OK


def _benchmark_files(options: argparse.Namespace, explanations) -> list[tuple[str, bytes]]:
    """The --benchmark-json file, if asked for."""
    from emitter_filter.ondisk.budget import benchmark_json

    if options.benchmark_json is None:
        return []
    return [(options.benchmark_json, json.dumps(benchmark_json(explanations), indent=2).encode())]
