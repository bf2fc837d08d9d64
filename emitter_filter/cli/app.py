"""The command line itself: the parser of every command, `main` (error and exit-code
handling) and `console_main`."""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import traceback
from collections.abc import Sequence

from emitter_filter.cli.budget import (
    _add_budget_parsers,
    _budget,
)
from emitter_filter.cli.common import (
    EXIT_OK,
    EXIT_USAGE,
    _os_error_line,
)
from emitter_filter.cli.diff import (
    _add_diff_parser,
    _diff,
)
from emitter_filter.cli.env import (
    _add_demo_parser,
    _add_env_parser,
    _demo,
    _env,
)
from emitter_filter.cli.explain import (
    _add_explain_parser,
    _explain,
)
from emitter_filter.cli.files import (
    _add_audit_parser,
    _add_prune_parser,
    _audit,
    _prune,
)
from emitter_filter.cli.inprocess import (
    _add_run_parser,
    _run,
)
from emitter_filter.cli.sets import (
    _add_method_set_parsers,
    _add_share_parser,
    _merge,
    _share,
    _split,
)
from emitter_filter.cli.verify import (
    _add_verify_parser,
    _verify,
)
from emitter_filter.errors import EmitterFilterError

__all__ = ["main", "console_main"]


def _add_verbose(parser: argparse.ArgumentParser, dest: str, default) -> None:
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=default,
        dest=dest,
        help="log more (-v: INFO, -vv: DEBUG) and show tracebacks",
    )


class _Parser(argparse.ArgumentParser):
    """argparse's parser, its usage errors one line: what is wrong, and where help is
    (the usage it would print first is what --help begins with)."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


class _Version(argparse.Action):
    """`--version`: looked up only when asked (importlib.metadata costs tens of ms)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kwargs) -> None:
        super().__init__(
            option_strings,
            dest,
            nargs=0,
            default=argparse.SUPPRESS,
            help="print emitter_filter's version and exit",
            **kwargs,
        )

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        import importlib.metadata

        try:
            version = importlib.metadata.version("emitter_filter")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown (not installed)"
        print(f"emitter-filter {version}")
        parser.exit(EXIT_OK)


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="emitter-filter",
        description=("Keep ExecuTorch .pte/.ptd files to the constants their program can reach."),
    )
    _add_verbose(parser, "verbose", 0)
    parser.add_argument("--version", action=_Version)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = _add_run_parser(commands)
    audit = _add_audit_parser(commands)
    prune = _add_prune_parser(commands)
    share = _add_share_parser(commands)
    merge, split = _add_method_set_parsers(commands)

    demo = _add_demo_parser(commands)
    env = _add_env_parser(commands)

    verify = _add_verify_parser(commands)
    subcommands = [
        run,
        audit,
        prune,
        share,
        merge,
        split,
        verify,
        demo,
        env,
        _add_explain_parser(commands),
        _add_diff_parser(commands),
        *_add_budget_parsers(commands),
    ]
    # -v also after the subcommand; counted apart, since a subparser overwrites its parent's value.
    for subcommand in subcommands:
        _add_verbose(subcommand, "verbose_after", argparse.SUPPRESS)
    return parser


_VERBOSE = re.compile(r"-v+|--verbose")


def _command_index(arguments: Sequence[str]) -> int | None:
    """Where the subcommand is among the arguments: the first that is not an option."""
    return next((i for i, a in enumerate(arguments) if not a.startswith("-")), None)


def _command_parser(
    parser: argparse.ArgumentParser, options: argparse.Namespace
) -> argparse.ArgumentParser:
    """The parser of the command (`budget check`: of its action) that `options` were
    parsed for."""
    while True:
        commands = next(
            (a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None
        )
        if commands is None:
            return parser
        name = getattr(options, commands.dest, None)
        if name is None or name not in commands.choices:
            return parser
        parser = commands.choices[name]


def _split_run_target(arguments: list[str]) -> tuple[list[str], list[str] | None]:
    """(Our arguments, the script's.) Everything after `run` belongs to the script, options
    like -m and -v included: argparse cannot leave an option-led remainder alone, so it is
    split off here. The script's are None without `run`, and for `run --help`."""
    command = _command_index(arguments)
    if command is None or arguments[command] != "run":
        return arguments, None
    arguments, target = arguments[: command + 1], arguments[command + 1 :]
    # `run -v --keep P SCRIPT -v`: those before the script are ours, the rest its own.
    while target[:1]:
        if _VERBOSE.fullmatch(target[0]) or target[0].startswith("--keep="):
            arguments.append(target.pop(0))
        elif target[0] == "--keep":
            arguments += target[:2]
            del target[:2]
        else:
            break
    if target[:1] in (["-h"], ["--help"]):
        return arguments + target[:1], None
    return arguments, target


def _set_up_logging(options: argparse.Namespace) -> None:
    """Log levels from -v: the file commands' own logger stays at WARNING without it."""
    logging.basicConfig(
        level=logging.DEBUG if options.verbose > 1 else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    # One INFO line per prune is the point of `run`: show it unless asked for more.
    # The file commands print their own results on stdout, so they log INFO (which .ptd
    # a program reads, say) only when asked to: an error stays one line.
    quiet = options.command not in ("run", "demo") and not options.verbose
    logging.getLogger("emitter_filter").setLevel(
        logging.DEBUG if options.verbose > 1 else logging.WARNING if quiet else logging.INFO
    )


_COMMANDS = {
    "run": _run,
    "audit": _audit,
    "prune": _prune,
    "demo": _demo,
    "env": _env,
    "share": _share,
    "merge": _merge,
    "split": _split,
    "explain": _explain,
    "diff": _diff,
    "budget": _budget,
    "verify": _verify,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit code instead of exiting."""
    parser = _build_parser()
    arguments, target = _split_run_target(list(sys.argv[1:] if argv is None else argv))
    try:
        options, unknown = parser.parse_known_args(arguments)
        if unknown:
            # Said by the command's own parser, so that the message points at its help.
            _command_parser(parser, options).error(f"unrecognized arguments: {' '.join(unknown)}")
    except SystemExit as exit_:
        return EXIT_USAGE if exit_.code else EXIT_OK
    if target is not None:
        options.target = target
    options.verbose += getattr(options, "verbose_after", 0)
    _set_up_logging(options)
    return _run_command(parser, options)


def _run_command(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    """The command's handler, its errors turned into one line and an exit code."""
    try:
        return _COMMANDS[options.command](parser, options)
    except EmitterFilterError as error:
        # -v shows where it came from; the exit code still says what happened.
        if options.verbose:
            traceback.print_exc(file=sys.stderr)
        print(f"emitter-filter: {error}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        # The reader went away (`... | head`): not an error of ours. Point stdout at
        # devnull so that the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except OSError as error:
        # What `run`'s script raises is the script's: a traceback and exit 1, as python gives.
        if options.command == "run":
            raise
        if options.verbose:
            traceback.print_exc(file=sys.stderr)
        print(f"emitter-filter: {_os_error_line(error)}", file=sys.stderr)
        return EXIT_USAGE


def console_main() -> int:
    """The `emitter-filter` command (and `python -m emitter_filter`): `main`, then a quick exit.

    The interpreter's shutdown walks every object the collector tracks (module
    teardown collects several times): 10 ms of a 0.33 s `prune` of a 652 MB file.
    Freezing them first skips those walks. Not after `run`: the user's script may
    leave cycles whose finalizers should run.
    """
    code = main()
    command = _command_index(sys.argv[1:])
    if command is None or sys.argv[1 + command] != "run":
        import gc

        gc.freeze()
    return code
