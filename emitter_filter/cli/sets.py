"""The commands on sets of programs: `share`, `merge` and `split`."""

from __future__ import annotations

import argparse
import json
import os

from emitter_filter.cli.common import (
    _add_data_arguments,
    _add_verify_arguments,
    _byte_count,
    _MovedOutput,
    _paired,
    _print_report,
    _progress_printer,
    _sigterm_unwinds,
    _unverified_note,
    _verifier,
    _verify_exit,
    _verify_failed,
    _with_verify,
)
from emitter_filter.errors import VerifyError
from emitter_filter.verify.written import VerifyFailed, verified_write


def _add_share_parser(commands) -> argparse.ArgumentParser:
    share = commands.add_parser(
        "share",
        help="write several programs with the bytes they have in common in one .ptd",
        description=(
            "Write each program into DIR with the constants and named data it has in common "
            "with the others moved into one shared .ptd, stored once; each program then "
            "loads with that .ptd as its data file. A set with nothing in common is copied "
            "byte for byte. Programs exported with .ptd files of their own (--data "
            "FILE=IN.ptd, or IN.ptd beside IN.pte) share what is equal; a key whose bytes "
            "differ between them (both heads' head.weight) stays with each program, in its "
            ".pte under that name. Never modifies its inputs; writes atomically. Exit 2 if a "
            "file is malformed, one program loads one key with two contents, or an output "
            "cannot be written."
        ),
    )
    share.add_argument("pte", nargs="+", metavar="IN.pte", help="the programs")
    share.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="where to write the programs (under their names, or where several "
        "have one name, the tails of their paths that tell them apart: "
        "a/model.pte, b/model.pte) and the .ptd",
    )
    share.add_argument(
        "--ptd-out",
        dest="ptd_name",
        default="shared.ptd",
        metavar="OUT.ptd",
        help="the shared .ptd's file name in DIR (default: shared.ptd)",
    )
    share.add_argument("--ptd", action=_MovedOutput, help=argparse.SUPPRESS)
    _add_data_arguments(share, "its entries go into the shared .ptd", old_ptd=False)
    share.add_argument(
        "--min-bytes",
        type=_byte_count,
        default=None,
        metavar="N",
        help="leave contents shorter than N bytes where they are (default: 1024, what "
        "audit and explain count as stored twice)",
    )
    share.add_argument(
        "--prune",
        action="store_true",
        help="first prune each program as prune does, with the .ptd beside it (not with "
        "--data), then share them",
    )
    share.add_argument(
        "--dedupe",
        action="store_true",
        help="also store what repeats within one program once, as prune --dedupe does "
        "(named data that repeats a constant: a tied embedding lowered to XNNPACK)",
    )
    share.add_argument("--json", action="store_true", help="print the report as JSON")
    _add_verify_arguments(share)
    return share


def _inputs_verifier(options: argparse.Namespace):
    """`share`'s and `merge`'s --verify before anything is written: the `.ptd` files each
    input loads with and the verifier over them (`_verifier`); without it, no files and
    None. The files are read here only for --verify: the command reads them itself (one
    warning, not two)."""
    from emitter_filter.ondisk.read.data_files import data_files_for

    data_of = (
        data_files_for(options.pte, options.data, beside=options.data_beside)
        if options.verify
        else [[] for _ in options.pte]
    )
    return data_of, _verifier(options, list(zip(options.pte, data_of, strict=True)))


def _share(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    from emitter_filter.ondisk.share import DEFAULT_MIN_BYTES, share_files

    data_of, verifier = _inputs_verifier(options)
    if verifier and not verifier.runtime.takes_data:
        from emitter_filter.verify.runtimes import NO_DATA

        raise VerifyError(
            f"share --verify: share's outputs load with a .ptd, and "
            f"{verifier.runtime.name} {NO_DATA}"
        )
    from emitter_filter.ondisk.read.data_files import unique_tails

    targets = [os.path.join(options.out, tail) for tail in unique_tails(options.pte)]
    shared = os.path.join(options.out, options.ptd_name)

    def verify(written):
        # Each output loads with the shared .ptd, or, when nothing was shared, with the
        # copies of its own .ptd files.
        new_data = [
            [written.temp(shared)]
            if written.has(shared)
            else [written.temp(os.path.join(options.out, os.path.basename(d))) for d in data]
            for data in data_of
        ]
        return verifier.programs(
            [
                ((pte, data), (written.temp(target), ptds))
                for pte, data, target, ptds in zip(
                    options.pte, data_of, targets, new_data, strict=True
                )
            ]
        )

    try:
        with verified_write(verifier, targets, verify) as checked:
            report = share_files(
                options.pte,
                options.out,
                ptd_paths=options.data,
                ptd_name=options.ptd_name,
                min_bytes=DEFAULT_MIN_BYTES if options.min_bytes is None else options.min_bytes,
                prune=options.prune,
                dedupe=options.dedupe,
                progress=_progress_printer(),
                data_beside=options.data_beside,
            )
    except VerifyFailed as failed:
        return _verify_failed(failed, options.json)
    verification = checked and checked.report
    return _print_report(report, options.json, verification)


def _add_method_set_parsers(commands) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """merge and split: several programs as one multi-method file, and back."""
    return _add_merge_parser(commands), _add_split_parser(commands)


def _add_merge_parser(commands) -> argparse.ArgumentParser:
    merge = commands.add_parser(
        "merge",
        help="write several programs as one .pte with all their methods",
        description=(
            "Write OUT.pte: one program whose methods are every method of the inputs "
            "(Module.load_method(name) picks one), with what they have in common stored "
            "once: constants and delegate blobs with equal bytes, named data with an equal "
            "key and equal bytes. What no method can reach is not written (audit of OUT is "
            "clean); mutable data (state such as a KV cache) stays each method's own. A "
            "method keeps its name unless --method or --prefix renames it; methods of "
            "several inputs with one name that are the same (an exporter's constant "
            "methods: get_max_seq_len, get_bos_id, ...) are written once; differing methods "
            "with one name are refused, all in one message that ends with a command that "
            "resolves them. FILE in every flag: the path as given, a tail of it no other "
            "input has (model.pte, ft/model.pte), or #N (the Nth input, from 1). Never "
            "modifies its inputs; writes atomically. Exit 2 if names clash, a flag names "
            "what is not there, a file is malformed, or the output cannot be written."
        ),
    )
    merge.add_argument(
        "pte",
        nargs="+",
        metavar="IN.pte",
        help="the programs, in the order their methods take in OUT",
    )
    merge.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="OUT.pte",
        help="where to write the merged program (not an input)",
    )
    _add_method_naming_arguments(merge)
    merge.add_argument(
        "--dedupe",
        action="store_true",
        help="also store once what repeats within OUT, as prune --dedupe does (named data "
        "that repeats a constant: a tied embedding lowered to XNNPACK)",
    )
    _add_data_arguments(merge, "an input reading a .ptd needs --ptd-out or --inline", old_ptd=False)
    _add_merged_data_arguments(merge)
    merge.add_argument("--json", action="store_true", help="print the report as JSON")
    _add_verify_arguments(merge)
    return merge


def _add_method_naming_arguments(merge: argparse.ArgumentParser) -> None:
    """--method, --prefix and --drop: which methods of which input OUT holds, by which name."""
    merge.add_argument(
        "--method",
        action="append",
        default=[],
        metavar="NEW=FILE:METHOD",
        help="put the method METHOD of the input FILE into OUT.pte, named NEW (repeatable), "
        "e.g. --method decode=decode.pte:forward; ExecuTorch's training methods of METHOD "
        "(__et_training_*_METHOD) follow it",
    )
    merge.add_argument(
        "--prefix",
        action="append",
        default=[],
        metavar="PREFIX=FILE",
        help="name every method of input FILE that is not written once for several inputs "
        "PREFIX + its name (repeatable; PREFIX as given, no separator added: --prefix "
        "ft_=ft/model.pte gives ft_forward)",
    )
    merge.add_argument(
        "--drop",
        action="append",
        default=[],
        metavar="FILE:METHOD",
        help="leave the method METHOD of input FILE out of OUT (repeatable), e.g. "
        "--drop decode.pte:enable_dynamic_shape to keep the first input's",
    )


def _add_merged_data_arguments(merge: argparse.ArgumentParser) -> None:
    """--ptd-out or --inline: where the merged program's .ptd data goes."""
    where = merge.add_mutually_exclusive_group()
    where.add_argument(
        "--ptd-out",
        metavar="OUT.ptd",
        help="write the merged program's one .ptd here: every live key once",
    )
    merge.add_argument("--ptd", action=_MovedOutput, help=argparse.SUPPRESS)
    where.add_argument(
        "--inline",
        action="store_true",
        help="move the .ptd data into OUT.pte instead (external tensors into its constant "
        "segment, named data into its own): OUT.pte then loads without a data file",
    )


def _add_split_parser(commands) -> argparse.ArgumentParser:
    split = commands.add_parser(
        "split",
        help="write some methods of a multi-method .pte with only what they read",
        description=(
            "Write OUT.pte: the methods of IN.pte named by --method, with only the "
            "constants, delegate blobs and named data they read, as prune writes a file "
            "(a merged file cut back for one device). split of every method of a merge, "
            "merged again, gives the merged file's bytes. Exit 2 if a method is not in "
            "IN.pte, a file is malformed, or the output cannot be written."
        ),
    )
    split.add_argument("pte", metavar="IN.pte", help="the multi-method program")
    split.add_argument(
        "--method",
        action="append",
        required=True,
        metavar="[NEW=]NAME",
        help="keep the method NAME of IN.pte in OUT.pte (repeatable), named NEW with "
        "NEW=NAME, e.g. --method forward=score for an app that calls forward",
    )
    split.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="OUT.pte",
        help="where to write the methods kept (not IN.pte)",
    )
    _add_data_arguments(
        split, "split keeps its keys: OUT.pte loads with the same .ptd", old_ptd=False
    )
    split.add_argument("--json", action="store_true", help="print the report as JSON")
    _add_verify_arguments(split)
    return split


def _merge(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    from emitter_filter.ondisk.merge import merge_files

    data_of, verifier = _inputs_verifier(options)
    chosen: list = []

    def verify(written):
        # Each method of the output against the method of the input it came from, that
        # input with its own .ptd files (by position: one file may be given twice).
        out = (written.temp(options.output), written.others([options.output]))
        return verifier.methods(
            [
                (
                    out,
                    method.name,
                    (method.source, data_of[method.source_number]),
                    method.source_method,
                )
                for method in chosen
            ]
        )

    try:
        with (
            _sigterm_unwinds(),
            verified_write(verifier, [options.output], verify) as checked,
        ):
            report = merge_files(
                options.pte,
                options.output,
                methods=options.method,
                prefixes=options.prefix,
                drops=options.drop,
                data=options.data,
                ptd_out=options.ptd_out,
                inline=options.inline,
                dedupe=options.dedupe,
                progress=_progress_printer(),
                data_beside=options.data_beside,
                chosen=chosen.extend,
            )
    except VerifyFailed as failed:
        return _verify_failed(failed, options.json)
    _unverified_note(report.output)
    return _print_report(report, options.json, checked and checked.report)


def _split(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    from emitter_filter.ondisk.read.data_files import program_data
    from emitter_filter.ondisk.split import split_file

    data = program_data(options.pte, options.data, beside=options.data_beside)
    verifier = _verifier(options, [(options.pte, data)])
    # NEW=NAME: the output's NEW computes what the input's NAME did.
    renamed = [(new, old or new) for new, _, old in (m.partition("=") for m in options.method)]

    def verify(written):
        out = (written.temp(options.output), data)  # split keeps the keys: the same .ptd
        return verifier.methods([(out, new, (options.pte, data), old) for new, old in renamed])

    try:
        with (
            _sigterm_unwinds(),
            verified_write(verifier, [options.output], verify) as checked,
        ):
            report = split_file(
                options.pte,
                options.output,
                options.method,
                progress=_progress_printer(),
                data=data,
            )
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
    _unverified_note(report.output)
    return _verify_exit(verification, options.json)
