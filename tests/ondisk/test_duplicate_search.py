"""The duplicate search compares two look-alikes byte for byte; it hashes only where it must."""

from __future__ import annotations

import pytest

from emitter_filter.ondisk.read.byte_source import ByteSource, StoredSpan
from emitter_filter.program import duplicates
from emitter_filter.program.duplicates import StoredCopy, group_duplicates

pytestmark = pytest.mark.filetools

SIZE = 3 * (1 << 20) + 5  # more than one compared chunk


@pytest.fixture
def hashed(monkeypatch):
    """The lengths of every content the search hashes."""
    lengths = []
    real = duplicates._sha256

    def counting(data):
        lengths.append(len(data))
        return real(data)

    monkeypatch.setattr(duplicates, "_sha256", counting)
    return lengths


def _spans(*contents: bytes):
    data = b"".join(contents)
    source = ByteSource(data)
    spans, at = [], 0
    for index, content in enumerate(contents, start=1):
        copy = StoredCopy("constant", None, index, ())
        spans.append((copy, StoredSpan(source, at, len(content))))
        at += len(content)
    return spans


def test_two_look_alikes_that_differ_at_the_end_are_never_hashed(hashed):
    a = bytes(SIZE)
    b = a[:-1] + b"\x01"
    assert group_duplicates(_spans(a, b)) == ()
    assert hashed == []


def test_two_equal_copies_are_hashed_once_for_the_report(hashed):
    a = bytes(range(256)) * (SIZE // 256)
    (group,) = group_duplicates(_spans(a, a))
    assert group.nbytes == len(a) and len(group.copies) == 2
    assert hashed == [len(a)]


def test_a_few_look_alikes_are_compared_and_only_one_of_each_group_hashed(hashed):
    a = bytes(SIZE)
    others = [a[:-1] + bytes([i]) for i in (1, 2)]
    (group,) = group_duplicates(_spans(a, *others, a))
    assert [c.index for c in group.copies] == [1, 4]
    assert hashed == [len(a)]


def test_many_look_alikes_are_each_hashed_once(hashed):
    a = bytes(SIZE)
    others = [a[:-1] + bytes([i]) for i in range(1, duplicates._COMPARED + 1)]
    (group,) = group_duplicates(_spans(a, *others, a))
    assert [c.index for c in group.copies] == [1, len(others) + 2]
    assert len(hashed) == len(others) + 2


def test_without_digests_equal_copies_are_grouped_and_never_hashed(hashed):
    a = bytes(range(256)) * (SIZE // 256)
    (group,) = group_duplicates(_spans(a, a[:-1] + b"\x01", a), digests=False)
    assert [c.index for c in group.copies] == [1, 3] and group.sha256 == ""
    assert hashed == []


def test_equal_spans_of_two_files_are_compared_where_they_lie(tmp_path, hashed):
    a = bytes(range(256)) * (SIZE // 256)
    (tmp_path / "x").write_bytes(b"head" + a)
    (tmp_path / "y").write_bytes(a + b"tail")
    with ByteSource(tmp_path / "x") as x, ByteSource(tmp_path / "y") as y:
        spans = [
            (StoredCopy("constant", None, 1, ()), StoredSpan(x, 4, len(a))),
            (StoredCopy("constant", None, 2, ()), StoredSpan(y, 0, len(a))),
        ]
        assert StoredSpan(x, 4, len(a)).same_bytes(StoredSpan(y, 1, len(a))) is False
        (group,) = group_duplicates(spans, digests=False)
    assert len(group.copies) == 2 and hashed == []
