"""Random access to a file's bytes, and the checks every reader of a flatbuffer file makes.

`ByteSource` reads only what is asked for (so reading a 1 GiB file's headers costs the
same as a 1 KiB one's); `StoredSpan` defers reading an entry's bytes until `duplicates`
asks. `check_identifier` and `read_root` turn a wrong or corrupt flatbuffer into one
`PteFormatError`.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import cast

from emitter_filter.errors import PteFormatError
from emitter_filter.ondisk.read.file_headers import FLAT_TENSOR_IDENTIFIER, PROGRAM_IDENTIFIER
from emitter_filter.ondisk.read.read_ptn import is_ptn
from emitter_filter.program.flatbuffer_tables import FlatbufferError, Schema, Table
from emitter_filter.regular_files import open_regular_input

__all__ = [
    "ByteSource",
    "Compared",
    "Piece",
    "open_sources",
    "StoredSpan",
    "check_identifier",
    "read_root",
    "same_in_place",
]

# Bytes per read when hashing stored data: bounds memory whatever the entry's size.
_HASH_CHUNK = 1 << 20


@dataclass(frozen=True)
class Piece:
    """`nbytes` bytes at absolute `offset` of an open input file, then `pad` zero bytes.

    A part of a file that is read only where asked: what `output` copies into a
    written file, and what a `ByteSource` of parts reads from (with `pad` 0).
    """

    fd: int
    offset: int
    nbytes: int
    pad: int = 0

    def __len__(self) -> int:
        return self.nbytes + self.pad


class Compared:
    """The ranges of `bytes` objects found equal by a memcmp, so that a later test of the same
    two ranges (the proof of a dedupe that compared them) reads nothing again.

    Only `bytes`, which cannot change; by the objects' identities, each object held while it
    is recorded, so that no identity is reused. Not a decision's record: only the result of
    comparing these very bytes, which is all a second compare could say. One per rewrite.
    """

    def __init__(self) -> None:
        self._equal: set[tuple] = set()
        self._held: dict[int, bytes] = {}

    def same(self, first: bytes, a: int, second: bytes, b: int, count: int) -> bool:
        """Whether `count` bytes at `a` of `first` and at `b` of `second` are equal: known,
        or compared now in place (no copy) and recorded."""
        key = (*sorted(((id(first), a), (id(second), b))), count)
        if key in self._equal:
            return True
        if not first.startswith(memoryview(second)[b : b + count], a):
            return False
        self._held[id(first)], self._held[id(second)] = first, second
        self._equal.add(key)
        return True


def same_in_place(
    compared: Compared | None,
    first: bytes | bytearray,
    a: int,
    second: bytes | bytearray | memoryview,
    b: int,
    count: int,
) -> bool:
    """`compared.same`, or (without one, or for a `bytearray`) a memcmp in place."""
    if compared is not None and isinstance(first, bytes) and type(second) is bytes:
        return compared.same(first, a, second, b, count)
    return first.startswith(memoryview(second)[b : b + count], a)


class ByteSource:
    """Random access to a file, a bytes object or a file's parts in order, reading only what
    is asked for.

    The parts (a serializer's chunks, or a rewrite's header and ranges of its
    input) are never joined: a range is read from the parts it spans, and
    `same_bytes` compares ranges where they lie. A context manager: a file
    opened by path is closed on exit (the descriptors of `Piece` parts are the
    caller's). `name` is the name `read_pte` gives the file: its path, or the
    name given with bytes or parts ("<bytes>" unless said). `compared`, if given, records
    each memcmp of two `bytes` parts, and answers a repeat of one without reading.
    """

    def __init__(
        self,
        source: str | os.PathLike | bytes | memoryview | Sequence[bytes | memoryview | Piece],
        name: str = "<bytes>",
        compared: Compared | None = None,
    ) -> None:
        self._fd: int | None = None
        self.compared = compared
        if isinstance(source, (bytes, bytearray, memoryview)):
            source = [source]
        if isinstance(source, (list, tuple)):
            self.name = name
            self._parts = list(source)
            if any(isinstance(p, Piece) and p.pad for p in self._parts):
                raise ValueError("a ByteSource's Piece parts have no pad: give the zeros as bytes")
        else:
            # A path (anything else but a list or tuple raises here, as os.fspath does).
            self.name = os.fspath(cast("str | os.PathLike", source))
            self._fd = open_regular_input(self.name)
            self._parts = [Piece(self._fd, 0, os.fstat(self._fd).st_size)]
        self._starts = list(itertools.accumulate((len(p) for p in self._parts), initial=0))
        self.size = self._starts[-1]

    @property
    def parts(self) -> list:
        """The parts in order (one `Piece` for a file opened by path)."""
        return self._parts

    def _check(self, offset: int, size: int, what: str) -> None:
        if offset < 0 or size < 0 or offset + size > self.size:
            raise PteFormatError(
                self.name,
                f"truncated: {what} needs bytes {offset}..{offset + size}, file has {self.size}",
                offset,
            )

    def read(self, offset: int, size: int, what: str) -> bytes:
        self._check(offset, size, what)
        spans = self.spans(offset, size)
        return b"".join(self._read_span(index, start, n, what) for index, start, n in spans)

    def _read_span(self, index: int, start: int, count: int, what: str) -> bytes | memoryview:
        part = self._parts[index]
        if not isinstance(part, Piece):
            return memoryview(part)[start : start + count]
        data = os.pread(part.fd, count, part.offset + start)
        if len(data) != count:
            raise PteFormatError(self.name, f"short read of {what}", self._starts[index] + start)
        return data

    def spans(self, offset: int, size: int) -> Iterator[tuple[int, int, int]]:
        """The parts covering `size` bytes at `offset`: (part index, start in it, count)."""
        while size > 0:
            index, start, left = self._locate(offset)
            count = min(size, left)
            yield index, start, count
            offset, size = offset + count, size - count

    def same_bytes(self, a: int, b: int, size: int, what: str) -> bool:
        """Whether the `size` bytes at `a` and at `b` are equal, compared where they lie.

        A range of one bytes object against itself is equal without a look; a
        range in memory against bytes is compared in place (`bytes.startswith`,
        a memcmp: no copy); a file's range is read a chunk at a time into one
        reused buffer a side, so memory stays flat whatever the size.
        """
        self._check(a, size, what)
        self._check(b, size, what)
        buffers: list[bytearray] = []
        done = 0
        while done < size:
            ia, sa, count_a = self._locate(a + done)
            ib, sb, count_b = self._locate(b + done)
            count = min(size - done, count_a, count_b)
            first, second = self._parts[ia], self._parts[ib]
            if first is second and sa == sb:
                pass
            elif isinstance(first, (bytes, bytearray)) and not isinstance(second, Piece):
                if not same_in_place(self.compared, first, sa, second, sb, count):
                    return False
            elif isinstance(second, (bytes, bytearray)) and not isinstance(first, Piece):
                if not second.startswith(memoryview(first)[sa : sa + count], sb):
                    return False
            else:
                count = min(count, _HASH_CHUNK)
                if not buffers:
                    buffers = [bytearray(min(size, _HASH_CHUNK)) for _ in range(2)]
                left = self._chunk(ia, sa, count, buffers[0], what)
                right = self._chunk(ib, sb, count, buffers[1], what)
                if not _same_start(left, right, count):
                    return False
            done += count
        return True

    def _chunk(
        self, index: int, start: int, count: int, buffer: bytearray, what: str
    ) -> bytearray | memoryview:
        """`count` bytes of a part: read into `buffer` from a file (returned as `buffer`,
        its first `count` bytes), or a view of a part in memory."""
        part = self._parts[index]
        if not isinstance(part, Piece):
            return memoryview(part)[start : start + count]
        self._pread_into(index, start, memoryview(buffer)[:count], what)
        return buffer

    def read_into(self, offset: int, count: int, buffer: bytearray, what: str) -> bytearray:
        """`count` bytes at `offset` read into `buffer` (at least that long), which is
        returned: a reused buffer, where `read` makes new bytes each time."""
        self._check(offset, count, what)
        view, at = memoryview(buffer), 0
        for index, start, n in self.spans(offset, count):
            part = self._parts[index]
            if isinstance(part, Piece):
                self._pread_into(index, start, view[at : at + n], what)
            else:
                view[at : at + n] = memoryview(part)[start : start + n]
            at += n
        return buffer

    def _pread_into(self, index: int, start: int, view: memoryview, what: str) -> None:
        part = self._parts[index]
        if os.preadv(part.fd, [view], part.offset + start) != len(view):
            raise PteFormatError(self.name, f"short read of {what}", self._starts[index] + start)

    def _locate(self, offset: int) -> tuple[int, int, int]:
        """(part index, start in it, bytes left in it) of `offset`, inside the source."""
        index = bisect.bisect_right(self._starts, offset) - 1
        start = offset - self._starts[index]
        return index, start, len(self._parts[index]) - start

    def sha256(self, offset: int, size: int, what: str) -> bytes:
        """The digest of `size` bytes at `offset`, read in chunks."""
        # Imported here: OpenSSL's start-up (3 ms) is paid only where look-alikes are hashed.
        import hashlib

        self._check(offset, size, what)
        digest = hashlib.sha256()
        for index, start, count in self.spans(offset, size):
            end = start + count
            for at in range(start, end, _HASH_CHUNK):
                digest.update(self._read_span(index, at, min(_HASH_CHUNK, end - at), what))
        return digest.digest()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> ByteSource:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _same_start(left: bytearray | memoryview, right: bytearray | memoryview, count: int) -> bool:
    """Whether the first `count` bytes of two chunks are equal: a memcmp where one is a
    read buffer, a copy of each only for two views of memory that is not bytes."""
    if isinstance(left, bytearray):
        return left.startswith(memoryview(right)[:count])
    if isinstance(right, bytearray):
        return right.startswith(memoryview(left)[:count])
    return bytes(left) == bytes(right)


@dataclass(frozen=True)
class StoredSpan:
    """`nbytes` bytes at `offset` of an open `ByteSource`, read only when asked.

    What `duplicates.group_duplicates` needs of a copy: its length, then (only if
    another copy has that length) its first bytes, then its digest.
    """

    source: ByteSource
    offset: int
    nbytes: int

    def __len__(self) -> int:
        return self.nbytes

    def prefix(self, count: int) -> bytes:
        return self.source.read(self.offset, min(count, self.nbytes), "stored data")

    def sha256(self) -> bytes:
        return self.source.sha256(self.offset, self.nbytes, "stored data")

    def same_bytes(self, other: object) -> bool | None:
        """Whether `other`, a span of the same length, holds the same bytes: compared where
        they lie (`ByteSource.same_bytes`) in one source, a chunk at a time into two reused
        buffers across two; None for anything else."""
        if not isinstance(other, StoredSpan) or other.nbytes != self.nbytes:
            return None
        if other.source is self.source:
            return self.source.same_bytes(self.offset, other.offset, self.nbytes, "stored data")
        buffers = [bytearray(min(self.nbytes, _HASH_CHUNK)) for _ in range(2)]
        for done in range(0, self.nbytes, _HASH_CHUNK):
            count = min(_HASH_CHUNK, self.nbytes - done)
            left = self.source.read_into(self.offset + done, count, buffers[0], "stored data")
            right = other.source.read_into(other.offset + done, count, buffers[1], "stored data")
            if not _same_start(left, right, count):
                return False
        return True

    def chunks(self, size: int) -> Iterator[bytes]:
        """Its bytes, `size` at a time (to compare two spans without hashing either)."""
        for start in range(self.offset, self.offset + self.nbytes, size):
            yield self.source.read(
                start, min(size, self.offset + self.nbytes - start), "stored data"
            )


# The file of the other kind where one was expected: what it is and how a command takes it.
_OTHER_KIND = {
    FLAT_TENSOR_IDENTIFIER: "a .ptd data file, not a program: give it with --data, "
    "beside the .pte that loads it",
    PROGRAM_IDENTIFIER: "a .pte program, not a .ptd data file: give it as a program, "
    "and its .ptd with --data",
}


def check_identifier(source: ByteSource, head: bytes, expected: bytes, kind: str) -> None:
    """Refuses a file whose flatbuffer identifier is not `expected`, naming a version skew."""
    if len(head) < 8:
        raise PteFormatError(source.name, f"not a {kind} file: only {len(head)} bytes", 0)
    identifier = head[4:8]
    if identifier == expected:
        return
    if head[:4] == b"PK\x03\x04" and is_ptn(source.name):
        raise PteFormatError(
            source.name,
            f"is an ExecuTorch native (.ptn) package, not a {kind} file: audit, explain and "
            "diff read it; prune, dedupe, share, merge, split, budget and verify don't",
        )
    if identifier in _OTHER_KIND and expected in _OTHER_KIND:
        raise PteFormatError(source.name, _OTHER_KIND[identifier])
    if identifier[:2] == expected[:2] and re.fullmatch(rb"[0-9A-Za-z]{2}", identifier[2:]):
        raise PteFormatError(
            source.name,
            f"wrong flatbuffer identifier {identifier!r}, expected {expected!r}: "
            "written by an unsupported ExecuTorch version",
            4,
        )
    raise PteFormatError(
        source.name,
        f"not a {kind} file: flatbuffer identifier {identifier!r}, expected {expected!r}",
        4,
    )


def read_root(source: ByteSource, schema: Schema, buffer: bytes, what: str) -> Table:
    """The root table of a flatbuffer (`flatbuffer_tables`); a corrupt one is a `PteFormatError`."""
    root = int.from_bytes(buffer[0:4], "little")
    if not 8 <= root < len(buffer):
        raise PteFormatError(source.name, f"{what}: root offset {root} outside 8..{len(buffer)}", 0)
    try:
        return schema.read(buffer)
    except FlatbufferError as error:
        raise PteFormatError(source.name, f"corrupt {what}: {error}") from error


def open_sources(
    stack: contextlib.ExitStack, paths: Iterable[str | os.PathLike | bytes]
) -> dict[str, ByteSource]:
    """Opens each file (or bytes) as a `ByteSource` in `stack`, by the name `read_pte` gives it:
    the `sources` an analysis of a read file takes."""
    return {source.name: source for source in (stack.enter_context(ByteSource(p)) for p in paths)}
