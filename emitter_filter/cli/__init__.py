"""The `emitter-filter` command line (also `python -m emitter_filter`).

Exit codes: 0 success; 1 `audit` found more dead bytes than `--max-dead-bytes`
(or a key clash in a set under `--fail-on-key-clash`), `diff` a growth over `--max-growth`,
`budget check` a file over its budget, `verify` (or `--verify`) a method that computes otherwise;
2 usage error, bad input, or a file that cannot be read or written, whatever
the command (a one-line message naming the file, and the offset where one applies; with -v also the traceback,
the exit code unchanged; no output file); for `run`, what the script exited with;
for `demo`, 1 if one of its checks failed; 143 (128 + SIGTERM) if `prune` was
terminated, its temporary files removed.

One module per command family, under `app` (the parser and `main`) and over `common`
(what several commands share): `files` (audit, prune), `explain`, `diff`, `budget`
(write, check), `sets` (share, merge, split), `verify`, `inprocess` (run), `env` (env, demo).
Each imports what it reads and runs (ondisk/, inprocess/, verify/) inside its handlers,
so that `emitter-filter --help` and the file commands stay torch-free and quick.
"""

from __future__ import annotations

from emitter_filter.cli.app import _build_parser as _build_parser, console_main, main
from emitter_filter.cli.common import (
    EXIT_DEAD_BYTES,
    EXIT_DEMO_FAILED,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_USAGE,
    EXIT_VERIFY_FAILED,
)

__all__ = [
    "main",
    "console_main",
    "EXIT_OK",
    "EXIT_DEAD_BYTES",
    "EXIT_USAGE",
    "EXIT_DEMO_FAILED",
    "EXIT_TERMINATED",
    "EXIT_VERIFY_FAILED",
]
# `_build_parser` stays importable from here: tests (test_cli_usage, test_cli_options,
# test_docs) read the parser through `emitter_filter.cli._build_parser`.
