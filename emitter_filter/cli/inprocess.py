"""`run`: a Python export script run with pruning on for every program it serializes."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import runpy
import sys
import zipfile

from emitter_filter.cli.common import (
    EXIT_OK,
    EXIT_USAGE,
    _os_error_line,
    _usage_error,
)

# The name the log lines have always carried (`INFO emitter_filter.cli: running ...`).
logger = logging.getLogger("emitter_filter.cli")


def _add_run_parser(commands) -> argparse.ArgumentParser:
    """`run`: a script or module run with pruning on."""
    run = commands.add_parser(
        "run",
        help="run a Python export script with pruning on for every program it serializes",
        description=(
            "Run SCRIPT (or -m MODULE) as __main__ with pruning on for every program it "
            "serializes, as if each to_executorch() had been given "
            "ExecutorchBackendConfig(prune_constants=True). Arguments after the script "
            "or module are passed to it untouched; it exits with the script's code. "
            "Examples: emitter-filter run export.py --out model.pte; "
            "emitter-filter run -m executorch.examples.models.llama.export_llama --help"
        ),
    )
    run.add_argument(
        "--keep",
        action="append",
        default=[],
        metavar="PATTERN",
        help="keep the constants whose fully qualified name matches PATTERN (fnmatch; "
        "repeatable; before the script), as ExecutorchBackendConfig(keep_constants=...) does",
    )
    run.add_argument(
        "target",
        nargs=argparse.REMAINDER,
        metavar="(-m MODULE | SCRIPT) [ARGS ...]",
        help="-m MODULE to run a module as python -m does, or the path of a script; "
        "then its own arguments",
    )
    return run


def _run(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    target = options.target
    if not target or (target[0] == "-m" and (len(target) < 2 or not target[1])):
        return _usage_error("run", "give -m MODULE or SCRIPT")
    module, script = (target[1], None) if target[0] == "-m" else (None, target[0])
    argv = [module or script, *target[(2 if module else 1) :]]
    if script is not None and not os.path.isdir(script):
        # Read before the script runs, so that an unreadable one is ours to report, one line.
        try:
            open(script, "rb").close()
        except OSError as error:
            print(f"emitter-filter run: {_os_error_line(error)}", file=sys.stderr)
            return EXIT_USAGE

    from emitter_filter._upstream import check_executorch_version
    from emitter_filter.inprocess import startup
    from emitter_filter.program.reachability import keep_patterns

    check_executorch_version()  # a missing executorch is one line before the script runs
    keep = keep_patterns(options.keep)

    def enable() -> None:
        from emitter_filter.inprocess import hook

        hook.enable(keep)

    # Armed, not enabled: ExecuTorch (and torch) load when the script imports them.
    disarm = startup.on_exporter_import(enable)
    logger.info("running %s with pruning on", " ".join(argv))
    saved_argv = sys.argv
    sys.argv = argv
    try:
        with _path_first(_search_path_of(script)):
            if module:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            else:
                assert script is not None  # no -m: the target's first word is the script
                runpy.run_path(script, run_name="__main__")
    except SystemExit as exit_:
        code = exit_.code
        if code is None or isinstance(code, int):
            return code or EXIT_OK
        print(code, file=sys.stderr)
        return 1
    finally:
        sys.argv = saved_argv
        disarm()
        if "emitter_filter.inprocess.hook" in sys.modules:
            sys.modules["emitter_filter.inprocess.hook"].disable()
    return EXIT_OK


def _search_path_of(script: str | None) -> str | None:
    """What python puts first on sys.path: the script's directory, or for -m the current one.

    A directory or zip given as SCRIPT is put there by runpy itself (None here).
    """
    if script is None:
        return os.getcwd()
    if not os.path.isfile(script) or zipfile.is_zipfile(script):
        return None
    return os.path.dirname(os.path.realpath(script))


@contextlib.contextmanager
def _path_first(entry: str | None):
    """sys.path with ENTRY first while the target runs, as `python SCRIPT` or `python -m` has it."""
    if entry is None:
        yield
        return
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(entry)
