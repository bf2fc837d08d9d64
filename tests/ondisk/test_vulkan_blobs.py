"""Vulkan programs are read, not kept as opaque: their keys, dtypes and shapes, their dead keys.

The default run reads the golden programs (`tests/golden/vulkan/`, written by
`python -m tests.vulkan_programs`); the slow run exports them again. No Vulkan
runtime here: a pruned Vulkan program is checked against the one the hook writes,
byte for byte, never run.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from emitter_filter.delegates import VULKAN_BACKEND_ID, blob_format, delegate_named_keys
from emitter_filter.delegates.vulkan import vulkan_constants
from emitter_filter.errors import ProgramFormatError
from emitter_filter.ondisk.audit import audit_file
from emitter_filter.ondisk.explain import explain_file
from emitter_filter.ondisk.prune import prune_file
from emitter_filter.ondisk.read.byte_source import ByteSource
from emitter_filter.ondisk.read.read_pte import read_pte, read_pte_program
from emitter_filter.ondisk.read.readers import delegate_graphs
from tests.files import (
    GOLDEN_FLATBUFFERS,
    HAVE_EXECUTORCH,
    VULKAN_CASES,
    flatbuffers_version,
    read_vulkan_golden,
)

pytestmark = pytest.mark.filetools

#: Named-data entries of each case's program as upstream writes it, and how many no
#: graph reads (the second Linear's weight and bias, whose call a pass removed).
NAMED = {"plain": (2, 0), "tied_dead": (1, 0), "orphaned": (4, 2)}


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    return read_vulkan_golden(tmp_path_factory.mktemp("vulkan"))


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    if not HAVE_EXECUTORCH:
        pytest.skip("exports need torch and executorch")
    from tests.vulkan_programs import build

    root = tmp_path_factory.mktemp("vulkan_fresh")
    return {case: build(case, root) for case in VULKAN_CASES}


def _graphs(pte: Path) -> list[bytes]:
    read = read_pte_program(pte)
    with ByteSource(pte) as source:
        return [g for _, _, g in delegate_graphs(read.pte, read.program, read.program_data, source)]


def _check_read(built, case: str) -> None:
    report = audit_file(built.pte)
    assert report.kept_unprovable_named_data == ()
    total, dead = NAMED[case]
    dead_keys = [e.name for e in report.dead if e.space == "named_data"]
    assert len(dead_keys) == dead
    explanation = explain_file(built.pte).to_json()
    named = [p for p in explanation["parts"] if p["storage"] == "named_data"]
    assert len(named) == total
    for part in named:
        if part["names"][0] in dead_keys:
            assert part["status"] == "dead"
            continue
        assert part["dtype"] == "FLOAT" and part["shape"], part
        assert part["readers"] and all("opaque" not in r for r in part["readers"]), part
        assert all(r.startswith(f"{VULKAN_BACKEND_ID} delegate") for r in part["readers"])


def _check_prune(built, tmp_path: Path) -> None:
    out = tmp_path / f"{built.name}.pte"
    result = prune_file(built.pte, out)
    if flatbuffers_version() == GOLDEN_FLATBUFFERS:
        assert out.read_bytes() == built.pruned_pte.read_bytes()
    else:
        # Another flatbuffers Builder packs the same program in other bytes (tests/files.py):
        # the same keys, and pruning it again changes nothing.
        keys = [e.key for e in read_pte(out).named_data]
        assert keys == [e.key for e in read_pte(built.pruned_pte).named_data]
        again = tmp_path / f"{built.name}.again.pte"
        prune_file(out, again)
        assert again.read_bytes() == out.read_bytes()
    assert len(result.dropped_named_data) == NAMED[built.name][1]
    assert audit_file(out).dead == ()


@pytest.mark.parametrize("case", VULKAN_CASES)
def test_a_vulkan_programs_weights_are_read_with_their_dtype_shape_and_reader(golden, case):
    _check_read(golden[case], case)


@pytest.mark.parametrize("case", VULKAN_CASES)
def test_pruning_a_vulkan_program_writes_what_the_hook_writes(golden, case, tmp_path):
    _check_prune(golden[case], tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("case", VULKAN_CASES)
def test_a_fresh_export_is_read_and_pruned_as_the_golden_one(fresh, case, tmp_path):
    _check_read(fresh[case], case)
    _check_prune(fresh[case], tmp_path)
    # The hook now reads Vulkan's keys too: it drops the orphaned ones itself.
    assert len(fresh[case].report.named_data.dropped) == NAMED[case][1]


def test_the_reader_agrees_with_executorchs_own_decoding(golden):
    if not HAVE_EXECUTORCH:
        pytest.skip("ExecuTorch's flatc decodes the reference")
    from executorch.backends.vulkan.serialization.vulkan_graph_serialize import (
        extract_vk_flatbuffer,
        flatbuffer_to_vk_graph,
    )

    checked = 0
    for case in VULKAN_CASES:
        for graph in _graphs(golden[case].pte):
            reference = flatbuffer_to_vk_graph(extract_vk_flatbuffer(graph))
            expected = []
            for value_id, value in enumerate(reference.values):
                tensor = value.value
                if getattr(tensor, "constant_id", -1) is None or not hasattr(tensor, "dims"):
                    continue
                if tensor.constant_id < 0:
                    continue
                entry = reference.constants[tensor.constant_id]
                expected.append(
                    (value_id, tuple(tensor.dims), entry.named_key or None, entry.length)
                )
            found = [(c.tensor_id, c.dims, c.key, c.nbytes) for c in vulkan_constants(graph)]
            assert found == expected
            checked += len(found)
    assert checked >= 5


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda blob: blob[:20],
        lambda blob: blob[:4] + b"XH00" + blob[8:],
        lambda blob: blob[:10] + struct.pack("<I", 1 << 20) + blob[14:],
        lambda blob: blob[:36] + b"XX99" + blob[40:],
    ],
    ids=["truncated_header", "wrong_magic", "flatbuffer_past_the_end", "wrong_identifier"],
)
def test_a_malformed_vulkan_blob_is_a_program_format_error(golden, corrupt):
    (graph,) = _graphs(golden["plain"].pte)
    assert graph[36:40] == b"VK00"
    with pytest.raises(ProgramFormatError):
        delegate_named_keys(VULKAN_BACKEND_ID, corrupt(graph))


def test_metals_blob_names_its_two_keys():
    keys = (f"{'a' * 64}_so_blob", f"{'b' * 64}_weights_blob")
    assert delegate_named_keys("MetalBackend", "\n".join(keys).encode()) == keys
    for bad in (b"one line", b"a\nb\nc", b"\xff\xfe\nb", b"a\n"):
        with pytest.raises(ProgramFormatError):
            delegate_named_keys("MetalBackend", bad)


def test_every_backend_answers_the_same_questions():
    for backend in ("XnnpackBackend", VULKAN_BACKEND_ID, "CoreMLBackend", "MetalBackend"):
        found = blob_format(backend)
        assert found is not None and found.backend_id == backend
    assert blob_format("QnnBackend") is None and blob_format("CudaBackend") is None
    assert delegate_named_keys("QnnBackend", b"anything") is None


def test_names_name_vulkan_named_data_by_its_bytes(golden, tmp_path):
    if not HAVE_EXECUTORCH:
        pytest.skip("a .pt2 is read with torch")
    import torch

    from tests.vulkan_programs import _MODELS

    model, inputs = _MODELS["tied_dead"]
    pt2 = tmp_path / "model.pt2"
    torch.export.save(torch.export.export(model(), inputs()), pt2)
    parts = explain_file(golden["tied_dead"].pte, names=pt2).to_json()["parts"]
    (named,) = [p for p in parts if p["storage"] == "named_data"]
    assert set(named["names"][1:]) == {"embedding.weight", "head.weight"}


def test_a_constant_stored_inside_the_blob_is_located_by_its_offset():
    if not HAVE_EXECUTORCH:
        pytest.skip("ExecuTorch's Vulkan serializer builds the blob")
    import torch
    from executorch.backends.vulkan.serialization import vulkan_graph_schema as vk
    from executorch.backends.vulkan.serialization.vulkan_graph_serialize import (
        serialize_vulkan_graph,
    )

    def tensor(dims, constant_id, datatype=vk.VkDataType.FLOAT32):
        return vk.VkValue(vk.VkTensor(datatype, dims, constant_id, -1))

    inline, named = torch.arange(6, dtype=torch.float16), ("weights_key", 48)
    graph = vk.VkGraph("0", [], [tensor([2, 3], 0, vk.VkDataType.FLOAT16)], [], [], [], [])
    graph.values += [tensor([4, 3], 1), tensor([5], -1)]
    blob = serialize_vulkan_graph(graph, [inline, named], [])
    found = blob_format(VULKAN_BACKEND_ID)
    assert found is not None
    (inside,) = found.inline_constants(blob)
    assert (inside.tensor_id, inside.dtype, inside.dims, inside.key) == (0, "HALF", (2, 3), None)
    assert inside.offset is not None
    assert blob[inside.offset : inside.offset + inside.nbytes] == inline.numpy().tobytes()
    assert found.named_keys(blob) == ("weights_key",)
    assert found.constant_types(blob) == {"weights_key": ("FLOAT", (4, 3))}


def test_the_pruned_vulkan_program_is_said_not_run_verified(golden, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "pruned.pte"
    run = subprocess.run(
        [sys.executable, "-m", "emitter_filter", "prune", str(golden["orphaned"].pte)]
        + ["-o", str(out)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert f"{out}: not run-verified here: no runtime for VulkanBackend" in run.stderr
