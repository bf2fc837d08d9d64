"""`emitter-filter demo`: the main job, end to end, on a model built in code.

A new user's first command: it shows on their machine what the filter drops and
that it changes nothing the runtime computes. The model has random weights from
a fixed seed and the leaks users meet in real exports (see `LEAKS`). It is
exported twice from one `torch.export` graph, with plain ExecuTorch and with
`prune_constants=True`; both `.pte` files are written, audited with
`audit_file`, and run in ExecuTorch's portable runtime on the same input.

Every claim the demo prints is checked; `DemoResult.failures` lists the ones
that did not hold, and the command exits nonzero on any. torch and ExecuTorch are
imported only when the demo runs, so that the rest of the package works without
them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from emitter_filter import _upstream
from emitter_filter.errors import EmitterFilterError, UnsupportedExecutorchError
from emitter_filter.program.scalar_types import dtype_label

if TYPE_CHECKING:
    from emitter_filter.inprocess.reports import PruneReport
    from emitter_filter.ondisk.analyse.audit_report import AuditReport

__all__ = [
    "DemoResult",
    "LEAKS",
    "PLAIN_PTE",
    "PRUNED_PTE",
    "EXAMPLE_PTE",
    "default_out_dir",
    "fold_multiply_by_parameter",
    "run_demo",
    "write_example",
]

logger = logging.getLogger(__name__)

_SEED = 0
#: The file names written in the output directory.
PLAIN_PTE = "model.pte"
PRUNED_PTE = "model.pruned.pte"
#: Where the demo writes without `--out`: this name, or with `-2`, `-3`, ... if taken.
_DEFAULT_DIR = "emitter-filter-demo"

#: The model's constants nothing can read once exported, and how each became dead.
LEAKS = (
    ("calibration", "a registered buffer forward never reads"),
    ("scale", "a parameter a transform pass orphans after to_edge"),
    ("bn.num_batches_tracked", "BatchNorm's counter, unread in eval"),
)


@dataclass(frozen=True)
class DemoResult:
    """What the demo did and found.

    Attributes:
        plain: The `.pte` plain ExecuTorch wrote.
        pruned: The `.pte` written with `prune_constants=True`.
        leaks: Per entry of `LEAKS`: its name, why it is dead, its shape and bytes.
        report: The `PruneReport` of the pruned export.
        plain_audit: `audit_file(plain)`.
        pruned_audit: `audit_file(pruned)`.
        to_executorch_seconds: Wall time of the pruned export's `to_executorch`.
        outputs_identical: Both programs returned the same tensors, bit for bit.
        failures: Each check that did not hold, as a sentence; empty if all held.
    """

    plain: Path
    pruned: Path
    leaks: tuple[tuple[str, str, tuple[int, ...], int], ...]
    report: PruneReport
    plain_audit: AuditReport
    pruned_audit: AuditReport
    to_executorch_seconds: float
    outputs_identical: bool
    failures: tuple[str, ...]

    def lines(self) -> list[str]:
        """The demo's printed output, one string per line."""
        report = self.report
        plain_bytes = self.plain_audit.file_bytes
        saved = plain_bytes - self.pruned_audit.file_bytes
        lines = [
            f"model: conv, batch norm and linear, random weights (seed {_SEED}), "
            f"with {len(self.leaks)} constants nothing reads:"
        ]
        width = max(len(name) for name, *_ in self.leaks)
        for name, why, shape, nbytes in self.leaks:
            lines.append(f"  {name:<{width}}  {str(list(shape)):<12}{nbytes:>10,} B  {why}")
        width = max(len(str(self.plain)), len(str(self.pruned)))
        lines += [
            f"wrote {str(self.plain):<{width}}{plain_bytes:>10,} bytes  plain ExecuTorch",
            f"wrote {str(self.pruned):<{width}}{self.pruned_audit.file_bytes:>10,} bytes  "
            f"prune_constants=True: {saved:,} fewer ({100 * saved / plain_bytes:.1f}%)",
            f"dropped {len(report.dropped)} constants ({report.dropped_bytes:,} B) and "
            f"{report.dropped_values} values, largest first:",
        ]
        for d in sorted(report.dropped, key=lambda d: (-d.nbytes, d.space, d.index)):
            what = dtype_label(d.dtype) + ("" if d.shape is None else f" {list(d.shape)}")
            kind = next((n.kind for n in d.names if n.kind), None)
            name = "-" if not (d.names or d.name) else d.label() + (f" ({kind})" if kind else "")
            lines.append(f"  {d.nbytes:>10,} B  {f'{d.space}[{d.index}]':<14}{what:<28}{name}")
        share = report.seconds / self.to_executorch_seconds
        lines += [
            f"filter: {report.seconds * 1000:.1f} ms, {100 * share:.1f}% of to_executorch "
            f"({self.to_executorch_seconds * 1000:.1f} ms)",
            f"audit: {self.plain.name} has {self.plain_audit.dead_bytes:,} dead bytes in "
            f"{len(self.plain_audit.dead)} entries, the ones dropped; "
            f"{self.pruned.name} has {self.pruned_audit.dead_bytes:,}",
            "portable runtime, forward on the same input: "
            + ("outputs identical" if self.outputs_identical else "outputs DIFFER"),
        ]
        return lines


def default_out_dir(parent: Path) -> Path:
    """`parent/emitter-filter-demo`, or the first of `-2`, `-3`, ... that does not exist."""
    candidate = parent / _DEFAULT_DIR
    number = 1
    while candidate.exists():
        number += 1
        candidate = parent / f"{_DEFAULT_DIR}-{number}"
    return candidate


@contextlib.contextmanager
def _quiet_upstream_imports() -> Iterator[None]:
    """Warnings that importing torch, torchao and ExecuTorch log about themselves (a CUDA
    kernel library not loaded, no Triton, a deprecated torch call): not the user's to act
    on. Errors still show."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


# What the runtime's CPU probe prints on its first run (`[cpuinfo_utils.cpp:87] Failed to
# open midr file ...`): about the machine, not the program.
_CPU_PROBE = "[cpuinfo_utils.cpp:"


@contextlib.contextmanager
def _without_cpu_probe_lines() -> Iterator[None]:
    """Runs the runtime with its stderr held back, then prints every line but the CPU probe's.

    The C++ side writes to file descriptor 2, or to `sys.stderr` through pybind11's stream
    redirect: both are held."""
    sys.stderr.flush()
    saved_fd, saved_stream, stream = os.dup(2), sys.stderr, io.StringIO()
    with tempfile.TemporaryFile() as log:
        os.dup2(log.fileno(), 2)
        sys.stderr = stream
        try:
            yield
        finally:
            sys.stderr = saved_stream
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
            log.seek(0)
            lines = [*log.read().decode("utf-8", "replace").splitlines()]
            lines += stream.getvalue().splitlines()
            for line in lines:
                if not line.startswith(_CPU_PROBE):
                    print(line, file=sys.stderr)


def _import_executorch():
    """torch and executorch, or one clear error naming what to install."""
    try:
        # The exporter too: importing it is what turns on pruning that EMITTER_FILTER_PRUNE=1
        # asked for (the start-up hook waits for it).
        with _quiet_upstream_imports():
            import executorch  # noqa: F401
            import executorch.exir  # noqa: F401
            import torch
    except ImportError as error:
        raise UnsupportedExecutorchError(
            f"the demo needs torch and executorch ({error}): {_upstream.install_hint()}"
        ) from error
    return torch


def fold_multiply_by_parameter(graph_module):
    """An edge pass that folds `x * p` into `x` for a placeholder `p` (a scale known to be 1).

    `p` loses its only user after `to_edge` has removed unused parameters: the way a
    constant dies late in real pipelines. The benchmarks' orphaned-parameter model
    uses it too.
    """
    from executorch.exir.dialects._ops import ops as exir_ops
    from torch.fx.passes.infra.pass_base import PassResult

    modified = False
    for node in list(graph_module.graph.nodes):
        if node.op == "call_function" and node.target == exir_ops.edge.aten.mul.Tensor:
            lhs, rhs = node.args
            if getattr(rhs, "op", None) == "placeholder":
                node.replace_all_uses_with(lhs)
                graph_module.graph.erase_node(node)
                modified = True
    graph_module.graph.lint()
    graph_module.recompile()
    return PassResult(graph_module, modified)


def _build_model(torch):
    """The seeded model, in eval mode, and its input."""

    class DemoModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 32, 3)
            self.bn = torch.nn.BatchNorm2d(32)
            self.head = torch.nn.Linear(32, 256)
            self.scale = torch.nn.Parameter(torch.ones(256))
            self.register_buffer("calibration", torch.randn(256, 256))

        def forward(self, x):
            features = self.bn(self.conv(x)).relu().mean((2, 3))
            return self.head(features) * self.scale

    torch.manual_seed(_SEED)
    model = DemoModel().eval()
    return model, (torch.randn(1, 3, 16, 16),)


def _check(failures: list[str], holds: bool, sentence: str) -> None:
    if not holds:
        failures.append(sentence)


def _export_both(torch, model, inputs, plain_path: Path, pruned_path: Path):
    """Writes the plain and the pruned `.pte` of one graph; returns the pruned manager and the
    seconds its `to_executorch` took."""
    from executorch.exir import ExecutorchBackendConfig as PlainConfig, to_edge

    import emitter_filter

    # Upstream's own deprecation notices, about its internals: not the user's to act on.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        exported = torch.export.export(model, inputs)
        logger.info("to_executorch with plain ExecuTorch -> %s", plain_path)
        plain = to_edge(exported).transform([fold_multiply_by_parameter])
        plain.to_executorch(PlainConfig()).save(str(plain_path))
        logger.info("to_executorch with prune_constants=True -> %s", pruned_path)
        edge = to_edge(exported).transform([fold_multiply_by_parameter])
        started = time.perf_counter()
        manager = edge.to_executorch(emitter_filter.ExecutorchBackendConfig(prune_constants=True))
        seconds = time.perf_counter() - started
        manager.save(str(pruned_path))
    return manager, seconds


def _outputs_identical(torch, inputs, plain_path: Path, pruned_path: Path) -> bool:
    """Whether both files return the same outputs in the portable runtime."""
    from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer

    logger.info("running both files in the portable runtime")
    # The runtime does not keep its buffer alive: hold the bytes until the outputs are read.
    plain_bytes, pruned_bytes = plain_path.read_bytes(), pruned_path.read_bytes()
    with _without_cpu_probe_lines():
        plain_outputs = _load_for_executorch_from_buffer(plain_bytes).forward(inputs)
        pruned_outputs = _load_for_executorch_from_buffer(pruned_bytes).forward(inputs)
    return len(plain_outputs) == len(pruned_outputs) and all(
        torch.equal(a, b) for a, b in zip(plain_outputs, pruned_outputs, strict=True)
    )


def _failures(result: DemoResult) -> tuple[str, ...]:
    """The demo's claims that do not hold, each as one line (see the module docstring)."""
    failures: list[str] = []
    plain, pruned = result.plain_audit, result.pruned_audit
    _check(
        failures,
        pruned.file_bytes < plain.file_bytes,
        f"{result.pruned} ({pruned.file_bytes:,} B) is not smaller than {result.plain} "
        f"({plain.file_bytes:,} B)",
    )
    dropped = sorted((n.name, d.nbytes) for d in result.report.dropped for n in d.names)
    expected = sorted((name, nbytes) for name, _, _, nbytes in result.leaks)
    _check(
        failures,
        dropped == expected,
        f"the filter dropped (name, bytes) {dropped}, expected the leaks' {expected}",
    )
    audited = [(d.space, d.index, d.nbytes) for d in plain.dead]
    reported = [(d.space, d.index, d.nbytes) for d in result.report.dropped]
    _check(
        failures,
        audited == reported,
        f"audit of {result.plain} finds dead (space, index, bytes) {audited}, "
        f"the filter dropped {reported}",
    )
    _check(
        failures,
        pruned.dead_bytes == 0 and not pruned.dead,
        f"audit of {result.pruned} finds {pruned.dead_bytes:,} dead bytes "
        f"in {len(pruned.dead)} entries, expected none",
    )
    _check(
        failures,
        result.outputs_identical,
        f"{result.pruned} and {result.plain} return different outputs on the same input",
    )
    return tuple(failures)


#: The program `demo --files-only` writes (`emitter_filter/examples/model.pte`).
EXAMPLE_PTE = "model.pte"


def write_example(out_dir: Path) -> tuple[Path, int]:
    """Writes the shipped example program into `out_dir` (created if missing); no torch.

    Returns its path and its dead bytes, as `audit` counts them.
    """
    from importlib.resources import files

    from emitter_filter.ondisk.audit import audit_file
    from emitter_filter.ondisk.write.small_files import write_file

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / EXAMPLE_PTE
    write_file(str(path), files("emitter_filter.examples").joinpath(EXAMPLE_PTE).read_bytes())
    return path, audit_file(path).dead_bytes


def run_demo(out_dir: Path) -> DemoResult:
    """Builds the model, writes both `.pte` files to `out_dir`, audits and runs them.

    Args:
        out_dir: Created if missing; `PLAIN_PTE` and `PRUNED_PTE` in it are replaced.

    Raises:
        UnsupportedExecutorchError: torch or executorch is not installed.
        EmitterFilterError: Pruning is on for the whole process (`EMITTER_FILTER_PRUNE`),
            so no plain export can be made to compare with.
    """
    torch = _import_executorch()  # with the exporter: before asking whether pruning is on

    import emitter_filter
    from emitter_filter.inprocess import hook

    if hook.is_enabled():
        raise EmitterFilterError(
            f"pruning is on for every export ({emitter_filter.ENV_PRUNE}), so the demo "
            "has no plain export to compare with: unset it"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    plain_path, pruned_path = out_dir / PLAIN_PTE, out_dir / PRUNED_PTE

    logger.info("building the model (seed %d) and exporting it", _SEED)
    model, inputs = _build_model(torch)
    tensors = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    leaks = tuple(
        (name, why, tuple(tensors[name].shape), tensors[name].nbytes) for name, why in LEAKS
    )
    manager, seconds = _export_both(torch, model, inputs, plain_path, pruned_path)
    logger.info("auditing both files")
    result = DemoResult(
        plain=plain_path,
        pruned=pruned_path,
        leaks=leaks,
        report=emitter_filter.report(manager),
        plain_audit=emitter_filter.audit_file(plain_path),
        pruned_audit=emitter_filter.audit_file(pruned_path),
        to_executorch_seconds=seconds,
        outputs_identical=_outputs_identical(torch, inputs, plain_path, pruned_path),
        failures=(),
    )
    return dataclasses.replace(result, failures=_failures(result))
