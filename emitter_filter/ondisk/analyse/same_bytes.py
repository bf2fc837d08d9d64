"""Whether two spans of stored bytes hold the same bytes, as the structural proof asks it.

`same_span` compares without reading where both lie in one place (a rewrite's output
described from its input's ranges), in place where both are in memory (a memcmp, or none
where the caller's `Compared` holds the compare of these very ranges), else a chunk at a
time; `same_place` is the cheap test of an output as written against as described; `same`
compares two items of `proof`, nested tuples with spans in them. On `read/` alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from emitter_filter.ondisk.read.byte_source import Piece, StoredSpan, same_in_place

__all__ = ["SpanTest", "same", "same_span", "same_place"]


def _places(span: StoredSpan) -> list[tuple[object, int, int]]:
    """Where a span's bytes lie: (the file, by device and inode, or the buffer in memory,
    by identity; start; count) of each part it spans, runs merged."""
    places: list[tuple[object, int, int]] = []
    parts = span.source.parts
    for index, start, count in span.source.spans(span.offset, span.nbytes):
        part = parts[index]
        if isinstance(part, Piece):
            status = os.fstat(part.fd)
            where: object = (status.st_dev, status.st_ino)
            start += part.offset
        else:
            where = id(part)
        if places and places[-1][0] == where and places[-1][1] + places[-1][2] == start:
            places[-1] = (where, places[-1][1], places[-1][2] + count)
        else:
            places.append((where, start, count))
    return places


def same_span(left: StoredSpan, right: StoredSpan) -> bool:
    """Equal bytes: without reading them where both lie in one place (a rewrite's output
    described from its input's ranges), else compared a chunk at a time."""
    if left.nbytes != right.nbytes:
        return False
    if not left.nbytes:
        return True
    places = _places(left), _places(right)
    if places[0] == places[1]:
        return True
    mine, theirs = _in_memory(left), _in_memory(right)
    if mine is not None and theirs is not None:
        # A memcmp in place (37 MB: 3 ms, chunks take 11); none if done (the hook's `Compared`).
        compared = left.source.compared if left.source.compared is right.source.compared else None
        return same_in_place(compared, *mine, *theirs, right.nbytes)
    return bool(left.same_bytes(right))


def _in_memory(span: StoredSpan) -> tuple[bytes, int] | None:
    """(the bytes object, start) where a span lies in one part in memory, else None."""
    index, start, count = next(span.source.spans(span.offset, span.nbytes))
    part = span.source.parts[index]
    return (part, start) if isinstance(part, bytes) and count == span.nbytes else None


_SAMPLE = 4096


def same_place(left: StoredSpan, right: StoredSpan) -> bool:
    """The same range of a file as described and as written: its offset and size, and the
    `_SAMPLE` bytes at each end (what a copy gone wrong would change), not all of them."""
    if (left.offset, left.nbytes) != (right.offset, right.nbytes):
        return False
    ends = {0, max(0, left.nbytes - _SAMPLE)}
    return all(
        left.source.read(left.offset + at, min(_SAMPLE, left.nbytes - at), "proof")
        == right.source.read(right.offset + at, min(_SAMPLE, right.nbytes - at), "proof")
        for at in ends
    )


SpanTest = Callable[[StoredSpan, StoredSpan], bool]


def same(left: object, right: object, same_span: SpanTest = same_span) -> bool:
    """Two items of the proof equal, their spans by `same_span`. At once where `==` says so
    (in C): two equal spans are one range of one source."""
    if left == right:
        return True
    if isinstance(left, StoredSpan) and isinstance(right, StoredSpan):
        return same_span(left, right)
    if isinstance(left, tuple) and isinstance(right, tuple):
        return len(left) == len(right) and all(
            same(a, b, same_span) for a, b in zip(left, right, strict=True)
        )
    if isinstance(left, StoredSpan) or isinstance(right, StoredSpan):
        return False
    return left == right
