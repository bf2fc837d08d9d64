"""`diff`: why a file (or a set of them) grew, entry by entry, judged against --max-growth."""

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
    _add_data_beside,
    _any_ptn,
    _byte_count,
    _DeprecatedData,
    _paired,
    _print_growth,
    _ptn_refused,
    _usage_error,
)

if TYPE_CHECKING:
    from emitter_filter.ondisk.diff import SizeDiff
    from emitter_filter.ondisk.diff_set import SetDiff


def _add_diff_parser(commands) -> argparse.ArgumentParser:
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


def _diff(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    from emitter_filter.ondisk.diff import growth_limit

    try:
        limit = None if options.max_growth is None else growth_limit(options.max_growth)
    except ValueError as error:
        return _usage_error("diff", str(error))
    if _any_ptn([options.old, options.new]):
        return _diff_ptn(options, limit)
    sets = [os.path.isdir(options.old), os.path.isdir(options.new)]
    result: SetDiff | SizeDiff
    if any(sets):
        refused = _sets_usage(options, sets)
        if refused:
            return _usage_error("diff", refused)
        from emitter_filter.ondisk.diff_set import diff_sets

        result = diff_sets(options.old, options.new, data_beside=options.data_beside)
        pairing = result.pairing()
    else:
        result, pairing = _diff_two_files(options)
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


def _sets_usage(options: argparse.Namespace, sets: list[bool]) -> str | None:
    """Why OLD and NEW, one of them a directory, cannot be compared as sets, if they cannot."""
    if not all(sets):
        directory, other = (options.old, options.new) if sets[0] else (options.new, options.old)
        what = "a file" if os.path.exists(other) else "not there"
        return (
            f"{directory} is a directory but {other} is {what}: "
            "give two directories (sets of programs, each with its .ptd "
            "files beside it) or two .pte files"
        )
    if options.old_data or options.new_data or options.old_names or options.new_names:
        return (
            "--old-data, --new-data and the --*-names options take "
            "two .pte files; two directories pair each program with the "
            ".ptd beside it"
        )
    return None


def _diff_two_files(options: argparse.Namespace):
    """The diff of two programs, each with its .ptd files, and which files those were."""
    from emitter_filter.ondisk.diff import diff_files
    from emitter_filter.ondisk.read.data_files import data_files_for, program_data

    if options.old_data or options.new_data:
        old_data = program_data(options.old, options.old_data, beside=options.data_beside)
        new_data = program_data(options.new, options.new_data, beside=options.data_beside)
    else:  # one call: one warning for a .ptd beside both that cannot be read
        old_data, new_data = data_files_for([options.old, options.new], beside=options.data_beside)
    result = diff_files(
        options.old,
        options.new,
        old_data,
        new_data,
        old_names=options.old_names,
        new_names=options.new_names,
    )
    return result, ([options.old, options.new], [old_data, new_data])


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
