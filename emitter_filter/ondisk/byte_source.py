"""Random access to a file's bytes, and the checks every reader of a flatbuffer file makes.

`ByteSource` reads only what is asked for (so reading a 1 GiB file's headers costs the
same as a 1 KiB one's); `StoredSpan` defers reading an entry's bytes until `duplicates`
asks. `check_identifier` and `unpack_root` turn a wrong or corrupt flatbuffer into one
`PteFormatError`.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import itertools
import os
import re
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from emitter_filter.errors import PteFormatError
from emitter_filter.regular_files import open_regular_input

__all__ = [
    "ByteSource",
    "open_sources",
    "StoredSpan",
    "check_identifier",
    "unpack_root",
]

# Bytes per read when hashing stored data: bounds memory whatever the entry's size.
_HASH_CHUNK = 1 << 20


class ByteSource:
    """Random access to a file or a bytes object, reading only what is asked for.

    A context manager: the file is closed on exit. `name` is the name `read_pte`
    gives the file (its path, or "<bytes>").
    """

    def __init__(self, source: str | os.PathLike | bytes | Sequence[bytes]) -> None:
        self._pieces: list[bytes] | None = None
        if isinstance(source, (list, tuple)):
            # The pieces of one file in order (a serializer's chunks), never joined.
            self.name = "<bytes>"
            self._data, self._fd = None, None
            self._pieces = list(source)
            self._starts = list(itertools.accumulate((len(p) for p in self._pieces), initial=0))
            self.size = self._starts[-1]
        elif isinstance(source, (bytes, bytearray, memoryview)):
            self.name = "<bytes>"
            self._data: memoryview | None = memoryview(source)
            self._fd = None
            self.size = len(self._data)
        else:
            self.name = os.fspath(source)
            self._data = None
            self._fd = open_regular_input(self.name)
            self.size = os.fstat(self._fd).st_size

    def read(self, offset: int, size: int, what: str) -> bytes:
        if offset < 0 or size < 0 or offset + size > self.size:
            raise PteFormatError(
                self.name,
                f"truncated: {what} needs bytes {offset}..{offset + size}, "
                f"file has {self.size}",
                offset,
            )
        if self._data is not None:
            return bytes(self._data[offset : offset + size])
        if self._pieces is not None:
            return b"".join(view for _, view in self.views(offset, size))
        data = os.pread(self._fd, size, offset)
        if len(data) != size:
            raise PteFormatError(self.name, f"short read of {what}", offset)
        return data

    def views(self, offset: int, size: int) -> Iterator[tuple[int, memoryview]]:
        """The pieces' views covering `size` bytes at `offset`: (piece index, view), in order."""
        index = bisect.bisect_right(self._starts, offset) - 1
        while size > 0:
            start = offset - self._starts[index]
            count = min(size, len(self._pieces[index]) - start)
            if count > 0:
                yield index, memoryview(self._pieces[index])[start : start + count]
            offset, size, index = offset + count, size - count, index + 1

    def sha256(self, offset: int, size: int, what: str) -> bytes:
        """The digest of `size` bytes at `offset`, read in chunks."""
        digest = hashlib.sha256()
        for start in range(offset, offset + size, _HASH_CHUNK):
            digest.update(self.read(start, min(_HASH_CHUNK, offset + size - start), what))
        return digest.digest()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> ByteSource:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


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

    def chunks(self, size: int) -> Iterator[bytes]:
        """Its bytes, `size` at a time (to compare two spans without hashing either)."""
        for start in range(self.offset, self.offset + self.nbytes, size):
            yield self.source.read(
                start, min(size, self.offset + self.nbytes - start), "stored data"
            )


def check_identifier(source: ByteSource, head: bytes, expected: bytes, kind: str) -> None:
    """Refuses a file whose flatbuffer identifier is not `expected`, naming a version skew."""
    if len(head) < 8:
        raise PteFormatError(source.name, f"not a {kind} file: only {len(head)} bytes", 0)
    identifier = head[4:8]
    if identifier == expected:
        return
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


def unpack_root(source: ByteSource, cls, buffer: bytes, what: str):
    """Unpacks a generated root table; a corrupt buffer becomes a `PteFormatError`."""
    root = int.from_bytes(buffer[0:4], "little")
    if not 8 <= root < len(buffer):
        raise PteFormatError(
            source.name, f"{what}: root offset {root} outside 8..{len(buffer)}", 0
        )
    try:
        return cls.InitFromPackedBuf(buffer, 0)
    # The flatbuffers runtime reports a negative offset in a corrupt buffer as a TypeError.
    except (struct.error, IndexError, TypeError, ValueError, UnicodeDecodeError) as error:
        raise PteFormatError(source.name, f"corrupt {what}: {error}") from error


def open_sources(
    stack: contextlib.ExitStack, paths: Iterable[str | os.PathLike | bytes]
) -> dict[str, ByteSource]:
    """Opens each file (or bytes) as a `ByteSource` in `stack`, by the name `read_pte` gives it:
    the `sources` an analysis of a read file takes."""
    return {source.name: source for source in (stack.enter_context(ByteSource(p)) for p in paths)}
