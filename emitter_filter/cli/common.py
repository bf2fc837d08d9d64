"""What several commands share: the exit codes, the one-line usage errors, the options
several commands take (--data/--no-data-beside, --min-bytes, the naming, --verify and
--hud-json arguments), the growth lines of `diff` and `budget check`, and the progress and
SIGTERM handling of the commands that write."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence

from emitter_filter.errors import VerifyError

__all__ = [
    "EXIT_OK",
    "EXIT_DEAD_BYTES",
    "EXIT_USAGE",
    "EXIT_DEMO_FAILED",
    "EXIT_TERMINATED",
    "EXIT_VERIFY_FAILED",
]

#: The exit codes the package's docstring (emitter_filter/cli/__init__.py) explains.
EXIT_OK = 0
EXIT_DEAD_BYTES = 1
EXIT_USAGE = 2
EXIT_DEMO_FAILED = 1
EXIT_TERMINATED = 128 + signal.SIGTERM
EXIT_VERIFY_FAILED = 1


def _byte_count(text: str) -> int:
    """A count of bytes or entries (`--top`, `--max-dead-bytes`, `--min-bytes`)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number, 0 or more, got {text!r}")
    return value


def _percent(text: str) -> float:
    """A percentage, 0 or more (`--tolerance`): not nan, not inf."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"expected a percentage, 0 or more, got {text!r}")
    return value


def _usage_error(command: str, message: str) -> int:
    """A usage error a handler finds, in the words `app._Parser.error` uses: one line, then
    where help is."""
    print(
        f"emitter-filter {command}: {message} (see emitter-filter {command} --help)",
        file=sys.stderr,
    )
    return EXIT_USAGE


def _add_naming_arguments(command: argparse.ArgumentParser) -> None:
    """--keep and --names, shared by audit and prune."""
    command.add_argument(
        "--keep",
        action="append",
        default=[],
        metavar="PATTERN",
        help="keep the constants whose fully qualified name matches PATTERN (fnmatch; "
        "repeatable), as ExecutorchBackendConfig(keep_constants=...) does; constant-segment "
        "entries have names only with --names",
    )
    command.add_argument(
        "--names",
        metavar="FILE",
        help="a torch.export .pt2 or an ETRecord of the same model: name constant-segment "
        "entries after the state tensors with their shape and bytes (imports torch)",
    )


class _DeprecatedData(argparse.Action):
    """An old spelling of an input data option (`--ptd`): read for one more release, with
    one line on stderr naming the new one."""

    def __call__(self, parser, namespace, values, option_string=None):
        new = "--" + self.dest.replace("_", "-")
        if not getattr(namespace, "_deprecation_said", False):
            print(
                f"{parser.prog}: {option_string} is deprecated, say {new} (the old spelling "
                "goes in the next release)",
                file=sys.stderr,
            )
            namespace._deprecation_said = True
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest) or []), values])


class _MovedOutput(argparse.Action):
    """`--ptd` where it named an output (`share`, `merge`): refused in one line, since
    `--ptd` names an input data file in every other command."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(
            f"{option_string} no longer names the output .ptd: say --ptd-out "
            f"{values} (input .ptd files are --data)"
        )


def _add_min_bytes(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--min-bytes",
        type=_byte_count,
        default=None,
        metavar="N",
        help="of several programs, count contents shorter than N bytes in more than one file "
        "as share does: not duplicated (default: share's, 1024)",
    )


def _min_bytes(options: argparse.Namespace) -> int:
    from emitter_filter.ondisk.analyse.share_find import DEFAULT_MIN_BYTES

    return DEFAULT_MIN_BYTES if options.min_bytes is None else options.min_bytes


def _add_data_beside(command: argparse.ArgumentParser, given: str = "--data") -> None:
    """`--no-data-beside`; `given` is how the command names a program's data files."""
    command.add_argument(
        "--no-data-beside",
        dest="data_beside",
        action="store_false",
        help="do not read the .ptd beside a program with its stem (a.pte: a.ptd) when no "
        f"{given} names its data",
    )


def _add_data_arguments(
    command: argparse.ArgumentParser, note: str, *, old_ptd: bool = True
) -> None:
    """--data [FILE=]IN.ptd and --no-data-beside, the same words in every command
    (`data_files`'s rule); `--ptd`, the old spelling, where it named an input."""
    command.add_argument(
        "--data",
        action="append",
        default=[],
        metavar="[FILE=]IN.ptd",
        help="a .ptd file the programs load with (repeatable): IN.ptd for every program, "
        "FILE=IN.ptd for the program FILE only (split at the first = that names a program, "
        "so run=3/a.pte=run=3/a.ptd works); a program given none reads the .ptd beside it "
        f"with its stem, if any; {note}",
    )
    if old_ptd:
        command.add_argument("--ptd", dest="data", action=_DeprecatedData, help=argparse.SUPPRESS)
    _add_data_beside(command)


def _add_hud_arguments(parser: argparse.ArgumentParser) -> None:
    """--hud-json and --model-name, shared by explain and budget check."""
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


# Below this, a copy is over before a person could read a line about it.
_PROGRESS_MIN_BYTES = 64 << 20


def _progress_printer():
    """Progress on stderr for long copies, only where a person watches (a terminal): none
    for a file under `_PROGRESS_MIN_BYTES`, and the line is cleared when the copy is done."""
    if not sys.stderr.isatty():
        return None
    shown = [-1]

    def show(done: int, total: int) -> None:
        if total < _PROGRESS_MIN_BYTES:
            return
        percent = 100 * done // total
        if percent == shown[0]:
            return
        shown[0] = percent
        line = (
            "\r\x1b[K" if done >= total else f"\remitter-filter: {done >> 20:,}/{total >> 20:,} MiB"
        )
        print(line, end="", file=sys.stderr, flush=True)

    return show


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread so that every `finally` removes its temporary files.

    A BaseException, as KeyboardInterrupt is: no `except Exception` may swallow it.
    """


@contextlib.contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """While writing, SIGTERM unwinds the stack (as Ctrl-C does) instead of killing outright.

    The previous handler is restored on exit. Only the main thread can install
    handlers; elsewhere (`main` called from a thread) SIGTERM keeps its handler.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def unwind(signum, frame) -> None:
        # Once: a second SIGTERM must not interrupt the clean-up the first one started.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise _Terminated

    previous = signal.signal(signal.SIGTERM, unwind)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _add_verify_arguments(command: argparse.ArgumentParser) -> None:
    """--verify and its --inputs and --max-memory, on each command that writes programs."""
    command.add_argument(
        "--verify",
        action="store_true",
        help="run every method of each output and of the input it came from on the same "
        "inputs, in ExecuTorch's pybindings or else executorch-numpy-runtime, before the "
        "outputs replace anything: they are written to temporary files beside their "
        "targets and renamed into place only if the outputs are bit-identical; exit 1 "
        "(a difference) or 2 (no verification possible) leaves nothing written (see "
        "emitter-filter verify --help)",
    )
    command.add_argument(
        "--inputs",
        metavar="FILE.npz",
        help="with --verify: the inputs to run instead of seeded ones, arrays named "
        "METHOD/INDEX after the output's method names (a method not named is seeded)",
    )
    _add_max_memory(command)


def _add_max_memory(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--max-memory",
        type=_memory_size,
        metavar="SIZE",
        help="refuse to verify (exit 2) a program whose files and planned arenas, "
        "summed from the file before it loads, need more than SIZE (4G, 512MiB, bytes; "
        "default: 3/4 of the memory available)",
    )


def _memory_size(text: str) -> int:
    from emitter_filter.verify.plan import parse_size

    try:
        return parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _announce(line: str) -> None:
    """A progress line on stderr, only where a person watches (a terminal)."""
    if sys.stderr.isatty():
        print(f"emitter-filter: {line}", file=sys.stderr, flush=True)


def _verifier(options: argparse.Namespace, inputs):
    """With --verify, before anything is written: the runtime, --inputs read, and each
    input (pte, .ptd files) one it loads and runs (exit 2 if not); else None."""
    if not options.verify:
        if options.inputs is not None:
            raise VerifyError("--inputs is for --verify: give both")
        if getattr(options, "max_memory", None) is not None:
            raise VerifyError("--max-memory is for --verify: give both")
        return None
    from emitter_filter.ondisk.analyse.validate import check_inputs
    from emitter_filter.verify.compare import Verifier

    # The runtime never sees an input our reader refuses: some crash it.
    check_inputs(inputs)
    return Verifier(
        inputs,
        options.inputs,
        max_memory=options.max_memory,
        announce=_announce,
        isolated=True,
    )


def _verify_failed(failed, as_json: bool) -> int:
    """A --verify that found a difference before anything was written: exit 1."""
    if as_json:
        print(json.dumps({"verify": failed.report.to_json(), "written": False}, indent=2))
    print(f"emitter-filter: {failed.report.summary()}; nothing was written", file=sys.stderr)
    return EXIT_VERIFY_FAILED


def _with_verify(document: dict, verification) -> dict:
    return document if verification is None else {**document, "verify": verification.to_json()}


def _verify_exit(verification, quiet: bool = False) -> int:
    """EXIT_VERIFY_FAILED, the difference on stderr, if `verification` found one; else, its
    line on stdout unless `quiet` (--json says it)."""
    if verification is None:
        return EXIT_OK
    if not verification.ok:
        print(f"emitter-filter: {verification.summary()}", file=sys.stderr)
        return EXIT_VERIFY_FAILED
    if not quiet:
        print(verification.summary())
    return EXIT_OK


def _print_report(report, as_json: bool, verification) -> int:
    """A writer's report (and --verify's), as text or JSON; the exit code."""
    if as_json:
        print(json.dumps(_with_verify(report.to_json(), verification), indent=2))
    else:
        print(report.summary())
    return _verify_exit(verification, as_json)


def _validity_lines(
    pte: str, ptd: Sequence[str], require_data: bool = False, warn_missing: bool = False
) -> tuple[str | None, str | None]:
    """(the line of a file ExecuTorch's runtime refuses, the `--require-data` gate's line),
    each None when there is nothing to say (`ondisk.analyse.validate`). With
    `warn_missing`, data held nowhere is a warning when it is no gate."""
    from emitter_filter.ondisk.analyse.validate import validate_file

    validity = validate_file(pte, ptd)
    if not validity.valid:
        return f"emitter-filter: {pte}: {validity.status}", None
    if require_data and validity.missing_data:
        return None, f"emitter-filter: {pte}: --require-data: {validity.missing_line()}"
    if warn_missing and validity.missing_data:
        # Without a .ptd nothing says the keys are wrong, but the runtime refuses the
        # methods that read them unless some .ptd holds them (issue 55).
        logging.getLogger("emitter_filter.cli").warning(
            "%s: %s: the runtime refuses the methods that read them unless a .ptd given "
            "with it holds them (--data)",
            pte,
            validity.missing_line(),
        )
    return None, None


def _paired(document: dict, ptes: Sequence[str], data_of: Sequence[Sequence[str]]) -> dict:
    """A report's JSON with which `.ptd` files each program was read with (`"data"`)."""
    from emitter_filter.ondisk.read.data_files import pairing_json

    return {**document, "data": pairing_json(ptes, data_of)}


def _os_error_line(error: OSError) -> str:
    """`FILE: what failed` for an OSError no writer or reader turned into our own error."""
    what = error.strerror or str(error)
    if error.filename is None:
        return what
    return f"{os.fsdecode(error.filename)}: {what}"


def _any_ptn(paths: Sequence[str]) -> bool:
    """Whether any of `paths` is a `.ptn` package."""
    from emitter_filter.ondisk.read.read_ptn import is_ptn

    return any(is_ptn(path) for path in paths)


def _ptn_refused(command: str, paths: Sequence[str], options: argparse.Namespace) -> int | None:
    """The usage error for a `.ptn` beside a `.pte`, or with an option a `.ptn` has no use for."""
    from emitter_filter.ondisk.read.read_ptn import is_ptn

    others = [p for p in paths if not is_ptn(p)]
    if others:
        return _usage_error(
            command, f"{others[0]} is not a .ptn package: give .ptn packages alone or .pte files"
        )
    for option in ("data", "names", "html", "node_data", "old_data", "new_data", "hud_json"):
        if getattr(options, option, None):
            flag = "--" + option.replace("_", "-")
            return _usage_error(command, f"{flag} is for a .pte; a .ptn holds its own constants")
    return None


#: Backends whose programs this package's runtimes run (`verify.runtimes`: CPU kernels and
#: XNNPACK); another backend's output is checked structurally only.
_RUN_HERE = frozenset({"XnnpackBackend"})


def _unverified_note(pte: str) -> None:
    """One stderr line when `pte` calls a backend no runtime here runs (Core ML, Vulkan):
    its structure is checked, its outputs were not computed."""
    from emitter_filter.ondisk.read.read_pte import read_pte

    backends = sorted({u.backend_id for d in read_pte(pte).delegates for u in d.users} - _RUN_HERE)
    if backends:
        print(
            f"emitter-filter: {pte}: not run-verified here: no runtime for "
            f"{', '.join(backends)} on this machine (its structure is checked)",
            file=sys.stderr,
        )
