"""The `emitter-filter` command line (also `python -m emitter_filter`).

Exit codes: 0 success; 2 usage error or bad input; otherwise what the script run
by `run` exited with.
"""

from __future__ import annotations

import argparse
import logging
import runpy
import sys
from collections.abc import Sequence

from emitter_filter.errors import EmitterFilterError

__all__ = ["main"]

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_USAGE = 2


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="emitter-filter",
        description=(
            "Keep ExecuTorch .pte/.ptd files to the constants their program can reach."
        ),
    )
    parser.add_argument(
        "-v", "--verbose", action="count", default=0,
        help="log more (-v: INFO, -vv: DEBUG) and show tracebacks",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser(
        "run",
        help="run a Python export script with pruning on for every program it serializes",
        description=(
            "Run SCRIPT (or -m MODULE) as __main__ with pruning on for every program it "
            "serializes, as if each to_executorch() had been given "
            "ExecutorchBackendConfig(prune_constants=True). Arguments after the script "
            "or module are passed to it untouched. Example: "
            "emitter-filter run -m executorch.examples.portable.scripts.export --model_name mv2"
        ),
    )
    run.add_argument(
        "target", nargs=argparse.REMAINDER, metavar="(-m MODULE | SCRIPT) [ARGS ...]",
        help="-m MODULE to run a module as python -m does, or the path of a script; "
        "then its own arguments",
    )
    return parser


def _run(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    target = options.target
    if not target or (target[0] == "-m" and len(target) < 2):
        parser.error("run: give -m MODULE or SCRIPT")
    module, script = (target[1], None) if target[0] == "-m" else (None, target[0])
    argv = [module or script, *target[(2 if module else 1):]]

    from emitter_filter import hook

    hook.enable()
    logger.info("running %s with pruning on", " ".join(argv))
    saved_argv = sys.argv
    sys.argv = argv
    try:
        if module:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(script, run_name="__main__")
    except SystemExit as exit_:
        code = exit_.code
        if code is None or isinstance(code, int):
            return code or EXIT_OK
        print(code, file=sys.stderr)
        return 1
    finally:
        sys.argv = saved_argv
        hook.disable()
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit code instead of exiting."""
    parser = _build_parser()
    try:
        options = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exit_:
        return EXIT_USAGE if exit_.code else EXIT_OK
    logging.basicConfig(
        level=logging.DEBUG if options.verbose > 1 else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    # One INFO line per prune is the point of `run`: show it unless asked for more.
    logging.getLogger("emitter_filter").setLevel(
        logging.DEBUG if options.verbose > 1 else logging.INFO
    )
    commands = {"run": _run}
    try:
        return commands[options.command](parser, options)
    except EmitterFilterError as error:
        if options.verbose:
            raise
        print(f"emitter-filter: {error}", file=sys.stderr)
        return EXIT_USAGE
