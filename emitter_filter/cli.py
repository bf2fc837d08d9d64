"""The `emitter-filter` command line (also `python -m emitter_filter`).

Exit codes: 0 success; 1 `audit` found more dead bytes than `--max-dead-bytes`
(or a key clash in a set under `--fail-on-key-clash`), `diff` a growth over `--max-growth`,
`budget check` a file over its budget, `verify` (or `--verify`) a method that computes otherwise;
2 usage error, bad input, or a file that cannot be read or written, whatever
the command (a one-line message naming the file, and the offset where one applies; with -v also the traceback,
the exit code unchanged; no output file); for `run`, what the script exited with;
for `demo`, 1 if one of its checks failed; 143 (128 + SIGTERM) if `prune` was
terminated, its temporary files removed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import re
import runpy
import signal
import sys
import threading
import traceback
from collections.abc import Iterator, Sequence

from emitter_filter.environment import ENV_DEDUPE, ENV_PRUNE, ENV_STRICT, env_flag
from emitter_filter.errors import EmitterFilterError, EnvironmentVariableError, VerifyError

__all__ = [
    "main", "console_main", "EXIT_OK", "EXIT_DEAD_BYTES", "EXIT_USAGE", "EXIT_DEMO_FAILED",
    "EXIT_TERMINATED", "EXIT_VERIFY_FAILED",
]

logger = logging.getLogger(__name__)

#: The exit codes of the module docstring.
EXIT_OK = 0
EXIT_DEAD_BYTES = 1
EXIT_USAGE = 2
EXIT_DEMO_FAILED = 1
EXIT_TERMINATED = 128 + signal.SIGTERM
EXIT_VERIFY_FAILED = 1
# Parts (or groups) the `explain` table lists by default; --json lists them all.
_TABLE_PARTS = 10


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


def _add_verbose(parser: argparse.ArgumentParser, dest: str, default) -> None:
    parser.add_argument(
        "-v", "--verbose", action="count", default=default, dest=dest,
        help="log more (-v: INFO, -vv: DEBUG) and show tracebacks",
    )


class _Parser(argparse.ArgumentParser):
    """argparse's parser, its usage errors one line: what is wrong, and where help is
    (the usage it would print first is what --help begins with)."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _usage_error(command: str, message: str) -> int:
    """A usage error a handler finds, in the words `_Parser.error` uses: one line, then
    where help is."""
    print(f"emitter-filter {command}: {message} (see emitter-filter {command} --help)",
          file=sys.stderr)
    return EXIT_USAGE


class _Version(argparse.Action):
    """`--version`: looked up only when asked (importlib.metadata costs tens of ms)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print emitter_filter's version and exit", **kwargs)

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
        description=(
            "Keep ExecuTorch .pte/.ptd files to the constants their program can reach."
        ),
    )
    _add_verbose(parser, "verbose", 0)
    parser.add_argument("--version", action=_Version)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

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
        "--keep", action="append", default=[], metavar="PATTERN",
        help="keep the constants whose fully qualified name matches PATTERN (fnmatch; "
        "repeatable; before the script), as ExecutorchBackendConfig(keep_constants=...) does",
    )
    run.add_argument(
        "target", nargs=argparse.REMAINDER, metavar="(-m MODULE | SCRIPT) [ARGS ...]",
        help="-m MODULE to run a module as python -m does, or the path of a script; "
        "then its own arguments",
    )

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
        "pte", nargs="+", metavar="MODEL.pte",
        help="the program file; several are audited in turn (as a pre-commit hook passes them)",
    )
    _add_data_arguments(
        audit, "programs that read a common .ptd (what share writes) are audited as one set, "
        "its bytes judged against all its readers; every other program alone",
    )
    audit.add_argument("--json", action="store_true", help="print the report as JSON")
    audit.add_argument(
        "--max-dead-bytes", type=_byte_count, default=None, metavar="N",
        help="exit 1 if more than N bytes are dead (a CI gate; 0 means none allowed)",
    )
    audit.add_argument("--top", type=_byte_count, default=None, metavar="N",
                       help="list the N largest dead entries (default: all; --json: all)")
    audit.add_argument(
        "--require-data", action="store_true",
        help="exit 1 if an external tensor or named-data key is in none of the .ptd files "
        "given (or beside the program): a .pte shipped without its weights (a CI gate)",
    )
    _add_min_bytes(audit)
    audit.add_argument(
        "--fail-on-key-clash", action="store_true",
        help="several programs, read as one set: exit 1 if two of them hold one named-data "
        "key with different bytes (a weights cache shared by the programs, as XNNPACK's, "
        "would give the second the first's weights)",
    )
    _add_naming_arguments(audit)

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
    prune.add_argument("-o", "--output", required=True, metavar="OUT.pte",
                       help="where to write the pruned program (not IN.pte)")
    _add_data_arguments(
        prune, "--data needs --ptd-out; the .ptd beside IN.pte is written pruned beside "
        "OUT.pte with its stem (or into --ptd-out)",
    )
    prune.add_argument("--ptd-out", metavar="DIR",
                       help="where to write the pruned .ptd files, under their input names")
    prune.add_argument("--json", action="store_true", help="print the report as JSON")
    prune.add_argument(
        "--dedupe", action="store_true",
        help="also store named data that repeats a constant once (dedupe_constants=True); "
        "the .ptd files are left as pruned",
    )
    _add_naming_arguments(prune)
    _add_verify_arguments(prune)

    share = _add_share_parser(commands)
    merge, split = _add_method_set_parsers(commands)

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
        "--files-only", action="store_true",
        help="only write DIR/model.pte, a small program with dead constants shipped with the "
        "package, for the file tools (no torch or executorch needed)",
    )
    demo.add_argument(
        "--out", metavar="DIR",
        help="where to write model.pte and model.pruned.pte "
        "(default: a new directory emitter-filter-demo[-N] in the current one)",
    )

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

    verify = _add_verify_parser(commands)
    subcommands = [run, audit, prune, share, merge, split, verify, demo, env,
                   *_add_size_commands(commands)]
    # -v also after the subcommand; counted apart, since a subparser overwrites its parent's value.
    for subcommand in subcommands:
        _add_verbose(subcommand, "verbose_after", argparse.SUPPRESS)
    return parser


def _add_size_commands(commands) -> list[argparse.ArgumentParser]:
    """explain, diff and budget: where a file's bytes go, and why it grew."""
    return [_add_explain(commands), _add_diff(commands), *_add_budget(commands)]


def _add_explain(commands) -> argparse.ArgumentParser:
    from emitter_filter.ondisk.explain_terms import GROUPINGS

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
        "pte", nargs="+", metavar="MODEL.pte",
        help="the program file; several are explained as one set (each file's bytes once, "
        "what the set stores twice duplicated, each program's own in --json)",
    )
    _add_data_arguments(explain, "each program's pairing is in the header and --json")
    explain.add_argument("--names", metavar="FILE",
                         help="a torch.export .pt2 or an ETRecord of the same model: name "
                         "constant and mutable entries by content (imports torch)")
    explain.add_argument("--json", action="store_true", help="print the explanation as JSON")
    _add_min_bytes(explain)
    explain.add_argument("--html", metavar="OUT.html",
                         help="also write a self-contained page with a treemap of the bytes")
    explain.add_argument("--top", type=_byte_count, default=None, metavar="N",
                         help="the N largest parts (or groups) to list (default 10; --json: "
                         "all parts unless given)")
    explain.add_argument("--by", choices=GROUPINGS, default=None,
                         help="group the bytes by this instead of listing parts")
    explain.add_argument(
        "--node-data", metavar="OUT.json",
        help="also write Model Explorer node data: the bytes each call reads, keyed by the "
        "node ids pte-adapter-model-explorer gives the file's graphs (load it beside the .pte)",
    )
    explain.add_argument(
        "--value", choices=("bytes", "dead", "duplicated"), default=None,
        help="what --node-data sums per node: every byte read (default: bytes), the dead "
        "ones, or the duplicated ones",
    )
    return explain


def _add_diff(commands) -> argparse.ArgumentParser:
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
    diff.add_argument("old", metavar="OLD.pte", help="the old program, or a directory of them "
                      "(a set: programs matched by file name)")
    diff.add_argument("new", metavar="NEW.pte", help="the new program, or a directory of them")
    for side in ("old", "new"):
        diff.add_argument(f"--{side}-data", action="append", default=[], metavar="IN.ptd",
                          help=f"a .ptd {side.upper()}.pte loads with (repeatable; default: "
                          "the .ptd beside it with its stem, if any)")
        diff.add_argument(f"--{side}-ptd", dest=f"{side}_data", action=_DeprecatedData,
                          help=argparse.SUPPRESS)
        diff.add_argument(f"--{side}-names", metavar="FILE",
                          help=f"a .pt2 or ETRecord naming {side.upper()}.pte's entries "
                          "(imports torch)")
    _add_data_beside(diff)
    diff.add_argument("--json", action="store_true", help="print the diff as JSON")
    diff.add_argument("--markdown", action="store_true",
                      help="print tables ready for a pull request's comment")
    diff.add_argument("--max-growth", metavar="BYTES|PCT%",
                      help="exit 1 if NEW is larger than OLD by more than BYTES, or PCT%% of OLD")
    diff.add_argument("--top", type=_byte_count, default=20, metavar="N",
                      help="the N largest changes to list (default 20; --json: all)")
    return diff


def _add_budget(commands) -> list[argparse.ArgumentParser]:
    budget = commands.add_parser(
        "budget",
        help="record .pte sizes in a committed budget file, and check files against it",
        description=(
            "budget write FILE... -o pte-budget.json records each file's bytes, bytes per "
            "storage and entries; budget check FILE... --budget pte-budget.json exits 1 if a "
            "file grew past its budget (or has none), printing the diff against the recorded "
            "entries. --benchmark-json writes the sizes for github-action-benchmark "
            "(customSmallerIsBetter)."
        ),
    )
    actions = budget.add_subparsers(dest="budget_action", required=True, metavar="ACTION")
    write = actions.add_parser(
        "write", help="record the files' sizes and entries",
        description=(
            "Explain each FILE.pte and record its bytes, its bytes per storage and status, and "
            "its parts (each tensor's sha256 too, to match it again by content) in "
            "BUDGET.json, keyed by the path as given; commit it. Never writes over an input; "
            "writes atomically, with --benchmark-json both or neither. Exit 2 if a file is "
            "malformed or an output cannot be written."
        ),
    )
    write.add_argument("-o", "--output", required=True, metavar="BUDGET.json",
                       help="where to write the budget (replaced atomically; commit it)")
    check = actions.add_parser(
        "check", help="fail on growth past the recorded budget",
        description=(
            "Explain each FILE.pte again and compare it with its record in BUDGET.json: a "
            "file larger than its recorded bytes plus --tolerance percent, or with no record, "
            "is over budget, and the diff against the recorded parts says which entries grew. "
            "Exit 1 if a file is over budget, 2 if a file is malformed or BUDGET.json does "
            "not follow its schema (docs/budget-schema.json)."
        ),
    )
    check.add_argument("--budget", required=True, metavar="BUDGET.json",
                       help="the budget that budget write recorded")
    check.add_argument("--tolerance", type=_percent, default=0.0, metavar="PCT",
                       help="allow this much growth, in percent of the recorded bytes")
    check.add_argument("--markdown", action="store_true",
                       help="print the diffs as tables for a pull request's comment")
    for action in (write, check):
        action.add_argument("pte", nargs="+", metavar="FILE.pte",
                            help="the program files, named as the check will name them "
                            "(relative to the repository, as pre-commit passes them)")
        action.add_argument("--benchmark-json", metavar="OUT.json",
                            help="also write the sizes as github-action-benchmark reads them")
        _add_data_arguments(action, "each program's .ptd counts in its size", old_ptd=False)
    return [budget, write, check]


def _add_naming_arguments(command: argparse.ArgumentParser) -> None:
    """--keep and --names, shared by audit and prune."""
    command.add_argument(
        "--keep", action="append", default=[], metavar="PATTERN",
        help="keep the constants whose fully qualified name matches PATTERN (fnmatch; "
        "repeatable), as ExecutorchBackendConfig(keep_constants=...) does; constant-segment "
        "entries have names only with --names",
    )
    command.add_argument(
        "--names", metavar="FILE",
        help="a torch.export .pt2 or an ETRecord of the same model: name constant-segment "
        "entries after the state tensors with their shape and bytes (imports torch)",
    )


class _DeprecatedData(argparse.Action):
    """An old spelling of an input data option (`--ptd`): read for one more release, with
    one line on stderr naming the new one."""

    def __call__(self, parser, namespace, values, option_string=None):
        new = "--" + self.dest.replace("_", "-")
        if not getattr(namespace, "_deprecation_said", False):
            print(f"{parser.prog}: {option_string} is deprecated, say {new} (the old spelling "
                  "goes in the next release)", file=sys.stderr)
            namespace._deprecation_said = True
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest) or []), values])


class _MovedOutput(argparse.Action):
    """`--ptd` where it named an output (`share`, `merge`): refused in one line, since
    `--ptd` names an input data file in every other command."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} no longer names the output .ptd: say --ptd-out "
                     f"{values} (input .ptd files are --data)")


def _add_min_bytes(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--min-bytes", type=_byte_count, default=None, metavar="N",
        help="of several programs, count contents shorter than N bytes in more than one file "
        "as share does: not duplicated (default: share's, 1024)",
    )


def _min_bytes(options: argparse.Namespace) -> int:
    from emitter_filter.ondisk.share_find import DEFAULT_MIN_BYTES

    return DEFAULT_MIN_BYTES if options.min_bytes is None else options.min_bytes


def _add_data_beside(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--no-data-beside", dest="data_beside", action="store_false",
        help="do not read the .ptd beside a program with its stem (a.pte: a.ptd) when no "
        "--data names its data",
    )


def _add_data_arguments(command: argparse.ArgumentParser, note: str, *,
                        old_ptd: bool = True) -> None:
    """--data [FILE=]IN.ptd and --no-data-beside, the same words in every command
    (`data_files`'s rule); `--ptd`, the old spelling, where it named an input."""
    command.add_argument(
        "--data", action="append", default=[], metavar="[FILE=]IN.ptd",
        help="a .ptd file the programs load with (repeatable): IN.ptd for every program, "
        "FILE=IN.ptd for the program FILE only (split at the first = that names a program, "
        "so run=3/a.pte=run=3/a.ptd works); a program given none reads the .ptd beside it "
        f"with its stem, if any; {note}",
    )
    if old_ptd:
        command.add_argument("--ptd", dest="data", action=_DeprecatedData,
                             help=argparse.SUPPRESS)
    _add_data_beside(command)


def _progress_printer():
    """Progress on stderr for long copies, only where a person watches (a terminal)."""
    if not sys.stderr.isatty():
        return None
    shown = [-1]

    def show(done: int, total: int) -> None:
        percent = 100 * done // max(total, 1)
        if percent != shown[0]:
            shown[0] = percent
            end = "\n" if done >= total else ""
            print(f"\remitter-filter: {done >> 20:,}/{total >> 20:,} MiB", end=end,
                  file=sys.stderr, flush=True)

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


def _prune(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    from emitter_filter.ondisk.data_files import program_data

    if options.data and options.ptd_out is None:
        return _usage_error("prune", "--data needs --ptd-out DIR")
    data = program_data(options.pte, options.data, beside=options.data_beside)
    # The .ptd beside IN.pte, pruned beside OUT.pte with its stem: where the rule finds it.
    ptd_outputs = ([os.path.splitext(options.output)[0] + ".ptd"] * len(data)
                   if data and not options.data and options.ptd_out is None else None)
    verifier = _verifier(options, [(options.pte, data)])
    try:
        with _sigterm_unwinds():
            # The kernel copies the .pte while the rest of the file side is imported
            # (0.04 s), read and decided: see `output.EarlyCopy`.
            from emitter_filter.ondisk.output import EarlyCopy

            with EarlyCopy(options.pte, options.output) as early:
                from emitter_filter.ondisk.prune import prune_file

                report = prune_file(
                    options.pte, options.output, data, options.ptd_out,
                    progress=_progress_printer(), keep_constants=options.keep,
                    names=options.names, dedupe=options.dedupe, early=early,
                    ptd_outputs=ptd_outputs,
                )
    except _Terminated:
        print("emitter-filter: terminated (SIGTERM); temporary files removed", file=sys.stderr)
        return EXIT_TERMINATED
    verification = verifier and verifier.programs([
        ((report.path, data), (report.output, [o for _, o in report.ptd_outputs if o]))])
    if options.json:
        print(json.dumps(_with_verify(_paired(report.to_json(), [options.pte], [data]),
                                      verification), indent=2))
    else:
        print(report.summary())
        if report.dedupe is not None:
            print(f"{report.output}: {report.dedupe.summary()}")
    return _verify_exit(verification, options.json)


def _add_method_set_parsers(commands) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """merge and split: several programs as one multi-method file, and back."""
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
    merge.add_argument("pte", nargs="+", metavar="IN.pte",
                       help="the programs, in the order their methods take in OUT")
    merge.add_argument("-o", "--output", required=True, metavar="OUT.pte",
                       help="where to write the merged program (not an input)")
    merge.add_argument(
        "--method", action="append", default=[], metavar="NEW=FILE:METHOD",
        help="name the method METHOD of input FILE NEW in OUT (repeatable), e.g. --method "
        "decode=decode.pte:forward; ExecuTorch's training methods of METHOD "
        "(__et_training_*_METHOD) follow it",
    )
    merge.add_argument(
        "--prefix", action="append", default=[], metavar="PREFIX=FILE",
        help="name every method of input FILE that is not written once for several inputs "
        "PREFIX + its name (repeatable; PREFIX as given, no separator added: --prefix "
        "ft_=ft/model.pte gives ft_forward)",
    )
    merge.add_argument(
        "--drop", action="append", default=[], metavar="FILE:METHOD",
        help="leave the method METHOD of input FILE out of OUT (repeatable), e.g. "
        "--drop decode.pte:enable_dynamic_shape to keep the first input's",
    )
    merge.add_argument(
        "--dedupe", action="store_true",
        help="also store once what repeats within OUT, as prune --dedupe does (named data "
        "that repeats a constant: a tied embedding lowered to XNNPACK)",
    )
    _add_data_arguments(merge, "an input reading a .ptd needs --ptd-out or --inline",
                        old_ptd=False)
    where = merge.add_mutually_exclusive_group()
    where.add_argument("--ptd-out", metavar="OUT.ptd",
                       help="write the merged program's one .ptd here: every live key once")
    merge.add_argument("--ptd", action=_MovedOutput, help=argparse.SUPPRESS)
    where.add_argument(
        "--inline", action="store_true",
        help="move the .ptd data into OUT.pte instead (external tensors into its constant "
        "segment, named data into its own): OUT.pte then loads without a data file",
    )
    merge.add_argument("--json", action="store_true", help="print the report as JSON")
    _add_verify_arguments(merge)
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
    split.add_argument("--method", action="append", required=True, metavar="[NEW=]NAME",
                       help="a method to keep (repeatable); NEW=NAME renames it as it is cut, "
                       "e.g. --method forward=score for an app that calls forward")
    split.add_argument("-o", "--output", required=True, metavar="OUT.pte",
                       help="where to write the methods kept (not IN.pte)")
    _add_data_arguments(split, "split keeps its keys: OUT.pte loads with the same .ptd",
                        old_ptd=False)
    split.add_argument("--json", action="store_true", help="print the report as JSON")
    _add_verify_arguments(split)
    return merge, split


def _merge(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    from emitter_filter.ondisk.data_files import data_files_for
    from emitter_filter.ondisk.merge import merge_files

    data_of = data_files_for(options.pte, options.data, beside=options.data_beside)
    verifier = _verifier(options, list(zip(options.pte, data_of)))
    with _sigterm_unwinds():
        report = merge_files(options.pte, options.output, methods=options.method,
                             prefixes=options.prefix, drops=options.drop, data=options.data,
                             ptd_out=options.ptd_out, inline=options.inline,
                             dedupe=options.dedupe, progress=_progress_printer(),
                             data_beside=options.data_beside)
    # Each method of the output against the method of the input it came from.
    out = (report.output, [report.ptd_output] if report.ptd_output else [])
    data_by_input = dict(zip(options.pte, data_of))
    verification = verifier and verifier.methods([
        (out, method.name, (method.source, data_by_input[method.source]), method.source_method)
        for method in report.methods])
    return _print_report(report, options.json, verification)


def _split(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    from emitter_filter.ondisk.merge import split_file

    from emitter_filter.ondisk.data_files import program_data

    data = program_data(options.pte, options.data, beside=options.data_beside)
    verifier = _verifier(options, [(options.pte, data)])
    with _sigterm_unwinds():
        report = split_file(options.pte, options.output, options.method,
                            progress=_progress_printer(), data=data)
    # NEW=NAME: the output's NEW computes what the input's NAME did.
    renamed = [(new, old or new) for new, _, old in (m.partition("=") for m in options.method)]
    verification = verifier and verifier.methods([
        ((report.output, data), new, (options.pte, data), old) for new, old in renamed])
    if options.json:
        print(json.dumps(_with_verify(_paired(report.to_json(), [options.pte], [data]),
                                      verification), indent=2))
    else:
        print(report.summary())
    return _verify_exit(verification, options.json)

def _add_verify_arguments(command: argparse.ArgumentParser) -> None:
    """--verify and its --inputs, on each command that writes programs."""
    command.add_argument(
        "--verify", action="store_true",
        help="then run every method of each output and of the input it came from on the same "
        "inputs, in ExecuTorch's pybindings or else executorch-numpy-runtime, and exit 1 "
        "unless their outputs are bit-identical (see emitter-filter verify --help)",
    )
    command.add_argument(
        "--inputs", metavar="FILE.npz",
        help="with --verify: the inputs to run instead of seeded ones, arrays named "
        "METHOD/INDEX after the output's method names (a method not named is seeded)",
    )


def _add_verify_parser(commands) -> argparse.ArgumentParser:
    verify = commands.add_parser(
        "verify",
        help="run every method of NEW.pte and of OLD.pte on the same inputs; exit 1 unless "
        "their outputs are bit-identical",
        description=(
            "Load OLD.pte and NEW.pte in a runtime (ExecuTorch's pybindings when they import, "
            "else executorch-numpy-runtime: Python >= 3.12, no torch, no .ptd, no custom ops), "
            "run each method of NEW and the method of OLD of its name (or --method's) on the "
            "same inputs, seeded from the method's own input metadata or given with --inputs, "
            "each in a fresh load, and compare their outputs bit for bit. Exit 0 if all are "
            "equal; 1 naming the first method and output that differ (or a method of NEW that "
            "does not load); 2 if no runtime imports, a file needs what the runtime lacks, "
            "OLD does not run, or an argument is wrong."
        ),
    )
    verify.add_argument("old", metavar="OLD.pte", help="the program NEW was written from")
    verify.add_argument("new", metavar="NEW.pte", help="the program to verify")
    verify.add_argument(
        "--method", action="append", default=[], metavar="NEW=OLD",
        help="compare NEW's method NEW with OLD's method OLD (repeatable); other methods "
        "with the method of their own name",
    )
    _add_data_arguments(verify, "FILE is OLD.pte or NEW.pte", old_ptd=False)
    verify.add_argument(
        "--inputs", metavar="FILE.npz",
        help="the inputs to run instead of seeded ones: arrays named METHOD/INDEX after NEW's "
        "method names, e.g. forward/0 (a method not named is seeded)",
    )
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    return verify


def _verify(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    from emitter_filter.ondisk.data_files import data_files_for
    from emitter_filter.verify.compare import Program, verify_programs

    old_data, new_data = data_files_for([options.old, options.new], options.data,
                                        beside=options.data_beside)
    report = verify_programs(Program(options.old, tuple(old_data)),
                             Program(options.new, tuple(new_data)),
                             options.method, inputs=options.inputs)
    if options.json:
        print(json.dumps(report.to_json(), indent=2))
    return _verify_exit(report, options.json)


def _verifier(options: argparse.Namespace, inputs):
    """With --verify, before anything is written: the runtime, --inputs read, and each
    input (pte, .ptd files) one it loads (exit 2 if not); else None."""
    if not options.verify:
        if options.inputs is not None:
            raise VerifyError("--inputs is for --verify: give both")
        return None
    from emitter_filter.verify.compare import Verifier

    return Verifier(inputs, options.inputs)


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
    share.add_argument("--out", required=True, metavar="DIR",
                       help="where to write the programs (under their names, or where several "
                       "have one name, the tails of their paths that tell them apart: "
                       "a/model.pte, b/model.pte) and the .ptd")
    share.add_argument("--ptd-out", dest="ptd_name", default="shared.ptd", metavar="OUT.ptd",
                       help="the shared .ptd's file name in DIR (default: shared.ptd)")
    share.add_argument("--ptd", action=_MovedOutput, help=argparse.SUPPRESS)
    _add_data_arguments(share, "its entries go into the shared .ptd", old_ptd=False)
    share.add_argument(
        "--min-bytes", type=_byte_count, default=None, metavar="N",
        help="leave contents shorter than N bytes where they are (default: 1024, what "
        "audit and explain count as stored twice)",
    )
    share.add_argument(
        "--prune", action="store_true",
        help="first prune each program as prune does, with the .ptd beside it (not with "
        "--data), then share them",
    )
    share.add_argument(
        "--dedupe", action="store_true",
        help="also store what repeats within one program once, as prune --dedupe does "
        "(named data that repeats a constant: a tied embedding lowered to XNNPACK)",
    )
    share.add_argument("--json", action="store_true", help="print the report as JSON")
    _add_verify_arguments(share)
    return share


def _share(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    from emitter_filter.ondisk.data_files import data_files_for
    from emitter_filter.ondisk.share import DEFAULT_MIN_BYTES, share_files

    data_of = data_files_for(options.pte, options.data, beside=options.data_beside)
    verifier = _verifier(options, list(zip(options.pte, data_of)))
    if verifier and not verifier.runtime.takes_data:
        from emitter_filter.verify.runtimes import NO_DATA

        raise VerifyError(f"share --verify: share's outputs load with a .ptd, and "
                          f"{verifier.runtime.name} {NO_DATA}")
    report = share_files(
        options.pte, options.out, ptd_paths=options.data, ptd_name=options.ptd_name,
        min_bytes=DEFAULT_MIN_BYTES if options.min_bytes is None else options.min_bytes,
        prune=options.prune, dedupe=options.dedupe, progress=_progress_printer(),
        data_beside=options.data_beside,
    )
    verification = None
    if verifier:
        # Each output loads with the shared .ptd, or, when nothing was shared, with the
        # copies of its own .ptd files.
        outputs = [list(report.ptd_outputs) if report.shared_contents else
                   [os.path.join(options.out, os.path.basename(d)) for d in data]
                   for data in data_of]
        verification = verifier.programs([
            ((p.path, data), (p.output, ptds))
            for p, data, ptds in zip(report.programs, data_of, outputs)])
    return _print_report(report, options.json, verification)


def _run(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    target = options.target
    if not target or (target[0] == "-m" and len(target) < 2):
        return _usage_error("run", "give -m MODULE or SCRIPT")
    module, script = (target[1], None) if target[0] == "-m" else (None, target[0])
    argv = [module or script, *target[(2 if module else 1):]]
    if script is not None and not os.path.isdir(script):
        # Read before the script runs, so that an unreadable one is ours to report, one line.
        try:
            open(script, "rb").close()
        except OSError as error:
            print(f"emitter-filter run: {_os_error_line(error)}", file=sys.stderr)
            return EXIT_USAGE

    from emitter_filter._upstream import check_executorch_version
    from emitter_filter.inprocess import startup
    from emitter_filter.reachability import keep_patterns

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
        disarm()
        if "emitter_filter.inprocess.hook" in sys.modules:
            sys.modules["emitter_filter.inprocess.hook"].disable()
    return EXIT_OK


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
        (not hook_files, f"{_startup.PTH_NAME} is in none of this Python's site directories; "
                         "reinstall emitter_filter (a process that imports it still prunes)"),
        (unsupported is not None, str(unsupported)),
    ]
    modes = [
        ("prune", ENV_PRUNE, "prunes the programs it serializes"),
        ("deduplicate", ENV_DEDUPE, "deduplicates the programs it serializes (pruned or not)"),
    ]
    lines = [
        _env_answer(question, name, does, stoppers) for question, name, does in modes
    ] + [_env_strict_answer()]
    # A namespace package (executorch has no __init__.py): its directories, not a file.
    where = "" if executorch is None else f" at {', '.join(executorch.submodule_search_locations)}"
    print("\n".join([
        *lines,
        f"python: {sys.executable} ({sys.version.split()[0]})",
        *(f"{name}: {_env_value(name)}" for name in (ENV_PRUNE, ENV_DEDUPE, ENV_STRICT)),
        f"start-up hook: {', '.join(hook_files) or 'not installed'}",
        f"executorch: {version or 'not installed'}{where}"
        + ("" if version is None else " (not supported)" if unsupported else " (supported)"),
    ]))
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
        (requested is None, f"{refused}; a process says so, and does not {question}, "
                             f"once it imports {EXPORTER_MODULE}"),
        (requested is False and raw is not None, f"{name}={raw!r} turns it off"),
        *stoppers,
    ]
    answer = next((f"no: {reason}" for stops, reason in reasons if stops), (
        f"yes: every Python process started here {does} once it imports {EXPORTER_MODULE}"
    ))
    return f"would {question}: {answer}"


def _env_strict_answer() -> str:
    """`strict: ...`: what a program the filter cannot prove safe to prune becomes."""
    raw = os.environ.get(ENV_STRICT)
    requested, refused = _env_flag(ENV_STRICT)
    if requested is None:
        return f"strict: {refused}; a pruned export raises this error"
    if requested:
        return ("strict: yes: a program the filter cannot prove safe to prune raises "
                "ProgramFormatError")
    why = f"{ENV_STRICT} is not set" if raw is None else f"{ENV_STRICT}={raw!r} turns it off"
    return f"strict: no: {why}; a program the filter cannot prove safe to prune is written " \
           "unpruned, with a warning"


def _format_audit(report, top: int | None = None) -> str:
    """The human table: spaces, the `top` largest dead entries (None: all), unprovable named
    data, duplicates."""
    from emitter_filter.scalar_types import dtype_label

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
        lines.append("named data kept because an opaque delegate may read it (not dead):")
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
            lines.append(f"{shared.nbytes:>14,}  x{len(shared.copies)}  {copies}  at {shared.offset:,}")
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


def _audit(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    """Each set of programs that read a common `.ptd` audited as one (`audit_set`), every
    other program alone (`audit_file`), each judged against --max-dead-bytes."""
    from emitter_filter.ondisk.audit import audit_file
    from emitter_filter.ondisk.audit_set import audit_set
    from emitter_filter.ondisk.data_files import data_files_for, sets_of
    from emitter_filter.state_names import state_file

    data_of = data_files_for(options.pte, options.data, beside=options.data_beside)
    names = state_file(options.names)
    reports, refused, gated = [], [], []
    # With --fail-on-key-clash, programs are one set even without a common .ptd: XNNPACK
    # keeps its keys in each .pte, and its weights cache is shared by every program.
    groups = ([list(range(len(options.pte)))] if options.fail_on_key_clash
              and len(options.pte) > 1 else sets_of(data_of))
    for members in groups:
        if len(members) == 1:
            [n] = members
            report = audit_file(options.pte[n], data_of[n], keep_constants=options.keep,
                                names=names)
        else:
            report = audit_set([options.pte[n] for n in members],
                               [(options.pte[n], f) for n in members for f in data_of[n]],
                               min_bytes=_min_bytes(options))
        # A file the runtime refuses gets its own status, not the report of a file that loads.
        lines = [_validity_lines(options.pte[n], data_of[n], options.require_data)
                 for n in members]
        refused.extend(line for line, _ in lines if line is not None)
        if any(line is not None for line, _ in lines):
            continue
        gated.extend(gate for _, gate in lines if gate is not None)
        if options.fail_on_key_clash and getattr(report, "key_clashes", ()):
            keys = ", ".join(repr(clash.key) for clash in report.key_clashes)
            gated.append(f"emitter-filter: --fail-on-key-clash: {keys} held with different "
                         "bytes by programs of the set")
        reports.append(report)
    if options.json and reports:
        # One file (or one set): its report; several: a list of them.
        documents = [report.to_json() for report in reports]
        print(json.dumps(documents[0] if len(documents) == 1 else documents, indent=2))
    elif reports:
        print("\n\n".join(_format_audit(r, options.top) if hasattr(r, "spaces")
                           else "\n".join(r.lines()) for r in reports))
        if len(options.pte) > 1 and not refused:
            print(_stored_twice(options, data_of))
    over = [
        r for r in reports
        if options.max_dead_bytes is not None and r.dead_bytes > options.max_dead_bytes
    ]
    for report in over:
        limit = f"--max-dead-bytes {options.max_dead_bytes:,}"
        if hasattr(report, "path"):
            line = f"{report.path}: {report.dead_bytes:,} dead bytes > {limit}"
        else:
            line = (f"the set has {report.dead_bytes:,} dead bytes > {limit} "
                    f"({', '.join(p.path for p in report.programs)})")
        print(f"emitter-filter: {line}", file=sys.stderr)
    for line in [*gated, *refused]:
        print(line, file=sys.stderr)
    if refused:
        return EXIT_USAGE
    return EXIT_DEAD_BYTES if over or gated else EXIT_OK


def _validity_lines(
    pte: str, ptd: Sequence[str], require_data: bool = False
) -> tuple[str | None, str | None]:
    """(the line of a file ExecuTorch's runtime refuses, the `--require-data` gate's line),
    each None when there is nothing to say (`ondisk.validate`)."""
    from emitter_filter.ondisk.validate import validate_file

    validity = validate_file(pte, ptd)
    if not validity.valid:
        return f"emitter-filter: {pte}: {validity.status}", None
    if require_data and validity.missing_data:
        return None, f"emitter-filter: {pte}: --require-data: {validity.missing_line()}"
    return None, None


def _stored_twice(options: argparse.Namespace, data_of) -> str:
    """Of programs audited apart: the bytes they store in more than one file, which share
    would store once (`audit_set`'s count, not a verdict)."""
    from emitter_filter.ondisk.audit_set import audit_set

    every = audit_set(options.pte, [(p, f) for p, files in zip(options.pte, data_of)
                                    for f in files], min_bytes=_min_bytes(options))
    return (f"\nthe {len(options.pte)} programs: {every.duplicated_bytes:,} B stored in more than "
            f"one file ({len(every.shared)} contents of --min-bytes {_min_bytes(options):,} or "
            "more, what share stores once)")


def _paired(document: dict, ptes: Sequence[str], data_of: Sequence[Sequence[str]]) -> dict:
    """A report's JSON with which `.ptd` files each program was read with (`"data"`)."""
    from emitter_filter.ondisk.data_files import pairing_json

    return {**document, "data": pairing_json(ptes, data_of)}


def _explain(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    from emitter_filter.ondisk.data_files import data_files_for
    from emitter_filter.ondisk.output import check_outputs, write_files

    if options.value is not None and options.node_data is None:
        return _usage_error("explain", "--value says what --node-data sums; give --node-data "
                            "OUT.json with it")
    if len(options.pte) > 1 and (options.names is not None or options.node_data is not None):
        option = "--names" if options.names is not None else "--node-data"
        return _usage_error("explain", f"{option} takes one program, not a set")
    data_of = data_files_for(options.pte, options.data, beside=options.data_beside)
    # Every output refused, or every one written: checked before any work.
    outputs = [o for o in (options.html, options.node_data) if o is not None]
    inputs = [*options.pte, *(f for files in data_of for f in files)]
    check_outputs(inputs, outputs, "explain")
    if len(options.pte) > 1:
        from emitter_filter.ondisk.explain_set import explain_set

        explanation = explain_set(options.pte, options.data, data_beside=options.data_beside,
                                  min_bytes=_min_bytes(options))
    else:
        from emitter_filter.ondisk.explain import explain_file

        explanation = explain_file(options.pte[0], data_of[0], names=options.names)
    refused = [line for line, _ in (_validity_lines(p, d) for p, d in zip(options.pte, data_of))
               if line]
    if refused:
        print("\n".join(refused), file=sys.stderr)
        return EXIT_USAGE
    files, wrote = [], []
    if options.html is not None:
        from emitter_filter.ondisk.explain_page import render_explain_page

        page = render_explain_page(explanation).encode("utf-8")
        files.append((options.html, page))
        wrote.append(f"wrote {options.html} ({len(page):,} B): the treemap, offline; "
                     "open it in a browser")
    if options.node_data is not None:
        from emitter_filter.ondisk.node_data import node_data_file

        value = options.value or "bytes"
        document = node_data_file(options.pte[0], data_of[0], value, names=options.names)
        files.append((options.node_data, (json.dumps(document, indent=2) + "\n").encode()))
        wrote.append(f"wrote {options.node_data}: Model Explorer node data ({value} per node "
                     f"of {len(document)} graph(s))")
    write_files(files, inputs, "explain")
    # On stderr, so that `--json` output stays one document.
    for line in wrote:
        print(line, file=sys.stderr)
    if options.json:
        print(json.dumps(explanation.to_json(options.top, options.by), indent=2))
    else:
        print(explanation.to_text(_TABLE_PARTS if options.top is None else options.top, options.by))
    return EXIT_OK


def _diff(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    from emitter_filter.ondisk.diff import diff_files, growth_limit

    try:
        limit = None if options.max_growth is None else growth_limit(options.max_growth)
    except ValueError as error:
        return _usage_error("diff", str(error))
    sets = [os.path.isdir(options.old), os.path.isdir(options.new)]
    if any(sets):
        if not all(sets):
            directory, other = ((options.old, options.new) if sets[0]
                                else (options.new, options.old))
            what = "a file" if os.path.exists(other) else "not there"
            return _usage_error("diff", f"{directory} is a directory but {other} is {what}: "
                                "give two directories (sets of programs, each with its .ptd "
                                "files beside it) or two .pte files")
        if options.old_data or options.new_data or options.old_names or options.new_names:
            return _usage_error("diff", "--old-data, --new-data and the --*-names options take "
                                "two .pte files; two directories pair each program with the "
                                ".ptd beside it")
        from emitter_filter.ondisk.diff_set import diff_sets

        result = diff_sets(options.old, options.new, data_beside=options.data_beside)
        pairing = result.pairing()
    else:
        from emitter_filter.ondisk.data_files import data_files_for, program_data

        if options.old_data or options.new_data:
            old_data = program_data(options.old, options.old_data, beside=options.data_beside)
            new_data = program_data(options.new, options.new_data, beside=options.data_beside)
        else:  # one call: one warning for a .ptd beside both that cannot be read
            old_data, new_data = data_files_for([options.old, options.new],
                                                beside=options.data_beside)
        result = diff_files(options.old, options.new, old_data, new_data,
                            old_names=options.old_names, new_names=options.new_names)
        pairing = ([options.old, options.new], [old_data, new_data])
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


def _print_growth(result, limit: str) -> None:
    """On stderr: the growth over `limit`, and the entries that account for it."""
    if hasattr(result, "programs"):  # a set: what each program grew by
        print(f"emitter-filter: {result.new}: grew {result.delta:+,} bytes over {result.old}, "
              f"more than {limit}; from:", file=sys.stderr)
        for name in result.added:
            print(f"  added {name}", file=sys.stderr)
        for name, diff in sorted(result.programs, key=lambda item: -item[1].delta):
            if diff.delta > 0:
                print(f"  {diff.delta:+,} B  {name}", file=sys.stderr)
        return
    print(f"emitter-filter: {result.new_path}: grew {result.delta:+,} bytes over {result.old_path}"
          f", more than {limit}; from:", file=sys.stderr)
    for change in result.growth():
        notes = f" ({'; '.join(change.notes)})" if change.notes else ""
        print(f"  {change.delta:+,} B  {change.kind} {change.label}{notes}", file=sys.stderr)


def _budget(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    from emitter_filter.ondisk.budget import (
        benchmark_json,
        budget_document,
        check_budget,
        read_budget,
    )
    from emitter_filter.ondisk.output import check_outputs, write_files

    writing = options.budget_action == "write"
    # Every output refused, or every one written: checked before any work.
    outputs = [o for o in (options.output if writing else None, options.benchmark_json)
               if o is not None]
    inputs = [*options.pte, *([] if writing else [options.budget])]
    check_outputs(inputs, outputs, f"budget {options.budget_action}")
    files = []
    if writing:
        document, explanations = budget_document(options.pte, options.data,
                                                  data_beside=options.data_beside)
        files.append((options.output, (json.dumps(document, indent=2) + "\n").encode()))
        over = []
    else:
        checks = check_budget(options.pte, read_budget(options.budget), options.tolerance,
                              options.data, data_beside=options.data_beside)
        explanations = [c.explanation for c in checks]
        over = [c for c in checks if c.over]
    if options.benchmark_json is not None:
        files.append((options.benchmark_json,
                      json.dumps(benchmark_json(explanations), indent=2).encode()))
    write_files(files, inputs, f"budget {options.budget_action}")
    if writing:
        print(f"wrote {options.output}: " + ", ".join(
            f"{e.path} {e.file_bytes:,} B" for e in explanations))
        return EXIT_OK
    for check in checks:
        print(check.summary())
        if check.over and check.diff is not None:
            print(check.diff.to_markdown() if options.markdown else check.diff.to_text())
    for check in over:
        if check.diff is not None:
            _print_growth(check.diff, f"the budget ({check.allowed_bytes:,} B allowed)")
    return EXIT_DEAD_BYTES if over else EXIT_OK


def _demo(parser: argparse.ArgumentParser, options: argparse.Namespace) -> int:
    from pathlib import Path

    from emitter_filter.demo import default_out_dir, run_demo, write_example

    out = Path(options.out) if options.out else default_out_dir(Path())
    if options.files_only:
        path, dead = write_example(out)
        print(f"wrote {path} ({path.stat().st_size:,} bytes; {dead:,} of them dead), a program "
              f"ExecuTorch 1.5.1 wrote; next: emitter-filter audit {path}")
        return EXIT_OK
    result = run_demo(out)
    print("\n".join(result.lines()))
    for failure in result.failures:
        print(f"emitter-filter demo: {failure}", file=sys.stderr)
    return EXIT_DEMO_FAILED if result.failures else EXIT_OK


_VERBOSE = re.compile(r"-v+|--verbose")


def _command_index(arguments: Sequence[str]) -> int | None:
    """Where the subcommand is among the arguments: the first that is not an option."""
    return next((i for i, a in enumerate(arguments) if not a.startswith("-")), None)


def _command_parser(parser: argparse.ArgumentParser, options: argparse.Namespace):
    """The parser of the command (`budget check`: of its action) that `options` were
    parsed for."""
    while True:
        commands = next((a for a in parser._actions
                         if isinstance(a, argparse._SubParsersAction)), None)
        name = None if commands is None else getattr(options, commands.dest, None)
        if name not in getattr(commands, "choices", {}):
            return parser
        parser = commands.choices[name]


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit code instead of exiting."""
    parser = _build_parser()
    arguments = list(sys.argv[1:] if argv is None else argv)
    # Everything after `run` belongs to the script, options like -m and -v included:
    # argparse cannot leave an option-led remainder alone, so split it off here.
    target = None
    command = _command_index(arguments)
    if command is not None and arguments[command] == "run":
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
            arguments, target = arguments + target[:1], None
    try:
        options, unknown = parser.parse_known_args(arguments)
        if unknown:
            # Said by the command's own parser, so that the message points at its help.
            _command_parser(parser, options).error(
                f"unrecognized arguments: {' '.join(unknown)}"
            )
    except SystemExit as exit_:
        return EXIT_USAGE if exit_.code else EXIT_OK
    if target is not None:
        options.target = target
    options.verbose += getattr(options, "verbose_after", 0)
    logging.basicConfig(
        level=logging.DEBUG if options.verbose > 1 else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    # One INFO line per prune is the point of `run`: show it unless asked for more.
    # The file commands print their own results on stdout, so they log INFO (which .ptd
    # a program reads, say) only when asked to: an error stays one line.
    quiet = options.command != "run" and not options.verbose
    logging.getLogger("emitter_filter").setLevel(
        logging.DEBUG if options.verbose > 1 else logging.WARNING if quiet else logging.INFO
    )
    commands = {"run": _run, "audit": _audit, "prune": _prune, "demo": _demo, "env": _env,
                "share": _share, "merge": _merge, "split": _split, "explain": _explain,
                "diff": _diff, "budget": _budget, "verify": _verify}
    try:
        return commands[options.command](parser, options)
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


def _os_error_line(error: OSError) -> str:
    """`FILE: what failed` for an OSError no writer or reader turned into our own error."""
    what = error.strerror or str(error)
    if error.filename is None:
        return what
    return f"{os.fsdecode(error.filename)}: {what}"


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

