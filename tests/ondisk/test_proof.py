"""The structural proof (`ondisk/analyse/proof.py`): no rewrite writes a file whose methods
read other bytes than its input's, found without a runtime.

Two named-data keys of an XNNPACK program on one segment (the runtime reads a key's
bytes from its segment's start, for the graph's tensor's size): the sharing is kept, or
the rewrite is refused. A remap broken on purpose is refused, nothing written.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from emitter_filter.cli import main
from emitter_filter.errors import InvalidOutputError
from emitter_filter.ondisk import prune as prune_module
from emitter_filter.ondisk.analyse.proof import Side, prove_rewrite
from emitter_filter.ondisk.prune import prune_file
from emitter_filter.ondisk.read.read_pte import read_pte
from emitter_filter.ondisk.write import prune_rewrite
from tests.files import HAVE_EXECUTORCH
from tests.layouts import with_program_changed

pytestmark = pytest.mark.filetools

GOLDEN = Path(__file__).parent.parent / "golden"
XNNPACK = GOLDEN / "xnnpack" / "dirty" / "model.pte"


def _key_on_a_short_segment(tmp_path: Path) -> Path:
    """Issue 49's file: the weight's key (48 B) moved to the bias's 12-B segment, which more
    bytes follow, so that XNNPACK reads 36 B past the segment; the weight's own segment is
    named by no key any more."""
    path = tmp_path / "shared.pte"
    moved = with_program_changed(XNNPACK.read_bytes(), _move_key(0, 1))
    path.write_bytes(moved + bytes(range(64)))
    return path


def _move_key(reader: int, owner: int):
    def move(program) -> None:
        program.namedData[reader].segmentIndex = program.namedData[owner].segmentIndex

    return move


def _keys_on_one_segment(tmp_path: Path, reader: int, owner: int) -> Path:
    """The golden XNNPACK program with named data `reader`'s key moved to `owner`'s segment
    (the weight is 48 B, the bias 12 B): `reader`'s own segment is then named by no key."""

    path = tmp_path / "shared.pte"
    path.write_bytes(with_program_changed(XNNPACK.read_bytes(), _move_key(reader, owner)))
    return path


def _unchecked(monkeypatch) -> None:
    """Prune as if neither the input check nor the output validator saw the file: what the
    proof alone must catch."""
    monkeypatch.setattr(prune_module, "check_inputs", lambda inputs: None)
    monkeypatch.setattr(prune_module, "validate_outputs", lambda written: None)


def _runtime_outputs(path: Path) -> list:
    import torch
    from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer

    data = path.read_bytes()  # Kept alive while the program runs.
    program = _load_for_executorch_from_buffer(data)
    return list(program.forward((torch.arange(8, dtype=torch.float32).reshape(2, 4),)))


def test_a_key_on_another_keys_larger_segment_is_pruned_keeping_the_sharing(tmp_path):
    shared = _keys_on_one_segment(tmp_path, reader=1, owner=0)  # the bias reads the weight's
    out = tmp_path / "out.pte"
    assert main(["prune", str(shared), "-o", str(out)]) == 0
    keys = {entry.key: entry.segment_index for entry in read_pte(out).named_data}
    assert len(set(keys.values())) == 1, keys  # both keys still on one segment
    prove_rewrite([Side(str(shared))], Side(str(out)))
    if HAVE_EXECUTORCH:  # the runtime agrees, where there is one
        before, after = _runtime_outputs(shared), _runtime_outputs(out)
        assert all(a.equal(b) for a, b in zip(before, after, strict=True))


def test_a_key_reading_past_its_segment_is_refused_by_the_proof_alone(
    tmp_path, monkeypatch, capsys
):
    """Issue 49's first case: the weight's key moved to the bias's 12-B segment reads 48 B
    from its start, past its end into what follows; prune moved what follows (exit 0, a
    `forward` that computed other values). The validator refuses such an input now (issue
    55); the proof refuses the output whatever the validator says."""
    shared = _key_on_a_short_segment(tmp_path)
    _unchecked(monkeypatch)
    out = tmp_path / "out.pte"
    assert main(["prune", str(shared), "-o", str(out)]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert "method 'forward'" in error and "named data '9abad9a5" in error, error
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["shared.pte"]


def _constants(tmp_path: Path) -> Path:
    """Three constants of one size, the second dead: two live after a prune."""
    from tests.layouts import build_constants

    src = tmp_path / "model.pte"
    src.write_bytes(build_constants([bytes([n]) * 16 for n in (1, 2, 3)], frozenset({1})))
    return src


def _off_by_one(original):
    """`remap_data_indices` giving each renumbered tensor the next one's entry."""

    def remap(model, plan, refs, live, new_index):
        renumbered = original(model, plan, refs, live, new_index)
        tensors = [tensor for _, tensor in renumbered]
        indices = [tensor.dataBufferIdx for tensor in tensors]
        for tensor, index in zip(tensors, indices[1:] + indices[:1], strict=True):
            tensor.dataBufferIdx = index
        return renumbered

    return remap


@pytest.mark.parametrize("dedupe", [False, True])
def test_a_remap_broken_on_purpose_is_refused_without_a_runtime(tmp_path, monkeypatch, dedupe):
    src = _constants(tmp_path)
    monkeypatch.setattr(
        prune_rewrite, "remap_data_indices", _off_by_one(prune_rewrite.remap_data_indices)
    )
    monkeypatch.setattr(prune_module, "validate_outputs", lambda written: None)
    out = tmp_path / "out.pte"
    with pytest.raises(InvalidOutputError, match=r"method 'forward' reads other bytes"):
        prune_file(src, out, dedupe=dedupe)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pte"]


def test_a_segment_builder_off_by_one_is_refused(tmp_path, monkeypatch, capsys):
    """The constant segment's entries copied from one byte late: every index right, the
    bytes wrong."""
    src = _constants(tmp_path)
    original = prune_rewrite.constant_segment

    def late(*args, **kwargs):
        segment, offsets = original(*args, **kwargs)
        segment.pieces = [dataclasses.replace(p, offset=p.offset + 1) for p in segment.pieces]
        return segment, offsets

    monkeypatch.setattr(prune_rewrite, "constant_segment", late)
    monkeypatch.setattr(prune_module, "validate_outputs", lambda written: None)
    out = tmp_path / "out.pte"
    assert main(["prune", str(src), "-o", str(out)]) == 2
    error = capsys.readouterr().err
    assert "method 'forward' reads other bytes" in error and "data" in error, error
    assert not out.exists()


def test_split_and_merge_are_proven_under_their_new_names(tmp_path):
    out = tmp_path / "split.pte"
    assert main(["split", str(XNNPACK), "-o", str(out), "--method", "score=forward"]) == 0
    prove_rewrite([Side(str(XNNPACK))], Side(str(out)), {"score": (0, "forward")})
    with pytest.raises(InvalidOutputError, match="method 'score' is not in its input"):
        prove_rewrite([Side(str(XNNPACK))], Side(str(out)))
    merged = tmp_path / "merged.pte"
    plain = GOLDEN / "plain" / "dirty" / "model.pte"
    args = ["merge", str(XNNPACK), str(plain), "-o", str(merged)]
    assert main([*args, "--prefix", "x_=#1", "--prefix", "p_=#2"]) == 0
    methods = {"x_forward": (0, "forward"), "p_forward": (1, "forward")}
    prove_rewrite([Side(str(XNNPACK)), Side(str(plain))], Side(str(merged)), methods)
    with pytest.raises(InvalidOutputError, match="method 'p_forward' reads other bytes"):
        prove_rewrite(
            [Side(str(XNNPACK)), Side(str(plain))],
            Side(str(merged)),
            {**methods, "p_forward": (0, "forward")},
        )


def test_an_output_written_other_than_decided_is_refused_on_the_bytes_written(
    tmp_path, monkeypatch, capsys
):
    """The proof of the bytes written: a writer copying zeros where it should copy the
    input's ranges (the output as described proven already) is caught before anything
    replaces anything."""
    from emitter_filter.ondisk import merge as merge_module
    from emitter_filter.ondisk.write import output

    def zeros(self, src, offset, count):
        self.zeros(count)

    monkeypatch.setattr(output._Writer, "copy", zeros)
    monkeypatch.setattr(merge_module, "validate_outputs", lambda written: None)
    out = tmp_path / "merged.pte"
    plain = GOLDEN / "plain" / "dirty" / "model.pte"
    assert main(["merge", str(plain), "-o", str(out), "--prefix", "p_=#1"]) == 2
    error = capsys.readouterr().err
    assert "method 'p_forward' as written reads other bytes than decided" in error, error
    assert list(tmp_path.iterdir()) == []
