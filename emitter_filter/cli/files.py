"""The commands on one program's files: `audit` (and its text report) and `prune`."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

from emitter_filter.cli.common import (
    EXIT_DEAD_BYTES,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_USAGE,
    _add_data_arguments,
    _add_min_bytes,
    _add_naming_arguments,
    _add_verify_arguments,
    _any_ptn,
    _byte_count,
    _min_bytes,
    _paired,
    _progress_printer,
    _ptn_refused,
    _sigterm_unwinds,
    _Terminated,
    _unverified_note,
    _usage_error,
    _validity_lines,
    _verifier,
    _verify_exit,
    _verify_failed,
    _with_verify,
)
from emitter_filter.verify.written import VerifyFailed, verified_write

if TYPE_CHECKING:
    from emitter_filter.ondisk.analyse.audit_report import AuditReport
    from emitter_filter.ondisk.audit_set import SetAuditReport


def _add_audit_parser(commands) -> argparse.ArgumentParser:
    """`audit`: what no program can reach, per data space."""
    audit = commands.add_parser(
        "audit",
        help="report the constant bytes of a .pte (and its .ptd files) no program can reach",
        description=(
            "Report what MODEL.pte holds per data space, which entries no program can "
            "reach (the bytes prune_constants=True and prune drop, named data included), "
            "which contents are stored more than once and which ranges several entries "
            "share (dedupe_constants=True). Reads headers and flatbuffers, "
            "and only the data entries whose size another entry shares. Exit 1 if the "
            "dead bytes exceed --max-dead-bytes (or --require-data finds weights missing, "
            "or, with --fail-on-key-clash, programs of a set hold one named-data key with "
            "different bytes), 2 if a file is malformed or invalid: one ExecuTorch's runtime "
            "refuses to load (docs/valid.md)."
        ),
    )
    audit.add_argument(
        "pte",
        nargs="+",
        metavar="MODEL.pte",
        help="the program file; several are audited in turn (as a pre-commit hook passes them)",
    )
    _add_data_arguments(
        audit,
        "programs that read a common .ptd (what share writes) are audited as one set, "
        "its bytes judged against all its readers; every other program alone",
    )
    audit.add_argument("--json", action="store_true", help="print the report as JSON")
    audit.add_argument(
        "--max-dead-bytes",
        type=_byte_count,
        default=None,
        metavar="N",
        help="exit 1 if more than N bytes are dead (a CI gate; 0 means none allowed)",
    )
    audit.add_argument(
        "--top",
        type=_byte_count,
        default=None,
        metavar="N",
        help="list the N largest dead entries (default: all; --json: all)",
    )
    audit.add_argument(
        "--require-data",
        action="store_true",
        help="exit 1 if an external tensor or named-data key is in none of the .ptd files "
        "given (or beside the program): a .pte shipped without its weights (a CI gate)",
    )
    _add_min_bytes(audit)
    audit.add_argument(
        "--fail-on-key-clash",
        action="store_true",
        help="several programs, read as one set: exit 1 if two of them hold one named-data "
        "key with different bytes (a weights cache shared by the programs, as XNNPACK's, "
        "would give the second the first's weights)",
    )
    _add_naming_arguments(audit)
    return audit


def _audit(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    """Each set of programs that read a common `.ptd` audited as one (`audit_set`), every
    other program alone (`audit_file`), each judged against --max-dead-bytes."""
    from emitter_filter.ondisk.read.data_files import data_files_for

    if _any_ptn(options.pte):
        return _audit_ptn(options)
    data_of = data_files_for(options.pte, options.data, beside=options.data_beside)
    reports, refused, gated = _audit_groups(options, data_of)
    _print_audits(options, reports, refused, data_of)
    over = _over_dead_bytes(options, reports)
    warned = (
        _key_clash_warning(options.pte, data_of)
        if len(options.pte) > 1 and not refused and not options.fail_on_key_clash
        else []
    )
    for line in [*warned, *gated, *refused]:
        print(line, file=sys.stderr)
    if refused:
        return EXIT_USAGE
    return EXIT_DEAD_BYTES if over or gated else EXIT_OK


def _audit_groups(
    options: argparse.Namespace, data_of
) -> tuple[list[AuditReport | SetAuditReport], list[str], list[str]]:
    """(the reports of the programs and sets that load, the lines of the files the runtime
    refuses, the lines of the gates --require-data and --fail-on-key-clash close)."""
    from emitter_filter.ondisk.audit_set import SetAuditReport
    from emitter_filter.ondisk.read.data_files import sets_of
    from emitter_filter.ondisk.read.state_file import state_file

    names = state_file(options.names)
    reports: list[AuditReport | SetAuditReport] = []
    refused: list[str] = []
    gated: list[str] = []
    # With --fail-on-key-clash, programs are one set even without a common .ptd: XNNPACK
    # keeps its keys in each .pte, and its weights cache is shared by every program.
    groups = (
        [list(range(len(options.pte)))]
        if options.fail_on_key_clash and len(options.pte) > 1
        else sets_of(data_of)
    )
    for members in groups:
        report = _audit_group(options, members, data_of, names)
        # A file the runtime refuses gets its own status, not the report of a file that loads.
        lines = [
            _validity_lines(options.pte[n], data_of[n], options.require_data, warn_missing=True)
            for n in members
        ]
        refused.extend(line for line, _ in lines if line is not None)
        if any(line is not None for line, _ in lines):
            continue
        gated.extend(gate for _, gate in lines if gate is not None)
        if options.fail_on_key_clash and isinstance(report, SetAuditReport) and report.key_clashes:
            keys = ", ".join(repr(clash.key) for clash in report.key_clashes)
            gated.append(
                f"emitter-filter: --fail-on-key-clash: {keys} held with different "
                "bytes by programs of the set"
            )
        reports.append(report)
    return reports, refused, gated


def _audit_group(
    options: argparse.Namespace, members: list[int], data_of, names
) -> AuditReport | SetAuditReport:
    """The audit of one program alone, or of several (`members`) as one set."""
    from emitter_filter.ondisk.audit import audit_file
    from emitter_filter.ondisk.audit_set import audit_set

    if len(members) == 1:
        [n] = members
        return audit_file(options.pte[n], data_of[n], keep_constants=options.keep, names=names)
    return audit_set(
        [options.pte[n] for n in members],
        [(options.pte[n], f) for n in members for f in data_of[n]],
        min_bytes=_min_bytes(options),
    )


def _print_audits(
    options: argparse.Namespace,
    reports: list[AuditReport | SetAuditReport],
    refused: list[str],
    data_of,
) -> None:
    """The reports on stdout, as text or JSON; with text, what several store twice."""
    from emitter_filter.ondisk.analyse.audit_report import AuditReport

    if options.json and reports:
        # One file (or one set): its report; several: a list of them.
        documents = [report.to_json() for report in reports]
        print(json.dumps(documents[0] if len(documents) == 1 else documents, indent=2))
    elif reports:
        print(
            "\n\n".join(
                _format_audit(r, options.top)
                if isinstance(r, AuditReport)
                else "\n".join(r.lines())
                for r in reports
            )
        )
        if len(reports) > 1 and not refused:
            print(_stored_twice(options, data_of))


def _over_dead_bytes(
    options: argparse.Namespace, reports: list[AuditReport | SetAuditReport]
) -> list[AuditReport | SetAuditReport]:
    """The reports over --max-dead-bytes, each said on stderr."""
    from emitter_filter.ondisk.analyse.audit_report import AuditReport

    over = [
        r
        for r in reports
        if options.max_dead_bytes is not None and r.dead_bytes > options.max_dead_bytes
    ]
    for report in over:
        limit = f"--max-dead-bytes {options.max_dead_bytes:,}"
        if isinstance(report, AuditReport):
            line = f"{report.path}: {report.dead_bytes:,} dead bytes > {limit}"
        else:
            line = (
                f"the set has {report.dead_bytes:,} dead bytes > {limit} "
                f"({', '.join(p.path for p in report.programs)})"
            )
        print(f"emitter-filter: {line}", file=sys.stderr)
    return over


def _format_audit(report, top: int | None = None) -> str:
    """The human table: spaces, the `top` largest dead entries (None: all), unprovable named
    data, duplicates."""
    from emitter_filter.program.scalar_types import dtype_label

    lines = [
        f"{report.path}: {report.file_bytes:,} bytes in {len(report.files)} file(s); "
        f"{report.constant_bytes:,} constant bytes, {report.dead_bytes:,} dead "
        f"({len(report.dead)} entries, {report.dead_values} values)",
        f"{'space':<12}{'total':>14}{'live':>14}{'dead':>14}",
    ]
    for name, space in report.spaces.items():
        lines.append(f"{name:<12}{space.total:>14,}{space.live:>14,}{space.dead:>14,}")
    if report.dead:
        shown = report.largest_dead(len(report.dead) if top is None else top)
        hidden = len(report.dead) - len(shown)
        more = f"; {hidden} more with --top {len(report.dead)} or --json" if hidden else ""
        lines.append(f"dead entries, largest first ({len(shown)} of {len(report.dead)}{more}):")
        lines.append(
            f"{'bytes':>14}  {'space':<10}{'index':>6}  {'plan':<12}{'value':>6}  "
            f"{'dtype':<17}{'shape':<16}name"
        )
        for d in shown:
            shape = "-" if d.shape is None else "[" + ", ".join(map(str, d.shape)) + "]"
            value = "-" if d.value_index is None else str(d.value_index)
            lines.append(
                f"{d.nbytes:>14,}  {d.space:<10}{d.index:>6}  {d.plan or '-':<12}{value:>6}  "
                f"{dtype_label(d.dtype):<17}{shape:<16}{_entry_name(d)}"
            )
    if report.kept_unprovable_named_data:
        lines.append(
            "named data kept because a delegate may read it (an opaque one, or one naming "
            "a key held nowhere; not dead):"
        )
        for u in report.kept_unprovable_named_data:
            lines.append(f"{u.nbytes:>14,}  {u.key}  ({u.file})")
    if report.duplicates:
        lines.append(
            f"duplicated: {report.duplicated_bytes:,} bytes in {len(report.duplicates)} "
            "content(s) stored more than once (not dead):"
        )
        for group in report.duplicates:
            copies = ", ".join(_copy_location(c) for c in group.copies)
            lines.append(f"{group.nbytes:>14,}  x{len(group.copies)}  {copies}")
    if report.shared:
        lines.append(
            f"shared: {report.shared_bytes:,} bytes saved by {len(report.shared)} range(s) "
            "stored once for several entries:"
        )
        for shared in report.shared:
            copies = ", ".join(_copy_location(c) for c in shared.copies)
            lines.append(
                f"{shared.nbytes:>14,}  x{len(shared.copies)}  {copies}  at {shared.offset:,}"
            )
    return "\n".join(lines)


def _entry_name(entry) -> str:
    """Its names (`-` for none), marked where a runtime could read it by name."""
    if not entry.names and entry.name is None:
        return "-"
    return entry.label() + (" (readable by name)" if entry.readable_by_name else "")


def _copy_location(copy) -> str:
    """`space[index]`, with the .ptd tag and the keys where the copy has them."""
    where = copy.space if copy.tag is None else f"{copy.space}:{copy.tag}"
    index = "" if copy.index is None else f"[{copy.index}]"
    names = f" ({', '.join(copy.names)})" if copy.names else ""
    return f"{where}{index}{names}"


def _key_clash_warning(ptes: list[str], data_of) -> list[str]:
    """One line (not a failure) naming the named-data keys programs given together hold with
    different bytes: `--fail-on-key-clash` makes it exit 1. None when the programs cannot be
    read as one set (an external tensor without its `.ptd`: each is judged alone)."""
    from emitter_filter.errors import PteFormatError
    from emitter_filter.ondisk.audit_set import set_key_clashes

    try:
        clashes = set_key_clashes(ptes, data_of)
    except PteFormatError:
        return []
    if not clashes:
        return []
    keys = ", ".join(repr(clash.key) for clash in clashes)
    return [
        f"emitter-filter: warning: {keys} held with different bytes by programs given "
        "together: a weights cache shared by the programs, as XNNPACK's, would give the "
        "second the first's (--fail-on-key-clash: exit 1)"
    ]


def _stored_twice(options: argparse.Namespace, data_of) -> str:
    """Of programs audited apart: the bytes they store in more than one file, which share
    would store once (`audit_set`'s count, not a verdict)."""
    from emitter_filter.ondisk.audit_set import audit_set

    every = audit_set(
        options.pte,
        [(p, f) for p, files in zip(options.pte, data_of, strict=True) for f in files],
        min_bytes=_min_bytes(options),
    )
    return (
        f"\nthe {len(options.pte)} programs: {every.duplicated_bytes:,} B stored in more than "
        f"one file ({len(every.shared)} contents of --min-bytes {_min_bytes(options):,} or "
        "more, what share stores once)"
    )


def _add_prune_parser(commands) -> argparse.ArgumentParser:
    """`prune`: a program without what it cannot reach."""
    prune = commands.add_parser(
        "prune",
        help="write a .pte (and its .ptd files) without the constants no program can reach",
        description=(
            "Write OUT.pte: IN.pte without the constants and named data its program cannot "
            "reach, the file prune_constants=True writes for the same model. Streams the "
            "constant bytes; never modifies or overwrites its input; writes atomically. "
            "Exit 2 if a file is malformed or an output cannot be written."
        ),
    )
    prune.add_argument("pte", metavar="IN.pte", help="the program file to prune")
    prune.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="OUT.pte",
        help="where to write the pruned program (not IN.pte)",
    )
    _add_data_arguments(
        prune,
        "--data needs --ptd-out; the .ptd beside IN.pte is written pruned beside "
        "OUT.pte with its stem (or into --ptd-out)",
    )
    prune.add_argument(
        "--ptd-out",
        metavar="DIR",
        help="where to write the pruned .ptd files, under their input names",
    )
    prune.add_argument("--json", action="store_true", help="print the report as JSON")
    prune.add_argument(
        "--dedupe",
        action="store_true",
        help="also store named data that repeats a constant once (dedupe_constants=True); "
        "the .ptd files are left as pruned",
    )
    _add_naming_arguments(prune)
    _add_verify_arguments(prune)
    return prune


def _prune(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    from emitter_filter.ondisk.read.data_files import program_data

    if options.data and options.ptd_out is None:
        return _usage_error("prune", "--data needs --ptd-out DIR")
    data = program_data(options.pte, options.data, beside=options.data_beside)
    # The .ptd beside IN.pte, pruned beside OUT.pte with its stem: where the rule finds it.
    ptd_outputs = (
        [os.path.splitext(options.output)[0] + ".ptd"] * len(data)
        if data and not options.data and options.ptd_out is None
        else None
    )
    verifier = _verifier(options, [(options.pte, data)])

    def verify(written):
        # The .pte against its input, with every .ptd written beside it.
        new = (written.temp(options.output), written.others([options.output]))
        return verifier.programs([((options.pte, data), new)])

    try:
        with (
            _sigterm_unwinds(),
            verified_write(verifier, [options.output], verify) as checked,
        ):
            # The kernel copies the .pte while the rest of the file side is imported
            # (0.04 s), read and decided: see `stream.EarlyCopy`.
            from emitter_filter.ondisk.write.stream import EarlyCopy

            with EarlyCopy(options.pte, options.output) as early:
                from emitter_filter.ondisk.prune import prune_file

                report = prune_file(
                    options.pte,
                    options.output,
                    data,
                    options.ptd_out,
                    progress=_progress_printer(),
                    keep_constants=options.keep,
                    names=options.names,
                    dedupe=options.dedupe,
                    early=early,
                    ptd_outputs=ptd_outputs,
                )
    except _Terminated:
        print("emitter-filter: terminated (SIGTERM); temporary files removed", file=sys.stderr)
        return EXIT_TERMINATED
    except VerifyFailed as failed:
        return _verify_failed(failed, options.json)
    verification = checked and checked.report
    if options.json:
        print(
            json.dumps(
                _with_verify(_paired(report.to_json(), [options.pte], [data]), verification),
                indent=2,
            )
        )
    else:
        print(report.summary())
        if report.dedupe is not None:
            print(f"{report.output}: {report.dedupe.summary()}")
    _unverified_note(report.output)
    return _verify_exit(verification, options.json)


def _audit_ptn(options: argparse.Namespace) -> int:
    """`audit` of `.ptn` packages: each one's totals, judged against --max-dead-bytes."""
    from emitter_filter.ondisk.ptn_report import ptn_report

    refused = _ptn_refused("audit", options.pte, options)
    if refused is not None:
        return refused
    reports = [ptn_report(path) for path in options.pte]
    if options.json:
        documents = [report.to_json() for report in reports]
        print(json.dumps(documents[0] if len(documents) == 1 else documents, indent=2))
    else:
        print("\n\n".join("\n".join(report.summary_lines()) for report in reports))
    limit = options.max_dead_bytes
    over = [r for r in reports if limit is not None and r.dead_bytes > limit]
    for report in over:
        print(
            f"emitter-filter: {report.path}: {report.dead_bytes:,} dead bytes > "
            f"--max-dead-bytes {limit:,}",
            file=sys.stderr,
        )
    return EXIT_DEAD_BYTES if over else EXIT_OK
