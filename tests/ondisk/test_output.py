"""`output.write_outputs` copies consecutive input ranges in one kernel call, and only where
the input holds what the output holds between them (zeros)."""

from __future__ import annotations

import os
import threading

import pytest

from emitter_filter.ondisk.read.byte_source import Piece
from emitter_filter.ondisk.write import output, stream
from emitter_filter.ondisk.write.output import OutputFile, write_outputs

pytestmark = pytest.mark.filetools


def _written(tmp_path, data: bytes, runs, monkeypatch) -> tuple[bytes, list[tuple[int, int]]]:
    """What `write_outputs` writes for `runs` of pieces of a file holding `data`, and the
    (offset, size) of each copy call it made."""
    src = tmp_path / "in.bin"
    src.write_bytes(data)
    copies = []
    real = stream.Writer._copy_chunk

    def spy(self, fd, offset, count):
        copies.append((offset, count))
        return real(self, fd, offset, count)

    monkeypatch.setattr(stream.Writer, "_copy_chunk", spy)
    fd = os.open(src, os.O_RDONLY)
    try:
        pieces = [
            (at, [Piece(fd, offset, size) if size else b"\0" * pad for offset, size, pad in parts])
            for at, parts in runs
        ]
        write_outputs([OutputFile(str(tmp_path / "out.bin"), fd, b"head", pieces)])
    finally:
        os.close(fd)
    return (tmp_path / "out.bin").read_bytes(), copies


def test_ranges_with_zeros_between_them_in_the_input_are_copied_at_once(tmp_path, monkeypatch):
    a, b, c = b"A" * 100, b"B" * 100, b"C" * 100
    data = b"head" + a + bytes(28) + b + b"junk" * 7 + c
    # The output places the three ranges as the input does, zeros between them: the
    # first gap as a run's offset, the second as bytes (as dedupe writes padding).
    runs = [(4, [(4, 100, 0)]), (132, [(132, 100, 0), (0, 0, 28), (260, 100, 0)])]
    written, copies = _written(tmp_path, data, runs, monkeypatch)
    assert written == b"head" + a + bytes(28) + b + bytes(28) + c
    # A and B are one copy (the input has zeros between them too); C is not, as the
    # input has other bytes before it than the output.
    assert copies == [(4, 228), (260, 100)]


def test_ranges_out_of_input_order_are_copied_one_by_one(tmp_path, monkeypatch):
    data = b"head" + b"A" * 64 + b"B" * 64
    written, copies = _written(tmp_path, data, [(4, [(68, 64, 0), (4, 64, 0)])], monkeypatch)
    assert written == b"head" + b"B" * 64 + b"A" * 64
    assert copies == [(68, 64), (4, 64)]


def test_copies_end_on_chunk_boundaries_of_the_output(tmp_path, monkeypatch):
    # The kernel copies fastest when its steps start on aligned output offsets: after
    # the 4-byte head the first call copies up to the first boundary, then whole chunks.
    monkeypatch.setattr(stream, "_COPY_CHUNK", 16)
    data = b"head" + bytes(range(40))
    written, copies = _written(tmp_path, data, [(4, [(4, 40, 0)])], monkeypatch)
    assert written == data
    assert copies == [(4, 12), (16, 16), (32, 12)]


def _confirmed_output(tmp_path, confirm) -> OutputFile:
    src = tmp_path / "in.bin"
    src.write_bytes(b"x" * (3 << 20))
    fd = os.open(src, os.O_RDONLY)
    return OutputFile(
        str(tmp_path / "out.bin"), fd, b"head", [(4, [Piece(fd, 0, 3 << 20)])], confirm
    )


def test_an_output_whose_tests_pass_is_written(tmp_path):
    output_file = _confirmed_output(tmp_path, (lambda: True, lambda: True))
    try:
        assert write_outputs([output_file]) == 4 + (3 << 20)
    finally:
        os.close(output_file.source_fd)
    assert (tmp_path / "out.bin").read_bytes() == b"head" + b"x" * (3 << 20)


@pytest.mark.parametrize("failure", ["false", "raises"])
def test_an_output_whose_test_fails_leaves_nothing_and_the_old_target_as_it_was(
    tmp_path, monkeypatch, failure
):
    # Small copies, so that the write is still going when the test fails.
    monkeypatch.setattr(stream, "_COPY_CHUNK", 4096)
    (tmp_path / "out.bin").write_bytes(b"old")

    def test() -> bool:
        if failure == "raises":
            raise KeyboardInterrupt
        return False

    output_file = _confirmed_output(tmp_path, (lambda: True, test))
    expected = KeyboardInterrupt if failure == "raises" else output.UnconfirmedOutput
    try:
        with pytest.raises(expected):
            write_outputs([output_file])
    finally:
        os.close(output_file.source_fd)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.bin", "out.bin"]
    assert (tmp_path / "out.bin").read_bytes() == b"old"


def _early_written(tmp_path, monkeypatch, runs) -> tuple[bytes, list[str]]:
    """What `write_outputs` writes from an `EarlyCopy` of in.bin (b"HEAD", 3 MiB of A, 1 MiB
    of B) for `runs` of (output offset, input offset, size) after b"head", and the names of
    the threads that made each copy call."""
    monkeypatch.setattr(stream, "_COPY_CHUNK", 1 << 20)
    src, dst = tmp_path / "in.bin", tmp_path / "out.bin"
    src.write_bytes(b"HEAD" + b"A" * (3 << 20) + b"B" * (1 << 20))
    threads = []
    real = stream.Writer._copy_chunk

    def spy(self, fd, offset, count):
        threads.append(threading.current_thread().name)
        return real(self, fd, offset, count)

    monkeypatch.setattr(stream.Writer, "_copy_chunk", spy)
    fd = os.open(src, os.O_RDONLY)
    try:
        with stream.EarlyCopy(str(src), str(dst)) as early:
            pieces = [(at, [Piece(fd, offset, size)]) for at, offset, size in runs]
            write_outputs([OutputFile(str(dst), fd, b"head", pieces)], early=early)
    finally:
        os.close(fd)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.bin", "out.bin"]
    return dst.read_bytes(), threads


def test_what_the_early_copy_holds_in_place_is_not_copied_again(tmp_path, monkeypatch):
    # The head is written over the copy's, the As are where the copy put them, the Bs
    # the copy went on to are cut off.
    written, threads = _early_written(tmp_path, monkeypatch, [(4, 4, 3 << 20)])
    assert written == b"head" + b"A" * (3 << 20)
    assert "MainThread" not in threads


def test_what_the_output_moves_is_written_over_the_early_copy(tmp_path, monkeypatch):
    written, threads = _early_written(tmp_path, monkeypatch, [(4, 4 + (3 << 20), 1 << 20)])
    assert written == b"head" + b"B" * (1 << 20)
    assert "MainThread" in threads


def test_an_early_copy_never_taken_leaves_nothing(tmp_path):
    src = tmp_path / "in.bin"
    src.write_bytes(b"x" * (1 << 20))
    with pytest.raises(RuntimeError):
        with stream.EarlyCopy(str(src), str(tmp_path / "out.bin")):
            raise RuntimeError("the input is malformed")
    assert [p.name for p in tmp_path.iterdir()] == ["in.bin"]


def test_prune_file_refuses_an_early_copy_of_another_file(tmp_path):
    from emitter_filter.ondisk.prune import prune_file

    (tmp_path / "a.pte").write_bytes(b"a" * 100)
    (tmp_path / "b.pte").write_bytes(b"b" * 100)
    out = tmp_path / "out.pte"
    with stream.EarlyCopy(str(tmp_path / "b.pte"), str(out)) as early:
        with pytest.raises(ValueError, match="not one of"):
            prune_file(tmp_path / "a.pte", out, early=early)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pte", "b.pte"]
