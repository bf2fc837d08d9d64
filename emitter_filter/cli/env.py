"""`env` (what the environment variables would do here) and `demo`."""

from __future__ import annotations

import argparse
import os
import sys

from emitter_filter.cli.common import (
    EXIT_DEMO_FAILED,
    EXIT_OK,
)
from emitter_filter.environment import ENV_DEDUPE, ENV_PRUNE, ENV_STRICT, env_flag
from emitter_filter.errors import EnvironmentVariableError


def _add_env_parser(commands) -> argparse.ArgumentParser:
    """`env`: what the environment variables would do here."""
    env = commands.add_parser(
        "env",
        help="say what EMITTER_FILTER_PRUNE, _DEDUPE and _STRICT would do here, and why",
        description=(
            "Say whether a Python process started from this environment, with this "
            "interpreter, prunes and deduplicates the programs it serializes without "
            "importing emitter_filter, and whether strict mode is on: one line each, "
            "the answer and its reason (a value the hook refuses is explained), then the "
            "variables' values, where the start-up hook (.pth) is installed, and which "
            "executorch is installed. Imports neither torch nor ExecuTorch. Exit 0."
        ),
    )
    return env


def _env(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    import importlib.util

    from emitter_filter._upstream import check_executorch_version, installed_executorch_version
    from emitter_filter.errors import UnsupportedExecutorchError
    from emitter_filter.inprocess import startup as _startup

    hook_files = _startup.installed_pth_files()
    executorch = importlib.util.find_spec("executorch")
    version = installed_executorch_version()
    unsupported = None
    try:
        check_executorch_version(version)
    except UnsupportedExecutorchError as error:
        unsupported = error
    # The first reason the hook would not act: the variable, the hook, then executorch.
    stoppers = [
        (
            not hook_files,
            f"{_startup.PTH_NAME} is in none of this Python's site directories; "
            "reinstall emitter_filter (a process that imports it still prunes)",
        ),
        (unsupported is not None, str(unsupported)),
    ]
    modes = [
        ("prune", ENV_PRUNE, "prunes the programs it serializes"),
        ("deduplicate", ENV_DEDUPE, "deduplicates the programs it serializes (pruned or not)"),
    ]
    lines = [_env_answer(question, name, does, stoppers) for question, name, does in modes] + [
        _env_strict_answer()
    ]
    # A namespace package (executorch has no __init__.py): its directories, not a file.
    locations = None if executorch is None else executorch.submodule_search_locations
    where = "" if locations is None else f" at {', '.join(locations)}"
    print(
        "\n".join(
            [
                *lines,
                f"python: {sys.executable} ({sys.version.split()[0]})",
                *(f"{name}: {_env_value(name)}" for name in (ENV_PRUNE, ENV_DEDUPE, ENV_STRICT)),
                f"start-up hook: {', '.join(hook_files) or 'not installed'}",
                f"executorch: {version or 'not installed'}{where}"
                + (
                    "" if version is None else " (not supported)" if unsupported else " (supported)"
                ),
            ]
        )
    )
    return EXIT_OK


def _env_flag(name: str) -> tuple[bool | None, str | None]:
    """The variable as the hook reads it: on, off or None (refused), and why it was refused."""
    try:
        return env_flag(name), None
    except EnvironmentVariableError as error:
        return None, str(error)


def _env_value(name: str) -> str:
    raw = os.environ.get(name)
    state = {True: "on", False: "off", None: "not accepted"}[_env_flag(name)[0]]
    return "not set" if raw is None else f"{raw!r} ({state})"


def _env_answer(question: str, name: str, does: str, stoppers) -> str:
    """`would QUESTION: yes/no: why`, for a variable the start-up hook reads."""
    from emitter_filter.inprocess.startup import EXPORTER_MODULE

    raw = os.environ.get(name)
    requested, refused = _env_flag(name)
    reasons = [
        (raw is None, f"{name} is not set"),
        (
            requested is None,
            f"{refused}; a process says so, and does not {question}, "
            f"once it imports {EXPORTER_MODULE}",
        ),
        (requested is False and raw is not None, f"{name}={raw!r} turns it off"),
        *stoppers,
    ]
    answer = next(
        (f"no: {reason}" for stops, reason in reasons if stops),
        (f"yes: every Python process started here {does} once it imports {EXPORTER_MODULE}"),
    )
    return f"would {question}: {answer}"


def _env_strict_answer() -> str:
    """`strict: ...`: what a program the filter cannot prove safe to prune becomes."""
    raw = os.environ.get(ENV_STRICT)
    requested, refused = _env_flag(ENV_STRICT)
    if requested is None:
        return f"strict: {refused}; a pruned export raises this error"
    if requested:
        return (
            "strict: yes: a program the filter cannot prove safe to prune raises ProgramFormatError"
        )
    why = f"{ENV_STRICT} is not set" if raw is None else f"{ENV_STRICT}={raw!r} turns it off"
    return (
        f"strict: no: {why}; a program the filter cannot prove safe to prune is written "
        "unpruned, with a warning"
    )


def _add_demo_parser(commands) -> argparse.ArgumentParser:
    """`demo`: a built-in model exported with and without pruning."""
    demo = commands.add_parser(
        "demo",
        help="export a built-in model with and without pruning, then audit and run both",
        description=(
            "Build a small model with random weights (fixed seed) and three dead constants, "
            "export it with plain ExecuTorch and with prune_constants=True, write both .pte "
            "files, audit them and run them in ExecuTorch's portable runtime on the same "
            "input. Exit 1 if a check fails. Needs torch and executorch; with --files-only, "
            "neither: it writes a small program that ships with the package, for the file tools."
        ),
    )
    demo.add_argument(
        "--files-only",
        action="store_true",
        help="only write DIR/model.pte, a small program with dead constants shipped with the "
        "package, for the file tools (no torch or executorch needed)",
    )
    demo.add_argument(
        "--out",
        metavar="DIR",
        help="where to write model.pte and model.pruned.pte "
        "(default: a new directory emitter-filter-demo[-N] in the current one)",
    )
    return demo


def _demo(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    from pathlib import Path

    from emitter_filter.demo import default_out_dir, run_demo, write_example

    out = Path(options.out) if options.out else default_out_dir(Path())
    if options.files_only:
        path, dead = write_example(out)
        print(
            f"wrote {path} ({path.stat().st_size:,} bytes; {dead:,} of them dead), a program "
            f"ExecuTorch 1.5.1 wrote; next: emitter-filter audit {path}"
        )
        return EXIT_OK
    result = run_demo(out)
    print("\n".join(result.lines()))
    for failure in result.failures:
        print(f"emitter-filter demo: {failure}", file=sys.stderr)
    return EXIT_DEMO_FAILED if result.failures else EXIT_OK
