"""Named data no emitted delegate can reach, and bytes written twice."""

from __future__ import annotations

import copy
import dataclasses
import logging
from types import SimpleNamespace
from typing import final

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import EdgeProgramManager, ExecutorchBackendConfig as UpstreamConfig, to_edge
from executorch.exir._serialize._named_data_store import NamedDataStore, NamedDataStoreOutput
from executorch.exir._serialize._program import deserialize_pte_binary
from executorch.exir._serialize.data_serializer import DataEntry
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.lowered_backend_module import executorch_call_delegate
from executorch.exir.pass_base import PassBase, PassResult
from executorch.exir.passes.external_constants_pass import (
    delegate_external_constants_pass_unlifted,
)
from executorch.exir.schema import (
    BackendDelegate,
    BackendDelegateDataReference,
    BackendDelegateInlineData,
    Buffer,
    DataLocation,
)
from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer

import emitter_filter
from emitter_filter import delegates
from emitter_filter.delegates import XNNPACK_BACKEND_ID, xnnpack_named_keys
from emitter_filter.errors import InvariantError, ProgramFormatError
from emitter_filter.inprocess import named_data
from emitter_filter.inprocess.named_data import (
    DelegateRef,
    drop_dead_named_data,
    find_named_data_use,
    prune_named_data,
)
from emitter_filter.ondisk.audit import audit_file
from emitter_filter.program import duplicates, named_keys

PRUNE = dict(prune_constants=True)
INPUTS = (torch.randn(2, 32, generator=torch.Generator().manual_seed(7)),)


def _report(manager) -> named_data.NamedDataReport:
    return emitter_filter.report(manager).named_data


# --- builders -------------------------------------------------------------------------


class TwoLinears(torch.nn.Module):
    """`b(cumsum(a(x)))`: XNNPACK takes `a` and `b` as two delegates; cumsum stays portable.

    With `sin=True`, `sin` sits between them, for the opaque demo backend to take.
    """

    def __init__(self, keep_b: bool = True, sin: bool = False) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.a = torch.nn.Linear(32, 32)
        self.b = torch.nn.Linear(32, 32)
        with torch.no_grad():
            for parameter in (*self.a.parameters(), *self.b.parameters()):
                parameter.copy_(torch.randn(parameter.shape, generator=generator))
        self.keep_b = keep_b
        self.sin = sin

    def forward(self, x):
        y = torch.cumsum(self.a(x), dim=1)
        if self.sin:
            y = torch.sin(y)
        return self.b(y) if self.keep_b else y


def _lowered_module(graph_module, call):
    return getattr(graph_module, call.args[0].target)


def _xnnpack_calls(graph_module):
    return [
        node
        for node in graph_module.graph.nodes
        if node.target is executorch_call_delegate
        and _lowered_module(graph_module, node).backend_id == XNNPACK_BACKEND_ID
    ]


class RemoveLastXnnpackCall(PassBase):
    """Replaces the last XNNPACK delegate call with its first input (shapes agree here)."""

    def call(self, graph_module):
        call = _xnnpack_calls(graph_module)[-1]
        for getitem in list(call.users):
            getitem.replace_all_uses_with(call.args[1])
            graph_module.graph.erase_node(getitem)
        graph_module.graph.erase_node(call)
        graph_module.graph.eliminate_dead_code()
        graph_module.recompile()
        return PassResult(graph_module, True)


def _removed_call_keys(edge: EdgeProgramManager) -> set[str]:
    """The named-data keys of the delegate `RemoveLastXnnpackCall` will remove."""
    graph_module = edge.exported_program().graph_module
    store = _lowered_module(graph_module, _xnnpack_calls(graph_module)[-1]).named_data_store_output
    return set(store.pte_data).union(*store.external_data.values())


def _two_delegates(model: TwoLinears, external_tag: str | None = None) -> EdgeProgramManager:
    program = torch.export.export(model, INPUTS)
    if external_tag is not None:
        # How XNNPACK is told to write its weights to `<tag>.ptd` (as export_llama does).
        module = program.module()
        delegate_external_constants_pass_unlifted(module, lambda node: external_tag)
        program = torch.export.export(module, INPUTS)
    return to_edge(program).to_backend(XnnpackPartitioner())


@final
class OpaqueDemoBackend(BackendDetails):
    """Keeps a table in named data under a key only its runtime would know."""

    KEY = "opaque-demo/table"
    TABLE = bytes(range(256)) * 4

    @staticmethod
    def preprocess(edge_program, compile_specs) -> PreprocessResult:
        store = NamedDataStore()
        store.add_named_data(OpaqueDemoBackend.KEY, OpaqueDemoBackend.TABLE)
        return PreprocessResult(
            processed_bytes=b"opaque demo program",
            data_store_output=store.get_named_data_store_output(),
        )


class OpaqueDemoPartitioner(Partitioner):
    """Gives every `sin` to `OpaqueDemoBackend`."""

    def partition(self, exported_program) -> PartitionResult:
        for node in exported_program.graph_module.graph.nodes:
            if node.target == exir_ops.edge.aten.sin.default:
                node.meta["delegation_tag"] = "opaque_demo"
        return PartitionResult(
            tagged_exported_program=exported_program,
            partition_tags={"opaque_demo": DelegationSpec(OpaqueDemoBackend.__name__, [])},
        )


def _with_opaque_delegate() -> EdgeProgramManager:
    edge = to_edge(torch.export.export(TwoLinears(sin=True), INPUTS))
    return edge.to_backend(OpaqueDemoPartitioner()).to_backend(XnnpackPartitioner())


class TiedEmbedding(torch.nn.Module):
    """Input embedding and output projection share one weight, as in small LLMs."""

    VOCAB, DIM = 512, 64

    def __init__(self) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(self.VOCAB, self.DIM)
        self.head = torch.nn.Linear(self.DIM, self.VOCAB, bias=False)
        self.head.weight = self.embedding.weight

    def forward(self, tokens):
        return self.head(self.embedding(tokens))


def _run(manager, inputs) -> list[torch.Tensor]:
    pte = manager.buffer
    # The runtime does not own the .ptd buffer: keep it referenced while it runs.
    (ptd,) = [bytes(data) for data in manager._tensor_data.values()] or [None]
    module = _load_for_executorch_from_buffer(pte, ptd)
    return list(module.run_method("forward", inputs))


# --- fixtures -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def removed_delegate():
    """One model, built three ways: the removed call's data written, pruned, never there."""
    torch.manual_seed(0)
    edge = _two_delegates(TwoLinears())
    removed_keys = _removed_call_keys(edge)
    plain = edge.to_executorch(UpstreamConfig(passes=[RemoveLastXnnpackCall()]))
    pruned = _two_delegates(TwoLinears()).to_executorch(
        emitter_filter.ExecutorchBackendConfig(**PRUNE, passes=[RemoveLastXnnpackCall()])
    )
    clean = _two_delegates(TwoLinears(keep_b=False)).to_executorch(UpstreamConfig())
    return dict(removed_keys=removed_keys, plain=plain, pruned=pruned, clean=clean)


@pytest.fixture(scope="module")
def external():
    """The removed call's weights in `weights.ptd` instead of the .pte."""
    edge = _two_delegates(TwoLinears(), external_tag="weights")
    removed_keys = _removed_call_keys(edge)
    plain = edge.to_executorch(UpstreamConfig(passes=[RemoveLastXnnpackCall()]))
    pruned = _two_delegates(TwoLinears(), external_tag="weights").to_executorch(
        emitter_filter.ExecutorchBackendConfig(**PRUNE, passes=[RemoveLastXnnpackCall()])
    )
    return dict(removed_keys=removed_keys, plain=plain, pruned=pruned)


@pytest.fixture(scope="module")
def opaque():
    edge = _with_opaque_delegate()
    removed_keys = _removed_call_keys(edge)
    plain = edge.to_executorch(UpstreamConfig(passes=[RemoveLastXnnpackCall()]))
    pruned = _with_opaque_delegate().to_executorch(
        emitter_filter.ExecutorchBackendConfig(**PRUNE, passes=[RemoveLastXnnpackCall()])
    )
    return dict(removed_keys=removed_keys, plain=plain, pruned=pruned)


@pytest.fixture(scope="module")
def tied():
    torch.manual_seed(0)
    model = TiedEmbedding()
    tokens = (torch.arange(8).reshape(1, 8),)
    edge = to_edge(torch.export.export(model, tokens)).to_backend(XnnpackPartitioner())
    manager = edge.to_executorch(emitter_filter.ExecutorchBackendConfig(**PRUNE))
    return dict(model=model, manager=manager)


def _pte_named_keys(pte: bytes) -> set[str]:
    return set(deserialize_pte_binary(pte).named_data.pte_data)


# --- (a) a delegate call removed by a to_executorch pass -------------------------------


def test_removed_call_really_leaves_its_named_data_in_the_file(removed_delegate):
    plain = removed_delegate["plain"]
    assert len(plain.executorch_program.execution_plan[0].delegates) == 1
    assert removed_delegate["removed_keys"] <= _pte_named_keys(plain.buffer)


def test_emitter_writes_no_delegate_entry_for_a_removed_call(removed_delegate):
    program = removed_delegate["plain"].executorch_program
    (plan,) = program.execution_plan
    assert [d.id for d in plan.delegates] == [XNNPACK_BACKEND_ID]
    assert len(program.backend_delegate_data) == 1


def test_pruning_drops_exactly_the_removed_delegates_named_data(removed_delegate):
    report = _report(removed_delegate["pruned"])
    assert {entry.key for entry in report.dropped} == removed_delegate["removed_keys"]
    assert all(entry.tag is None for entry in report.dropped)
    assert not report.kept_unprovable and not report.opaque_delegates and not report.missing
    before = _pte_named_keys(removed_delegate["plain"].buffer)
    after = _pte_named_keys(removed_delegate["pruned"].buffer)
    assert after == before - removed_delegate["removed_keys"]


def test_pruned_file_shrinks_by_the_dropped_bytes(removed_delegate):
    report = _report(removed_delegate["pruned"])
    assert report.dropped_bytes == sum(entry.nbytes for entry in report.dropped) > 0
    saved = len(removed_delegate["plain"].buffer) - len(removed_delegate["pruned"].buffer)
    # The dropped entries are 128-byte multiples: no segment padding changes, and
    # the rest is their NamedData and DataSegment tables.
    assert report.dropped_bytes <= saved <= report.dropped_bytes + 256 * len(report.dropped)


def test_pruned_file_is_byte_identical_to_the_model_without_the_delegate(removed_delegate):
    assert removed_delegate["pruned"].buffer == removed_delegate["clean"].buffer


def test_pruned_program_computes_bit_identical_outputs_with_xnnpack(removed_delegate):
    for inputs in (INPUTS, (torch.randn(2, 32, generator=torch.Generator().manual_seed(8)),)):
        (want,) = _run(removed_delegate["plain"], inputs)
        (got,) = _run(removed_delegate["pruned"], inputs)
        assert want.dtype == got.dtype and torch.equal(want, got)


def test_pruning_twice_drops_nothing_more(removed_delegate):
    manager = removed_delegate["pruned"]
    pruned_store = deserialize_pte_binary(manager.buffer).named_data
    again, report = prune_named_data(manager._emitter_output, pruned_store)
    assert again is pruned_store and report.dropped == ()


def test_a_delegate_entry_nobody_calls_keeps_its_named_data(removed_delegate):
    """The runtime initialises every `plan.delegates` entry, called or not."""
    manager = removed_delegate["plain"]
    program = copy.deepcopy(manager.executorch_program)
    plan = program.execution_plan[0]
    edge = _two_delegates(TwoLinears())
    graph_module = edge.exported_program().graph_module
    lowered = _lowered_module(graph_module, _xnnpack_calls(graph_module)[-1])
    program.backend_delegate_data.append(BackendDelegateInlineData(lowered.processed_bytes))
    plan.delegates.append(
        BackendDelegate(
            id=XNNPACK_BACKEND_ID,
            processed=BackendDelegateDataReference(
                DataLocation.INLINE, len(program.backend_delegate_data) - 1
            ),
            compile_specs=[],
        )
    )
    use = find_named_data_use(program, manager._named_data)
    assert use.dead == ()
    assert removed_delegate["removed_keys"] <= set(use.live)


def test_removed_delegates_ptd_entries_are_dropped_and_the_rest_still_runs(external):
    report = _report(external["pruned"])
    assert {entry.key for entry in report.dropped} == external["removed_keys"]
    assert {entry.tag for entry in report.dropped} == {"weights"}
    assert report.bytes_before[None] == report.bytes_after[None] == 0
    plain_ptd = bytes(external["plain"]._tensor_data["weights"])
    pruned_ptd = bytes(external["pruned"]._tensor_data["weights"])
    saved = len(plain_ptd) - len(pruned_ptd)
    assert report.dropped_bytes <= saved <= report.dropped_bytes + 256 * len(report.dropped)
    assert external["pruned"].buffer == external["plain"].buffer
    (want,) = _run(external["plain"], INPUTS)
    (got,) = _run(external["pruned"], INPUTS)
    assert torch.equal(want, got)


# --- (b) a backend whose keys cannot be enumerated -------------------------------------


def test_opaque_backend_keeps_and_reports_every_unnamed_entry(opaque):
    report = _report(opaque["pruned"])
    assert report.dropped == ()
    assert {entry.key for entry in report.kept_unprovable} == (
        opaque["removed_keys"] | {OpaqueDemoBackend.KEY}
    )
    # Delegates in call order: XNNPACK `a`, then the demo `sin`.
    assert report.opaque_delegates == (DelegateRef("forward", 1, OpaqueDemoBackend.__name__),)
    assert "kept 3 unprovable (opaque delegates: OpaqueDemoBackend)" in report.summary()


def test_opaque_backend_leaves_the_file_byte_identical(opaque):
    assert opaque["pruned"].buffer == opaque["plain"].buffer
    assert OpaqueDemoBackend.KEY in _pte_named_keys(opaque["pruned"].buffer)


def test_opaque_backend_still_counts_xnnpack_keys_as_live(opaque):
    manager = opaque["plain"]
    use = find_named_data_use(manager.executorch_program, manager._named_data)
    assert len(use.live) == 2 and not set(use.live) & opaque["removed_keys"]
    assert use.dead == ()


# --- (c) a tied embedding written twice ------------------------------------------------


def test_tied_embedding_weight_is_reported_as_duplicated(tied):
    report = _report(tied["manager"])
    weight = tied["model"].embedding.weight.detach().numpy().tobytes()
    (group,) = report.duplicates
    assert group.nbytes == len(weight) == TiedEmbedding.VOCAB * TiedEmbedding.DIM * 4
    assert [c.space for c in group.copies] == ["constant", "named_data"]
    assert report.duplicated_bytes == len(weight)
    # The bytes really are in the file twice.
    assert tied["manager"].buffer.count(weight) == 2
    assert report.dropped == ()


def test_duplicates_are_looked_for_only_when_the_report_is_read(monkeypatch):
    calls = []

    def counting(*args):
        calls.append(args)
        return ()

    monkeypatch.setattr(named_data, "find_duplicate_data", counting)
    torch.manual_seed(0)
    tokens = (torch.arange(8).reshape(1, 8),)
    edge = to_edge(torch.export.export(TiedEmbedding(), tokens)).to_backend(XnnpackPartitioner())
    manager = edge.to_executorch(emitter_filter.ExecutorchBackendConfig(**PRUNE))
    assert calls == [], "hashing every look-alike weight must not slow the prune"
    assert _report(manager).duplicates == ()
    assert len(calls) == 1


def test_the_info_line_runs_no_duplicate_search(monkeypatch, caplog):
    """The INFO line names what was dropped; duplicates are for DEBUG, the report and audit."""
    calls = []

    def counting(*args):
        calls.append(args)
        return ()

    monkeypatch.setattr(named_data, "find_duplicate_data", counting)
    torch.manual_seed(0)
    tokens = (torch.arange(8).reshape(1, 8),)
    edge = to_edge(torch.export.export(TiedEmbedding(), tokens)).to_backend(XnnpackPartitioner())
    with caplog.at_level(logging.INFO, logger="emitter_filter"):
        edge.to_executorch(emitter_filter.ExecutorchBackendConfig(**PRUNE))
    assert any("dropped" in r.getMessage() for r in caplog.records)
    assert calls == [], "the INFO line must not hash the duplicated weights"


def test_audit_shows_the_tied_embeddings_duplicated_bytes_as_the_report_does(tied, tmp_path):
    path = tmp_path / "tied.pte"
    path.write_bytes(tied["manager"].buffer)
    audit = audit_file(path)
    report = _report(tied["manager"])
    assert audit.duplicated_bytes == report.duplicated_bytes > 0
    assert [(g.nbytes, g.sha256) for g in audit.duplicates] == [
        (g.nbytes, g.sha256) for g in report.duplicates
    ]
    # In a file, named data is located by segment, not by buffer index.
    assert [[(c.space, c.names) for c in g.copies] for g in audit.duplicates] == [
        [(c.space, c.names) for c in g.copies] for g in report.duplicates
    ]
    form = audit.to_json()
    assert form["duplicated_bytes"] == report.duplicated_bytes
    assert [c["space"] for c in form["duplicates"][0]["copies"]] == ["constant", "named_data"]


# --- the named data alone, on stores built in code --------------------------------------


def _store_with_junk(live_store: NamedDataStoreOutput) -> NamedDataStoreOutput:
    """`live_store` plus a dead key in the .pte and a whole dead external tag."""
    buffers = [*live_store.buffers, b"junk" * 64]
    junk = DataEntry(len(buffers) - 1, 16, None)
    pte_data = {**live_store.pte_data, "junk": junk}
    external_data = {"weights": {"junk-external": junk}}
    return NamedDataStoreOutput(buffers, pte_data, external_data)


def test_dead_entries_go_from_pte_data_and_every_external_tag(removed_delegate):
    manager = removed_delegate["pruned"]
    store = _store_with_junk(deserialize_pte_binary(manager.buffer).named_data)
    snapshot = copy.copy(store.pte_data), copy.deepcopy(store.external_data)
    use = find_named_data_use(manager.executorch_program, store)
    assert use.dead == ("junk", "junk-external")
    pruned = drop_dead_named_data(store, use)
    assert pruned.buffers is store.buffers
    assert "junk" not in pruned.pte_data and pruned.external_data == {}
    assert (store.pte_data, store.external_data) == snapshot


def test_report_counts_a_shared_buffer_once_per_file(removed_delegate):
    manager = removed_delegate["pruned"]
    store = _store_with_junk(deserialize_pte_binary(manager.buffer).named_data)
    store.pte_data["junk-alias"] = store.pte_data["junk"]
    _, report = prune_named_data(manager._emitter_output, store)
    assert report.dropped_bytes == 256 + 256  # once in the .pte, once in weights.ptd
    assert report.bytes_after["weights"] == 0


def test_a_dead_key_the_store_lacks_is_an_invariant_error(removed_delegate):
    manager = removed_delegate["pruned"]
    store = deserialize_pte_binary(manager.buffer).named_data
    use = find_named_data_use(manager.executorch_program, store)
    with pytest.raises(InvariantError, match="not-there"):
        drop_dead_named_data(store, dataclasses.replace(use, dead=("not-there",)))


def test_a_program_without_delegates_has_only_dead_named_data(removed_delegate):
    manager = removed_delegate["pruned"]
    program = copy.deepcopy(manager.executorch_program)
    program.execution_plan[0].delegates = []
    store = deserialize_pte_binary(manager.buffer).named_data
    use = find_named_data_use(program, store)
    assert set(use.dead) == set(store.pte_data) and use.live == ()


def _emitted(constants: list[bytes], external: dict[str, dict[str, bytes]]):
    """Just the fields `find_duplicate_data` reads from an `EmitterOutput`."""
    external_constant_buffer = [data for fqns in external.values() for data in fqns.values()]
    indices = iter(range(len(external_constant_buffer)))
    return SimpleNamespace(
        program=SimpleNamespace(constant_buffer=[Buffer(b"")] + [Buffer(c) for c in constants]),
        mutable_data=None,
        external_constant_buffer=external_constant_buffer,
        external_constant_map={
            tag: {fqn: next(indices) for fqn in fqns} for tag, fqns in external.items()
        },
    )


def test_same_length_and_prefix_but_other_bytes_are_not_duplicates():
    a, b = bytes(64) + b"a", bytes(64) + b"b"
    assert duplicates.find_duplicate_data(_emitted([a, b], {}), None) == ()


def test_identical_bytes_count_once_per_ptd_and_once_more_per_other_file():
    data = bytes(range(100))
    store = NamedDataStoreOutput(
        [data], {"k": DataEntry(0, 1, None)}, {"w": {"k2": DataEntry(0, 1, None)}}
    )
    emitted = _emitted([data], {"w": {"fqn": data}, "v": {"fqn2": data}})
    (group,) = duplicates.find_duplicate_data(emitted, store)
    assert [(c.space, c.tag, c.names) for c in group.copies] == [
        ("constant", None, ()),
        ("named_data", None, ("k",)),
        ("external", "w", ("fqn", "k2")),
        ("external", "v", ("fqn2",)),
    ]
    assert group.duplicated_bytes == 300


# --- XNNPACK blobs ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def xnnpack_blob(removed_delegate) -> bytes:
    return removed_delegate["plain"].executorch_program.backend_delegate_data[0].data


def test_xnnpack_keys_are_exactly_what_the_store_holds_for_that_delegate(
    removed_delegate, xnnpack_blob
):
    keys = set(xnnpack_named_keys(xnnpack_blob))
    assert len(keys) == 2
    assert keys == _pte_named_keys(removed_delegate["clean"].buffer)


def test_xnnpack_blob_without_header_is_read_as_a_bare_flatbuffer(xnnpack_blob):
    offset, size = (
        int.from_bytes(xnnpack_blob[10:14], "little"),
        int.from_bytes(xnnpack_blob[14:18], "little"),
    )
    assert xnnpack_named_keys(xnnpack_blob[offset : offset + size]) == xnnpack_named_keys(
        xnnpack_blob
    )


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda blob: blob[:40],
        lambda blob: blob[:10] + (2**31).to_bytes(4, "little") + blob[14:],
        lambda blob: b"\0\0\0\0XX99" + blob[8:],
    ],
    ids=["truncated", "flatbuffer_past_the_end", "unknown_identifier"],
)
def test_malformed_xnnpack_blob_is_a_program_format_error(xnnpack_blob, corrupt):
    with pytest.raises(ProgramFormatError):
        xnnpack_named_keys(corrupt(xnnpack_blob))


def test_other_backends_are_opaque():
    assert delegates.delegate_named_keys("SomeBackend", b"XH00 anything") is None


def test_public_api_is_what_we_meant():
    assert set(delegates.__all__) == {
        "BlobConstant",
        "BlobFormat",
        "ConstantTypes",
        "COREML_BACKEND_ID",
        "METAL_BACKEND_ID",
        "VULKAN_BACKEND_ID",
        "XNNPACK_BACKEND_ID",
        "XNN_HEADER_SIZE",
        "blob_format",
        "delegate_named_keys",
        "xnnpack_named_keys",
        "xnnpack_flatbuffer_span",
        "xnnpack_constant_types",
        "xnnpack_node_keys",
    }
    assert set(named_keys.__all__) == {"DelegateRef", "NamedDataUse", "classify_named_keys"}
    assert set(named_data.__all__) == {
        "BlobKeys",
        "blob_named_keys",
        "NamedDataEntry",
        "NamedDataReport",
        "find_named_data_use",
        "drop_dead_named_data",
        "prune_named_data",
    }
    assert set(duplicates.__all__) == {
        "StoredCopy",
        "DuplicateGroup",
        "find_duplicate_data",
        "group_duplicates",
    }
