"""`explain`: where every byte of a file goes, as a table, JSON, a page, Model Explorer
node data or benchmark dashboard records."""

from __future__ import annotations

import argparse
import json
import sys

from emitter_filter.cli.common import (
    EXIT_OK,
    EXIT_USAGE,
    _add_data_arguments,
    _add_hud_arguments,
    _add_min_bytes,
    _any_ptn,
    _byte_count,
    _hud_file,
    _hud_usage,
    _min_bytes,
    _ptn_refused,
    _usage_error,
    _validity_lines,
)

# Parts (or groups) the `explain` table lists by default; --json lists them all.
_TABLE_PARTS = 10


def _add_explain_parser(commands) -> argparse.ArgumentParser:
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
    _add_table_arguments(explain)
    _add_node_data_arguments(explain)
    _add_hud_arguments(explain)
    return explain


def _add_table_arguments(explain: argparse.ArgumentParser) -> None:
    """--top and --by: what the table (or --json) lists."""
    from emitter_filter.ondisk.analyse.explain_terms import GROUPINGS

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


def _add_node_data_arguments(explain: argparse.ArgumentParser) -> None:
    """--node-data and the --value it sums."""
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


def _explain(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    from emitter_filter.ondisk.read.data_files import data_files_for
    from emitter_filter.ondisk.write.small_files import write_files
    from emitter_filter.ondisk.write.targets import check_outputs

    if _any_ptn(options.pte):
        return _explain_ptn(options)
    refused_usage = _explain_usage(options)
    if refused_usage:
        return _usage_error("explain", refused_usage)
    data_of = data_files_for(options.pte, options.data, beside=options.data_beside)
    # Every output refused, or every one written: checked before any work.
    outputs = [o for o in (options.html, options.node_data, options.hud_json) if o is not None]
    inputs = [*options.pte, *(f for files in data_of for f in files)]
    check_outputs(inputs, outputs, "explain")
    explanation = _explanation(options, data_of)
    refused = [
        line
        for line, _ in (_validity_lines(p, d) for p, d in zip(options.pte, data_of, strict=True))
        if line
    ]
    if refused:
        print("\n".join(refused), file=sys.stderr)
        return EXIT_USAGE
    files, wrote = _explain_files(options, explanation, data_of)
    write_files(files, inputs, "explain")
    # On stderr, so that `--json` output stays one document.
    for line in wrote:
        print(line, file=sys.stderr)
    if options.json:
        print(json.dumps(explanation.to_json(options.top, options.by), indent=2))
    else:
        print(explanation.to_text(_TABLE_PARTS if options.top is None else options.top, options.by))
    return EXIT_OK


def _explain_usage(options: argparse.Namespace) -> str | None:
    """Why `explain`'s options cannot be taken together, if they cannot."""
    if options.value is not None and options.node_data is None:
        return "--value says what --node-data sums; give --node-data OUT.json with it"
    if len(options.pte) > 1 and (options.names is not None or options.node_data is not None):
        option = "--names" if options.names is not None else "--node-data"
        return f"{option} takes one program, not a set"
    return _hud_usage(options)


def _explanation(options: argparse.Namespace, data_of):
    """The explanation of one program, or of several as one set."""
    if len(options.pte) > 1:
        from emitter_filter.ondisk.explain_set import explain_set

        return explain_set(
            options.pte,
            options.data,
            data_beside=options.data_beside,
            min_bytes=_min_bytes(options),
        )
    from emitter_filter.ondisk.explain import explain_file

    return explain_file(options.pte[0], data_of[0], names=options.names)


def _explain_files(
    options: argparse.Namespace, explanation, data_of
) -> tuple[list[tuple[str, bytes]], list[str]]:
    """The files --html, --node-data and --hud-json ask for, and a line saying each."""
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
    return files, wrote


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
