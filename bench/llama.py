"""ExecuTorch's llama example at stories15M shape, through ExecuTorch's own LLM exporter.

The model is the one `executorch.examples.models.llama.export_llama` builds
(dim 288, 6 layers, 6 heads, vocab 32000, KV cache, SDPA with KV cache op),
with random weights written to a checkpoint here: nothing is downloaded. The
exporter quantizes it to 8da4w and lowers it to XNNPACK, as its README does.

Pruning is forced on the way a user would for a script they cannot edit: by
`EMITTER_FILTER_PRUNE=1` in the environment of a process that imports
emitter_filter (see `bench.worker`). The exporter's own `to_executorch` call is
observed with `observe_to_executorch` so the bench can time it and ask
`emitter_filter.report` about the manager it returned.

Pitfalls kept in mind (shared/notes/executorch-pitfalls.md): the exporter treats a
checkpoint path containing "8da4w" or "int8" as already quantized, so the work
directory and file names here are neutral; an 8da4w export takes minutes on this
machine, so this model is part of the full run only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import runpy
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "STORIES_PARAMS",
    "write_checkpoint",
    "exporter_argv",
    "observe_to_executorch",
    "run_exporter",
]

logger = logging.getLogger(__name__)

NAME = "llama_stories"
DESCRIPTION = (
    "ExecuTorch llama example, stories15M shape (dim 288, 6 layers, vocab 32000), "
    "8da4w + XNNPACK + KV cache via export_llama"
)

#: params.json of a stories15M-shaped model.
STORIES_PARAMS = {
    "dim": 288,
    "multiple_of": 32,
    "n_heads": 6,
    "n_kv_heads": 6,
    "n_layers": 6,
    "norm_eps": 1e-05,
    "vocab_size": 32000,
}
_EXPORTER = "executorch.examples.models.llama.export_llama"
#: Substrings that make `export_llama` treat a checkpoint path as pre-quantized.
_QUANTIZED_PATH_MARKERS = ("8da4w", "int8")


def write_checkpoint(workdir: Path, *, seed: int = 0, tied: bool = False) -> tuple[Path, Path]:
    """Writes `weights.pth` (seeded random parameters) and `params.json` into `workdir`.

    Only parameters are saved: buffers (RoPE tables, caches) are rebuilt by the
    exporter from `params.json`. With `tied`, `output.weight` holds the same values as
    `tok_embeddings.weight`, as in the stories checkpoints, which tie them; it is saved as
    a separate tensor (not a view), so the exported program has two parameters of
    equal bytes, which an fp32 XNNPACK export stores twice.

    Returns:
        (checkpoint path, params path).
    """
    import torch
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs

    if any(marker in str(workdir) for marker in _QUANTIZED_PATH_MARKERS):
        raise ValueError(
            f"{workdir}: the exporter would take a checkpoint under this path for an "
            f"already-quantized one ({' or '.join(_QUANTIZED_PATH_MARKERS)} in it)"
        )
    workdir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = construct_transformer(ModelArgs(**STORIES_PARAMS))
    # Default init leaves some weights at zero or one; random normal weights make
    # every tensor distinct, as a trained checkpoint's are (the emitter dedups bytes).
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.02)
    checkpoint = workdir / "weights.pth"
    params = workdir / "params.json"
    state = {name: p.detach().clone() for name, p in model.named_parameters()}
    if tied:
        state["output.weight"] = state["tok_embeddings.weight"].clone()
    torch.save(state, checkpoint)
    params.write_text(json.dumps(STORIES_PARAMS))
    return checkpoint, params


def exporter_argv(
    checkpoint: Path, params: Path, outdir: Path, *, quantize: bool = True
) -> list[str]:
    """`export_llama`'s command line for an XNNPACK export with KV cache: 8da4w, or
    with `quantize=False` fp32 (every weight kept as the checkpoint has it)."""
    quantization = [
        "--quantization_mode",
        "8da4w",
        "--group_size",
        "32",  # 288 and 768 divide by 32, so every linear is quantized
    ]
    return [
        _EXPORTER,
        "--checkpoint",
        str(checkpoint),
        "--params",
        str(params),
        "--use_kv_cache",
        "--use_sdpa_with_kv_cache",
        "--xnnpack",
        *(quantization if quantize else []),
        "--dtype-override",
        "fp32",
        "--max_seq_length",
        "128",
        "--output-dir",
        str(outdir),
        "--output_name",
        "model.pte",
    ]


@dataclass
class Observed:
    """Every `EdgeProgramManager.to_executorch` call seen: (seconds, manager, memory)."""

    calls: list[tuple[float, object, dict]] = field(default_factory=list)


@contextlib.contextmanager
def observe_to_executorch(probe=None) -> Iterator[Observed]:
    """Times every `EdgeProgramManager.to_executorch` call made inside the block.

    The exporter makes its call deep inside `LLMEdgeManager`; wrapping the method
    for the duration of the block is the only way to time it without copying the
    exporter's code. The original is restored on exit, whatever happens.

    Args:
        probe: A `bench.measure.MemoryProbe`; when given, each call's memory is recorded.
    """
    from executorch.exir.program._program import EdgeProgramManager

    observed = Observed()
    original = EdgeProgramManager.to_executorch

    def timed(self, *args, **kwargs):
        if probe is not None:
            probe.start()
        started = time.perf_counter()
        manager = original(self, *args, **kwargs)
        seconds = time.perf_counter() - started
        memory = probe.stop() if probe is not None else {}
        observed.calls.append((seconds, manager, memory))
        return manager

    EdgeProgramManager.to_executorch = timed
    try:
        yield observed
    finally:
        EdgeProgramManager.to_executorch = original


def run_exporter(argv: list[str]) -> None:
    """Runs `python -m executorch.examples.models.llama.export_llama ARGS` in this process."""
    saved_argv = sys.argv
    sys.argv = list(argv)
    try:
        runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
    finally:
        sys.argv = saved_argv
