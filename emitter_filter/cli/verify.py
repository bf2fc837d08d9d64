"""`verify`: do two programs compute the same (a runtime runs both)."""

from __future__ import annotations

import argparse
import json

from emitter_filter.cli.common import (
    _add_data_arguments,
    _add_max_memory,
    _announce,
    _verify_exit,
)


def _add_verify_parser(commands) -> argparse.ArgumentParser:
    verify = commands.add_parser(
        "verify",
        help="run every method of NEW.pte and of OLD.pte on the same inputs; exit 1 unless "
        "their outputs are bit-identical",
        description=(
            "Load OLD.pte and NEW.pte in a runtime (ExecuTorch's pybindings when they import, "
            "else executorch-numpy-runtime: Python >= 3.12, no torch, no .ptd, no custom ops, "
            "no string outputs), in a child process, and run each method of NEW and the method "
            "of OLD of its name (or --method's) on the same inputs, seeded from OLD's method's "
            "input metadata or given with --inputs, each program loaded once (OLD released "
            "before NEW loads), and compare their outputs bit for bit. First, from the files "
            "alone: each pair's input and output metadata must be equal, each program's .ptd "
            "given, and its files and planned arenas within --max-memory. Exit 0 if all are "
            "equal; 1 naming the first method and output that differ (or a signature that "
            "differs, or a method of NEW that does not load, crashes the runtime or hangs); "
            "2 if no runtime imports, a file needs what the runtime lacks, a .ptd is missing, "
            "a program needs more memory than the limit, OLD does not run, or an argument is "
            "wrong."
        ),
    )
    verify.add_argument("old", metavar="OLD.pte", help="the program NEW was written from")
    verify.add_argument("new", metavar="NEW.pte", help="the program to verify")
    verify.add_argument(
        "--method",
        action="append",
        default=[],
        metavar="NEW=OLD",
        help="compare the method NEW of NEW.pte with the method OLD of OLD.pte, where a "
        "method was renamed (repeatable), e.g. --method score=forward; other methods are "
        "compared with the method of their own name",
    )
    _add_data_arguments(
        verify,
        "FILE is OLD.pte or NEW.pte, or #1 (OLD) and #2 (NEW): one file with two .ptd files",
        old_ptd=False,
    )
    verify.add_argument(
        "--inputs",
        metavar="FILE.npz",
        help="the inputs to run instead of seeded ones: arrays named METHOD/INDEX after NEW's "
        "method names, e.g. forward/0 (a method not named is seeded)",
    )
    _add_max_memory(verify)
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    return verify


def _verify(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    from emitter_filter.ondisk.analyse.validate import check_inputs
    from emitter_filter.ondisk.read.data_files import data_files_for
    from emitter_filter.ondisk.read.read_pte import check_program_header
    from emitter_filter.verify.compare import Program, verify_programs

    for path in (options.old, options.new):
        check_program_header(path)

    old_data, new_data = data_files_for(
        [options.old, options.new], options.data, beside=options.data_beside
    )
    # The runtime never sees a file audit calls invalid: some crash it (exit 2 instead).
    check_inputs([(options.old, old_data), (options.new, new_data)])
    report = verify_programs(
        Program(options.old, tuple(old_data)),
        Program(options.new, tuple(new_data)),
        options.method,
        inputs=options.inputs,
        max_memory=options.max_memory,
        announce=_announce,
        isolated=True,
    )
    if options.json:
        print(json.dumps(report.to_json(), indent=2))
    return _verify_exit(report, options.json)
