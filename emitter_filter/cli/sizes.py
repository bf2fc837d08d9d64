"""The size reports: `explain`, `diff` and `budget`."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import TYPE_CHECKING

from emitter_filter.cli.common import (
    EXIT_DEAD_BYTES,
    EXIT_OK,
    EXIT_USAGE,
    _add_data_arguments,
    _add_data_beside,
    _add_min_bytes,
    _any_ptn,
    _byte_count,
    _DeprecatedData,
    _min_bytes,
    _paired,
    _percent,
    _ptn_refused,
    _usage_error,
    _validity_lines,
)

if TYPE_CHECKING:
    from emitter_filter.ondisk.diff import SizeDiff
    from emitter_filter.ondisk.diff_set import SetDiff

# Parts (or groups) the `explain` table lists by default; --json lists them all.
_TABLE_PARTS = 10


def _add_size_commands(commands) -> list[argparse.ArgumentParser]:
    """explain, diff and budget: where a file's bytes go, and why it grew."""
    return [_add_explain(commands), _add_diff(commands), *_add_budget(commands)]


def _add_explain(commands) -> argparse.ArgumentParser:
    from emitter_filter.ondisk.analyse.explain_terms import GROUPINGS

    explain = commands.add_parser(
        "explain",
        help="attribute every byte of a .pte (and its .ptd files): what holds it, who reads it",
        description=(
            "Attribute every byte of MODEL.pte (and its .ptd files) to the header, the program "
            "flatbuffer, each constant, mutable, named-data and .ptd entry, each delegate blob "
            "or padding, the parts adding up to the file sizes exactly; each with its dtype, "
            "shape, names, readers and status (live, dead, duplicated, shared), as audit finds "
            "them. Needs only flatbuffers (--names imports torch). Exit 2 if a file is malformed."
        ),
    )
    explain.add_argument(
        "pte",
        nargs="+",
        metavar="MODEL.pte",
        help="the program file; several are explained as one set (each file's bytes once, "
        "what the set stores twice duplicated, each program's own in --json)",
    )
    _add_data_arguments(explain, "each program's pairing is in the header and --json")
    explain.add_argument(
        "--names",
        metavar="FILE",
        help="a torch.export .pt2 or an ETRecord of the same model: name "
        "constant and mutable entries by content (imports torch)",
    )
    explain.add_argument("--json", action="store_true", help="print the explanation as JSON")
    _add_min_bytes(explain)
    explain.add_argument(
        "--html",
        metavar="OUT.html",
        help="also write a self-contained page with a treemap of the bytes",
    )
    explain.add_argument(
        "--top",
        type=_byte_count,
        default=None,
        metavar="N",
        help="the N largest parts (or groups) to list (default 10; --json: all parts unless given)",
    )
    explain.add_argument(
        "--by",
        choices=GROUPINGS,
        default=None,
        help="group the bytes by this instead of listing parts",
    )
    explain.add_argument(
        "--node-data",
        metavar="OUT.json",
        help="also write Model Explorer node data: the bytes each call reads, keyed by the "
        "node ids pte-adapter-model-explorer gives the file's graphs (load it beside the .pte)",
    )
    explain.add_argument(
        "--value",
        choices=("bytes", "dead", "duplicated"),
        default=None,
        help="what --node-data sums per node: every byte read (default: bytes), the dead "
        "ones, or the duplicated ones",
    )
    _add_hud_arguments(explain)
    return explain


def _add_hud_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--hud-json",
        metavar="OUT.json",
        help="also write PyTorch's benchmark dashboard (HUD) v3 records: one per part of "
        "the file (program, constants, delegates, named data, each .ptd, dead, duplicated, "
        "each method's planned memory), in MiB with the exact bytes beside (docs/hud.md)",
    )
    parser.add_argument(
        "--model-name",
        metavar="NAME",
        help="model.name in the --hud-json records (default: the .pte's name without .pte)",
    )


def _add_diff(commands) -> argparse.ArgumentParser:
    diff = commands.add_parser(
        "diff",
        help="say why a .pte grew: the entries added, removed, grown and shrunk",
        description=(
            "Explain OLD.pte and NEW.pte and match their entries (by name or key, then by "
            "readers, dtype and shape, then by content, then by readers alone); print the "
            "change by storage and status, then each entry that changed, largest first, and "
            "what changed (dtype, shape, newly dead, a new duplicate). Exit 1 if NEW exceeds "
            "OLD by more than --max-growth, 2 if a file is malformed."
        ),
    )
    diff.add_argument(
        "old",
        metavar="OLD.pte",
        help="the old program, or a directory of them (a set: programs matched by file name)",
    )
    diff.add_argument("new", metavar="NEW.pte", help="the new program, or a directory of them")
    for side in ("old", "new"):
        diff.add_argument(
            f"--{side}-data",
            action="append",
            default=[],
            metavar="IN.ptd",
            help=f"a .ptd {side.upper()}.pte loads with (repeatable; default: "
            "the .ptd beside it with its stem, if any)",
        )
        diff.add_argument(
            f"--{side}-ptd", dest=f"{side}_data", action=_DeprecatedData, help=argparse.SUPPRESS
        )
        diff.add_argument(
            f"--{side}-names",
            metavar="FILE",
            help=f"a .pt2 or ETRecord naming {side.upper()}.pte's entries (imports torch)",
        )
    _add_data_beside(diff, "--old-data or --new-data")
    diff.add_argument("--json", action="store_true", help="print the diff as JSON")
    diff.add_argument(
        "--markdown", action="store_true", help="print tables ready for a pull request's comment"
    )
    diff.add_argument(
        "--max-growth",
        metavar="BYTES|PCT%",
        help="exit 1 if NEW is larger than OLD by more than BYTES, or PCT%% of OLD; a "
        "negative limit (-5%%) asks NEW to be smaller by at least that",
    )
    # `--max-growth -5%` is a value, not an option: argparse takes only `-5` and `-.5` for one.
    diff._negative_number_matcher = re.compile(r"^-(?:\d+|\d*\.\d+)%?$")
    diff.add_argument(
        "--top",
        type=_byte_count,
        default=20,
        metavar="N",
        help="the N largest changes to list (default 20; --json: all)",
    )
    return diff


def _add_budget(commands) -> list[argparse.ArgumentParser]:
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
    for action in (write, check):
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
    return [budget, write, check]


def _explain(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    from emitter_filter.ondisk.read.data_files import data_files_for
    from emitter_filter.ondisk.write.small_files import write_files
    from emitter_filter.ondisk.write.targets import check_outputs

    if _any_ptn(options.pte):
        return _explain_ptn(options)
    if options.value is not None and options.node_data is None:
        return _usage_error(
            "explain", "--value says what --node-data sums; give --node-data OUT.json with it"
        )
    if len(options.pte) > 1 and (options.names is not None or options.node_data is not None):
        option = "--names" if options.names is not None else "--node-data"
        return _usage_error("explain", f"{option} takes one program, not a set")
    refused_hud = _hud_usage(options)
    if refused_hud:
        return _usage_error("explain", refused_hud)
    data_of = data_files_for(options.pte, options.data, beside=options.data_beside)
    # Every output refused, or every one written: checked before any work.
    outputs = [o for o in (options.html, options.node_data, options.hud_json) if o is not None]
    inputs = [*options.pte, *(f for files in data_of for f in files)]
    check_outputs(inputs, outputs, "explain")
    if len(options.pte) > 1:
        from emitter_filter.ondisk.explain_set import explain_set

        explanation = explain_set(
            options.pte,
            options.data,
            data_beside=options.data_beside,
            min_bytes=_min_bytes(options),
        )
    else:
        from emitter_filter.ondisk.explain import explain_file

        explanation = explain_file(options.pte[0], data_of[0], names=options.names)
    refused = [
        line
        for line, _ in (_validity_lines(p, d) for p, d in zip(options.pte, data_of, strict=True))
        if line
    ]
    if refused:
        print("\n".join(refused), file=sys.stderr)
        return EXIT_USAGE
    files, wrote = [], []
    if options.html is not None:
        from emitter_filter.ondisk.explain_page import render_explain_page

        page = render_explain_page(explanation).encode("utf-8")
        files.append((options.html, page))
        wrote.append(
            f"wrote {options.html} ({len(page):,} B): the treemap, offline; open it in a browser"
        )
    if options.node_data is not None:
        from emitter_filter.ondisk.node_data import node_data_file

        value = options.value or "bytes"
        document = node_data_file(options.pte[0], data_of[0], value, names=options.names)
        files.append((options.node_data, (json.dumps(document, indent=2) + "\n").encode()))
        wrote.append(
            f"wrote {options.node_data}: Model Explorer node data ({value} per node "
            f"of {len(document)} graph(s))"
        )
    if options.hud_json is not None:
        files.append(_hud_file(options, [explanation]))
        wrote.append(f"wrote {options.hud_json}: benchmark dashboard (v3) records")
    write_files(files, inputs, "explain")
    # On stderr, so that `--json` output stays one document.
    for line in wrote:
        print(line, file=sys.stderr)
    if options.json:
        print(json.dumps(explanation.to_json(options.top, options.by), indent=2))
    else:
        print(explanation.to_text(_TABLE_PARTS if options.top is None else options.top, options.by))
    return EXIT_OK


def _diff(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    from emitter_filter.ondisk.diff import diff_files, growth_limit

    try:
        limit = None if options.max_growth is None else growth_limit(options.max_growth)
    except ValueError as error:
        return _usage_error("diff", str(error))
    if _any_ptn([options.old, options.new]):
        return _diff_ptn(options, limit)
    sets = [os.path.isdir(options.old), os.path.isdir(options.new)]
    result: SetDiff | SizeDiff
    if any(sets):
        if not all(sets):
            directory, other = (options.old, options.new) if sets[0] else (options.new, options.old)
            what = "a file" if os.path.exists(other) else "not there"
            return _usage_error(
                "diff",
                f"{directory} is a directory but {other} is {what}: "
                "give two directories (sets of programs, each with its .ptd "
                "files beside it) or two .pte files",
            )
        if options.old_data or options.new_data or options.old_names or options.new_names:
            return _usage_error(
                "diff",
                "--old-data, --new-data and the --*-names options take "
                "two .pte files; two directories pair each program with the "
                ".ptd beside it",
            )
        from emitter_filter.ondisk.diff_set import diff_sets

        result = diff_sets(options.old, options.new, data_beside=options.data_beside)
        pairing = result.pairing()
    else:
        from emitter_filter.ondisk.read.data_files import data_files_for, program_data

        if options.old_data or options.new_data:
            old_data = program_data(options.old, options.old_data, beside=options.data_beside)
            new_data = program_data(options.new, options.new_data, beside=options.data_beside)
        else:  # one call: one warning for a .ptd beside both that cannot be read
            old_data, new_data = data_files_for(
                [options.old, options.new], beside=options.data_beside
            )
        result = diff_files(
            options.old,
            options.new,
            old_data,
            new_data,
            old_names=options.old_names,
            new_names=options.new_names,
        )
        pairing = ([options.old, options.new], [old_data, new_data])
    if options.json:
        print(json.dumps(_paired(result.to_json(), *pairing), indent=2))
    elif options.markdown:
        print(result.to_markdown(options.top))
    else:
        print(result.to_text(options.top))
    if limit is not None and result.over(limit):
        _print_growth(result, f"--max-growth {options.max_growth}")
        return EXIT_DEAD_BYTES
    return EXIT_OK


def _print_growth(result, limit: str) -> None:
    """On stderr: the growth over `limit`, and the entries that account for it."""
    if hasattr(result, "programs"):  # a set: what each program grew by
        print(
            f"emitter-filter: {result.new}: grew {result.delta:+,} bytes over {result.old}, "
            f"more than {limit}; from:",
            file=sys.stderr,
        )
        for name in result.added:
            print(f"  added {name}", file=sys.stderr)
        for name, diff in sorted(result.programs, key=lambda item: -item[1].delta):
            if diff.delta > 0:
                print(f"  {diff.delta:+,} B  {name}", file=sys.stderr)
        return
    print(
        f"emitter-filter: {result.new_path}: grew {result.delta:+,} bytes over {result.old_path}"
        f", more than {limit}; from:",
        file=sys.stderr,
    )
    for change in result.growth():
        notes = f" ({'; '.join(change.notes)})" if change.notes else ""
        print(f"  {change.delta:+,} B  {change.kind} {change.label}{notes}", file=sys.stderr)


def _budget(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    from emitter_filter.ondisk.budget import (
        benchmark_json,
        budget_document,
        check_budget,
        read_budget,
    )
    from emitter_filter.ondisk.write.small_files import write_files
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
    files = []
    if writing:
        document, explanations = budget_document(
            options.pte, options.data, data_beside=options.data_beside
        )
        files.append((options.output, (json.dumps(document, indent=2) + "\n").encode()))
        over = []
    else:
        checks = check_budget(
            options.pte,
            read_budget(options.budget),
            options.tolerance,
            options.data,
            data_beside=options.data_beside,
        )
        explanations = [c.explanation for c in checks]
        over = [c for c in checks if c.over]
    if options.benchmark_json is not None:
        files.append(
            (options.benchmark_json, json.dumps(benchmark_json(explanations), indent=2).encode())
        )
    if not writing and options.hud_json is not None:
        files.append(_hud_file(options, explanations))
    write_files(files, inputs, f"budget {options.budget_action}")
    if writing:
        print(
            f"wrote {options.output}: "
            + ", ".join(f"{e.path} {e.file_bytes:,} B" for e in explanations)
        )
        return EXIT_OK
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


def _hud_usage(options: argparse.Namespace) -> str | None:
    """Why the --hud-json options cannot be taken as given, if they cannot."""
    if options.model_name is not None and options.hud_json is None:
        return "--model-name names the model in --hud-json's records; give --hud-json OUT.json"
    if options.model_name is not None and len(options.pte) > 1:
        return "--model-name names one model; the records of several files take each one's name"
    return None


def _hud_file(options: argparse.Namespace, explanations) -> tuple[str, bytes]:
    from emitter_filter.ondisk.hud_records import hud_records

    records = hud_records(explanations, options.model_name)
    return options.hud_json, (json.dumps(records, indent=2) + "\n").encode()


def _explain_ptn(options: argparse.Namespace) -> int:
    """`explain` of one `.ptn`: every part of it."""
    from emitter_filter.ondisk.ptn_report import ptn_report

    refused = _ptn_refused("explain", options.pte, options)
    if refused is not None:
        return refused
    if len(options.pte) > 1:
        return _usage_error("explain", "explain takes one .ptn package")
    report = ptn_report(options.pte[0])
    if options.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(report.to_text(options.top))
    return EXIT_OK


def _diff_ptn(options: argparse.Namespace, limit) -> int:
    """`diff` of two `.ptn` packages, judged against --max-growth."""
    from emitter_filter.ondisk.ptn_report import diff_ptn

    refused = _ptn_refused("diff", [options.old, options.new], options)
    if refused is not None:
        return refused
    result = diff_ptn(options.old, options.new)
    if options.json:
        print(json.dumps(result.to_json(), indent=2))
    elif options.markdown:
        print(result.to_markdown(options.top))
    else:
        print(result.to_text(options.top))
    if limit is not None and result.over(limit):
        print(
            f"emitter-filter: {result.new_path}: grew {result.delta:+,} bytes over "
            f"{result.old_path}, more than --max-growth {options.max_growth}; from:",
            file=sys.stderr,
        )
        for change in result.growth():
            print(f"  {change.delta:+,} B  {change.kind} {change.label}", file=sys.stderr)
        return EXIT_DEAD_BYTES
    return EXIT_OK
