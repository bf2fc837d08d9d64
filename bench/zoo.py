"""The benchmark's model zoo: every model is built in code from seeded random weights.

Each `ModelCase` builds a fresh `EdgeProgramManager` on every call, because
`to_executorch` runs its passes on the edge programs in place and cannot be
called twice on the same manager. Building is outside every timed region.

Cases, and why each is here:

- ``seed_lower`` / ``seed_to_backend``: the public report (ExecuTorch #9659, the model in
  `tests/seed_model.py`, which the tests build too; see
  `shared/seed-issue.md`): a pt2e-quantized MLP lowered to XNNPACK, once through
  `to_edge_transform_and_lower`, once through `to_edge(...).to_backend`. The
  report's float weights were orphaned *parameters*, which `to_edge` in
  executorch 1.5.1 already removes: measured, nothing is dead here, and these
  cases show what the filter costs on a program it leaves as it was.
- ``unused_buffer``: a registered buffer nothing reads (non-strict export keeps it).
- ``orphaned_parameter``: a parameter whose only use an `EdgeProgramManager.transform`
  pass removes, after `to_edge` already ran its own unused-parameter pass.
- ``external_constants``: ``unused_buffer`` with `external_constants=True`, so the
  dead bytes go to the `.ptd`.
- ``scaled_*``: a stack of portable fp32 linears from ~12 MiB to 1 GiB of
  constants, a fixed quarter of which is dead buffers, to show how the filter's
  cost grows with size. Values and instructions grow with size too (fixed width,
  more blocks), because the filter is linear in those, not in bytes.
- ``tied_embedding_32000x288``: a stories15M-sized vocabulary (32000 x 288,
  35 MiB fp32) whose embedding is tied to the output head, lowered to XNNPACK:
  the weight is written twice (portable constant, XNNPACK named data), nothing
  is dead. Also measured with `dedupe_constants=True` (`ModelCase.dedupe`).
- ``tied_llm_6x288``: a stories15M-shaped decoder without attention (6 blocks of a 288 -> 768
  -> 288 MLP with residuals, the 32000 x 288 embedding tied to the head) lowered to XNNPACK,
  with the constant methods ExecuTorch's LLM exporter adds (`get_max_seq_len`, ...): more
  methods, values and named data than ``tied_embedding_32000x288``, for what the proofs cost
  as a model grows (`bench_hook_overhead --model`). Not in the default runs.
- ``shared_prefix_128MiB``: ``scaled_128MiB`` with the first 8 floats of every
  weight zeroed. The prune report looks for duplicated constants by length and
  first 32 bytes, and hashes only the candidates that match: random weights
  never match, so this case is the one that makes it hash every kept byte (as
  zero-initialised or padded tensors of one shape would).

The ExecuTorch llama example is not here: it runs as a script (see `bench.llama`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from emitter_filter.demo import fold_multiply_by_parameter

__all__ = ["ModelCase", "ZOO", "SCALED_DEAD_SHARE", "cases", "case_named"]

logger = logging.getLogger(__name__)

MiB = 1 << 20
SEED = 0

#: Share of the scaled family's constant bytes that no instruction reads.
SCALED_DEAD_SHARE = 0.25
#: Width of every scaled linear: one fp32 weight is `_WIDTH**2 * 4` bytes = 1 MiB.
_WIDTH = 512
#: Per block: three live linears and one dead buffer of the same shape, so 25% is dead.
_LIVE_PER_BLOCK = 3


@dataclass(frozen=True)
class ModelCase:
    """One model of the zoo.

    Attributes:
        name: Benchmark id; also the key `--compare` matches on.
        description: One line for the dashboard.
        build: Returns a fresh `EdgeProgramManager` (seeded: same bytes every call).
        config: Extra `ExecutorchBackendConfig` fields for `to_executorch`.
        nominal_constant_bytes: Constant bytes the model is built to carry, for sorting
            and the size axis; the measured figures come from the run.
        quick: Part of `--quick`.
        rounds: Timed rounds of `to_executorch` per mode (fewer for big models).
        dedupe: Also measured pruned with `dedupe_constants=True`
            (`bench_models.test_dedupe`).
        quick_memory: Also measured in a fresh process (peak memory) by `--quick`, which
            starts those processes for these models only: each one imports torch and
            ExecuTorch and builds its model again, which was most of a quick run.
    """

    name: str
    description: str
    build: Callable[[], object]
    nominal_constant_bytes: int
    config: dict = field(default_factory=dict)
    quick: bool = True
    rounds: int = 5
    dedupe: bool = False
    quick_memory: bool = False


def _seed_exported():
    """The seed repro (`tests.seed_model`) up to `torch.export`, weights and inputs from `SEED`."""
    import torch

    from tests.seed_model import SeedModel, quantized_seed_program

    torch.manual_seed(SEED)
    model = SeedModel().eval()
    return quantized_seed_program(model, (torch.randn(1, 16),))


def _build_seed_lower():
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    return to_edge_transform_and_lower(_seed_exported(), partitioner=[XnnpackPartitioner()])


def _build_seed_to_backend():
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge

    return to_edge(_seed_exported()).to_backend(XnnpackPartitioner())


def _build_unused_buffer():
    import torch
    from executorch.exir import to_edge

    class WithUnusedBuffer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(64, 64)
            # 256 x 320 fp32 = 327,680 bytes that nothing reads.
            self.register_buffer("stale", torch.randn(256, 320))

        def forward(self, x):
            return self.linear(x).relu()

    torch.manual_seed(SEED)
    model = WithUnusedBuffer().eval()
    return to_edge(torch.export.export(model, (torch.randn(2, 64),), strict=False))


def _build_orphaned_parameter():
    import torch
    from executorch.exir import to_edge

    class WithScale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(256, 256)
            # 256 x 256 fp32 = 262,144 bytes, dead once the transform folds the multiply.
            self.scale = torch.nn.Parameter(torch.randn(256, 256))

        def forward(self, x):
            return self.linear(x) * self.scale

    torch.manual_seed(SEED)
    model = WithScale().eval()
    edge = to_edge(torch.export.export(model, (torch.randn(256, 256),), strict=False))
    return edge.transform([fold_multiply_by_parameter])


def _build_external_constants():
    return _build_unused_buffer()


_TIED_VOCAB, _TIED_DIM = 32000, 288


def _build_tied_embedding():
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    class TiedEmbedding(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = torch.nn.Embedding(_TIED_VOCAB, _TIED_DIM)
            self.head = torch.nn.Linear(_TIED_DIM, _TIED_VOCAB, bias=False)
            self.head.weight = self.embedding.weight

        def forward(self, tokens):
            return self.head(self.embedding(tokens))

    torch.manual_seed(SEED)
    with torch.no_grad():
        exported = torch.export.export(TiedEmbedding().eval(), (torch.tensor([[1, 2, 3]]),))
    return to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])


#: The constant methods `export_llama` adds to a stories15M export (values made up, as the weights).
_LLM_CONSTANT_METHODS = {
    "get_max_seq_len": 128,
    "get_max_context_len": 128,
    "get_vocab_size": _TIED_VOCAB,
    "get_n_layers": 6,
    "use_kv_cache": False,
    "use_sdpa_with_kv_cache": False,
    "enable_dynamic_shape": False,
    "get_bos_id": 1,
    "get_eos_ids": [2],
}


def _build_tied_llm():
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    class TiedLLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = torch.nn.Embedding(_TIED_VOCAB, _TIED_DIM)
            self.blocks = torch.nn.ModuleList(
                torch.nn.Sequential(
                    torch.nn.Linear(_TIED_DIM, 768),
                    torch.nn.ReLU(),
                    torch.nn.Linear(768, _TIED_DIM),
                )
                for _ in range(6)
            )
            self.head = torch.nn.Linear(_TIED_DIM, _TIED_VOCAB, bias=False)
            self.head.weight = self.embedding.weight

        def forward(self, tokens):
            x = self.embedding(tokens)
            for block in self.blocks:
                x = x + block(x)
            return self.head(x)

    torch.manual_seed(SEED)
    with torch.no_grad():
        exported = torch.export.export(TiedLLM().eval(), (torch.tensor([[1, 2, 3]]),))
    return to_edge_transform_and_lower(
        exported, partitioner=[XnnpackPartitioner()], constant_methods=_LLM_CONSTANT_METHODS
    )


def _scaled_module(blocks: int, *, zero_prefix: bool = False):
    import torch

    class ScaledStack(torch.nn.Module):
        """`blocks` x (3 live 512x512 linears + 1 dead 512x512 buffer): 4 MiB per block."""

        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(
                torch.nn.Linear(_WIDTH, _WIDTH, bias=False) for _ in range(blocks * _LIVE_PER_BLOCK)
            )
            for block in range(blocks):
                self.register_buffer(f"stale_{block}", torch.randn(_WIDTH, _WIDTH))

        def forward(self, x):
            for layer in self.layers:
                x = layer(x).relu()
            return x

    torch.manual_seed(SEED)
    with torch.no_grad():
        model = ScaledStack().eval()
        if zero_prefix:
            # 8 fp32 zeros = the 32-byte prefix the duplicate search groups by.
            for weight in [layer.weight for layer in model.layers] + list(model.buffers()):
                weight[0, :8] = 0.0
        return model


def _build_scaled(blocks: int, *, zero_prefix: bool = False) -> Callable[[], object]:
    def build():
        import torch
        from executorch.exir import to_edge

        model = _scaled_module(blocks, zero_prefix=zero_prefix)
        with torch.no_grad():
            exported = torch.export.export(model, (torch.randn(1, _WIDTH),), strict=False)
        return to_edge(exported)

    return build


def _scaled_case(mib: int, *, quick: bool, rounds: int, quick_memory: bool = False) -> ModelCase:
    block_bytes = (_LIVE_PER_BLOCK + 1) * _WIDTH * _WIDTH * 4
    blocks = mib * MiB // block_bytes
    label = f"{mib // 1024}GiB" if mib >= 1024 and mib % 1024 == 0 else f"{mib}MiB"
    return ModelCase(
        name=f"scaled_{label}",
        description=(
            f"{blocks * _LIVE_PER_BLOCK} portable fp32 {_WIDTH}x{_WIDTH} linears + "
            f"{blocks} dead buffers ({SCALED_DEAD_SHARE:.0%} dead)"
        ),
        build=_build_scaled(blocks),
        nominal_constant_bytes=blocks * block_bytes,
        quick=quick,
        rounds=rounds,
        quick_memory=quick_memory,
    )


ZOO: tuple[ModelCase, ...] = (
    ModelCase(
        "seed_lower",
        "ExecuTorch #9659: pt2e-quantized MLP, to_edge_transform_and_lower + XNNPACK",
        _build_seed_lower,
        nominal_constant_bytes=2 * 16 * 1024 * 4,
        rounds=3,  # quantizing takes seconds per build; to_executorch only tens of ms
    ),
    ModelCase(
        "seed_to_backend",
        "ExecuTorch #9659: pt2e-quantized MLP, to_edge(...).to_backend(XNNPACK)",
        _build_seed_to_backend,
        nominal_constant_bytes=2 * 16 * 1024 * 4,
        rounds=3,
    ),
    ModelCase(
        "unused_buffer",
        "Linear(64, 64) + an unused 256x320 fp32 buffer, portable",
        _build_unused_buffer,
        nominal_constant_bytes=256 * 320 * 4 + 64 * 65 * 4,
        quick_memory=True,  # the smallest program: what the hook costs in memory at all
    ),
    ModelCase(
        "orphaned_parameter",
        "256x256 parameter orphaned by an EdgeProgramManager.transform pass, portable",
        _build_orphaned_parameter,
        nominal_constant_bytes=2 * 256 * 256 * 4,
    ),
    ModelCase(
        "external_constants",
        "unused_buffer with external_constants=True: the dead buffer goes to the .ptd",
        _build_external_constants,
        nominal_constant_bytes=256 * 320 * 4 + 64 * 65 * 4,
        config={"external_constants": True},
    ),
    ModelCase(
        "tied_embedding_32000x288",
        "Embedding(32000, 288) tied to the output head, fp32, XNNPACK: the weight twice",
        _build_tied_embedding,
        nominal_constant_bytes=_TIED_VOCAB * _TIED_DIM * 4,
        rounds=3,
        dedupe=True,
    ),
    ModelCase(
        "tied_llm_6x288",
        "6-block MLP decoder, Embedding(32000, 288) tied to the head, XNNPACK, 10 methods",
        _build_tied_llm,
        nominal_constant_bytes=_TIED_VOCAB * _TIED_DIM * 4 + 6 * 2 * (_TIED_DIM * 768 * 4),
        quick=False,
        rounds=3,
    ),
    ModelCase(
        "shared_prefix_128MiB",
        "scaled_128MiB with every weight starting with 8 zero floats (duplicate search hashes all)",
        _build_scaled(32, zero_prefix=True),
        nominal_constant_bytes=128 * MiB,
        rounds=2,
    ),
    _scaled_case(12, quick=True, rounds=3),
    _scaled_case(128, quick=True, rounds=2, quick_memory=True),  # the largest of --quick
    _scaled_case(384, quick=False, rounds=1),
    _scaled_case(1024, quick=False, rounds=1),
)


def cases(*, quick: bool) -> tuple[ModelCase, ...]:
    """The zoo cases of a run, smallest first."""
    return tuple(case for case in ZOO if case.quick or not quick)


def case_named(name: str) -> ModelCase:
    """The zoo case called `name`; `KeyError` names the known ones."""
    for case in ZOO:
        if case.name == name:
            return case
    raise KeyError(f"no zoo model {name!r}; known: {', '.join(c.name for c in ZOO)}")
