"""The structural proof of a rewrite that only moved data: its reads compared where they lie.

A dedupe writes the input's program bytes again with only the numbers that place data
changed (segment ranges, constant offsets, the extended header's segment data size:
`layout.patch_program`). Where the output shows exactly that (the input's head with the
output's numbers put in at their places is the output's head, byte for byte), every
method's instructions, values, operators and inline blobs are the input's own bytes, and
what a method can read differently is only the data those numbers place: each constant
and mutable entry for the size its tensors read, each delegate blob stored in a segment,
each named-data segment whole (and an XNNPACK key's read no longer than its segment).
Those ranges are compared, the input's against the output's: the same conclusion as
`proof.prove_rewrite`'s item-by-item walk of both programs, without decoding the output.

Anything else (another byte changed, a read past its segment, a `.ptd`) is not known
here: `moved_only` says False and the caller runs the full proof, which also names what
differs. It presumes that no other field shares the bytes of these numbers, as in any
flatbuffer a builder packed: the hook's dedupe calls it on what ExecuTorch's serializer
just wrote (on a stories15M-sized llama, 1.4 ms against the walk's 27); a file from elsewhere, which may be crafted
otherwise, gets the full proof. On `read/` alone.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass

from emitter_filter.ondisk.analyse.same_bytes import same_span
from emitter_filter.ondisk.read.byte_source import ByteSource, StoredSpan
from emitter_filter.ondisk.read.file_headers import (
    EH,
    EH_LENGTH,
    EH_MAGIC,
    EH_OFFSET,
)
from emitter_filter.ondisk.read.read_pte import PteProgram
from emitter_filter.program.fbs_schemas import PROGRAM
from emitter_filter.program.generated_fields import vector_ints
from emitter_filter.program.reachability import DataSpace

__all__ = ["moved_only"]

_NUMBER = struct.Struct("<Q")


@dataclass(frozen=True)
class _Places:
    """Where the numbers that place data are stored in the head, by what they place.

    Attributes:
        segments: (position of `offset`, of `size`) of each `Program.segments` entry;
            None where the packer left a zero out (then it is zero on both sides).
        constant_offsets: Position of each `constant_segment.offsets` element.
        data_size: Position of the extended header's segment data size, if stored.
    """

    segments: tuple[tuple[int | None, int | None], ...]
    constant_offsets: tuple[int, ...]
    data_size: int | None

    def positions(self) -> list[int]:
        found = [at for pair in self.segments for at in pair if at is not None]
        found += self.constant_offsets
        return found if self.data_size is None else [*found, self.data_size]


def _places(read: PteProgram, head: bytes) -> _Places | None:
    """The places of the input's numbers, each checked to hold the value the decoder read
    (a wrong place is never trusted); None where one does not."""
    program = read.program
    tables = program.segments or []
    segments = PROGRAM.fields_at(head, tables, ("offset", "size"))
    stored = [0 if at is None else _number(head, at) for pair in segments for at in pair]
    if stored != [v for segment in tables for v in (segment.offset, segment.size)]:
        return None
    offsets: tuple[int, ...] = ()
    constant = program.constantSegment
    values = vector_ints(constant.offsets) if constant is not None else ()
    if len(values):
        start = PROGRAM.vector_at(head, constant, "offsets")
        if start is None:
            return None
        offsets = tuple(start + 8 * i for i in range(len(values)))
        if any(_number(head, at) != v for at, v in zip(offsets, values, strict=True)):
            return None
    data_size = None
    magic, length = EH.unpack_from(head, EH_OFFSET)[:2]
    if magic == EH_MAGIC and length >= EH_LENGTH:
        data_size = EH_OFFSET + EH.size
    return _Places(tuple(segments), offsets, data_size)  # type: ignore[arg-type]


def _number(head: bytes, at: int) -> int:
    return _NUMBER.unpack_from(head, at)[0]


def _same_but_numbers(head: bytes, new_head: bytes, places: _Places) -> bool:
    """Whether `new_head` is `head` with other numbers at `places` and no other byte."""
    if len(new_head) != len(head):
        return False
    patched = bytearray(head)
    for at in places.positions():
        patched[at : at + 8] = new_head[at : at + 8]
    return patched == new_head


class _Layout:
    """Where one side's data lies: its segments and its constant offsets, absolute."""

    def __init__(self, read: PteProgram, head: bytes, places: _Places, size: int) -> None:
        base = read.pte.segment_base_offset
        self.segments = [
            (
                base + (0 if at is None else _number(head, at)),
                0 if size_at is None else _number(head, size_at),
            )
            for at, size_at in places.segments
        ]
        self.constant_offsets = [_number(head, at) for at in places.constant_offsets]
        self.end = size if places.data_size is None else base + _number(head, places.data_size)
        self.size, self.constant = size, read.pte.constant_segment

    def valid(self) -> bool:
        """What `read_pte` checks of these numbers: every segment inside the segment data
        and the file, the constant offsets in order inside their segment."""
        if self.end > self.size or any(at + n > self.end for at, n in self.segments):
            return False
        offsets = self.constant_offsets
        if not offsets or self.constant is None:
            return True
        ordered = all(a <= b for a, b in zip(offsets, offsets[1:], strict=False))
        return ordered and offsets[-1] <= self.segments[self.constant][1]

    def segment_range(self, index: int, at: int, nbytes: int) -> int | None:
        """The absolute offset of `nbytes` at `at` of segment `index`; None past its end."""
        start, size = self.segments[index]
        if at < 0 or at + nbytes > size:
            return None
        return start + at


def _entry_reads(read: PteProgram) -> dict[tuple[DataSpace, int], int]:
    """Each constant and mutable entry a tensor reads, for the most bytes one reads."""
    reads: dict[tuple[DataSpace, int], int] = {}
    for tensor in read.pte.tensors:
        if tensor.ref.space in (DataSpace.CONSTANT, DataSpace.MUTABLE):
            key = (tensor.ref.space, tensor.ref.index)
            reads[key] = max(reads.get(key, 0), tensor.nbytes or 0)
    return reads


def _ranges(
    read: PteProgram, old: _Layout, new: _Layout, key_sizes: Mapping[str, int | None]
) -> list[tuple[int, int, int]] | None:
    """(input offset, output offset, bytes) of everything the methods read that the numbers
    place; None where a read is not inside its segment on both sides."""
    pte, program = read.pte, read.program
    found: list[tuple[int | None, int | None, int]] = []
    mutable = program.mutableDataSegments[0] if program.mutableDataSegments else None
    mutable_offsets = vector_ints(mutable.offsets) if mutable is not None else ()
    for (space, index), nbytes in _entry_reads(read).items():
        if space is DataSpace.CONSTANT and pte.constant_segment is not None:
            segment, before = pte.constant_segment, old.constant_offsets[index]
            after = new.constant_offsets[index]
        elif space is DataSpace.MUTABLE and pte.mutable_segment is not None:
            segment, before = pte.mutable_segment, mutable_offsets[index]
            after = before
        else:
            return None
        found.append(
            (
                old.segment_range(segment, before, nbytes),
                new.segment_range(segment, after, nbytes),
                nbytes,
            )
        )
    whole = {d.index for d in pte.delegates if d.location == "segment"}
    for entry in pte.named_data:
        if entry.file != pte.path:
            return None
        size = key_sizes.get(entry.key)
        if size is not None and size > entry.nbytes:
            return None
        whole.add(entry.segment_index)
    for index in sorted(whole):
        size = old.segments[index][1]
        if new.segments[index][1] != size:
            return None
        found.append((old.segment_range(index, 0, size), new.segment_range(index, 0, size), size))
    if any(before is None or after is None for before, after, _ in found):
        return None
    return found  # type: ignore[return-value]


def moved_only(
    read: PteProgram,
    source: ByteSource,
    new: ByteSource,
    key_sizes: Mapping[str, int | None],
) -> bool:
    """True when `new` is `read`'s program with only data moved, and each method reads
    the same bytes as before; False when that is not known here (the full proof decides).

    Args:
        read: `read_pte_program` of `source`, the input (no `.ptd` files).
        source: The input's bytes. Not modified.
        new: The output's bytes, as described or as written. Not modified.
        key_sizes: The bytes XNNPACK reads of each named-data key it names (the full
            proof's, from the same blobs: a blob's bytes are compared whole here).
    """
    base = read.pte.segment_base_offset
    if not base or read.pte.ptd_files or new.size < base or source.size < base:
        return False
    head = source.read(0, base, "program")
    places = _places(read, head)
    if places is None:
        return False
    new_head = new.read(0, base, "program")
    if not _same_but_numbers(head, new_head, places):
        return False
    before = _Layout(read, head, places, source.size)
    after = _Layout(read, new_head, places, new.size)
    if not after.valid():
        return False
    ranges = _ranges(read, before, after, key_sizes)
    if ranges is None:
        return False
    return all(_same(source, a, new, b, n) for a, b, n in ranges)


def _same(source: ByteSource, a: int, new: ByteSource, b: int, nbytes: int) -> bool:
    """Equal bytes at `a` of `source` and `b` of `new`: at once where both are the same
    range of one part (a segment the rewrite kept as it was), else `same_span`'s."""
    if nbytes:
        i, start, count = next(source.spans(a, nbytes))
        j, new_start, new_count = next(new.spans(b, nbytes))
        if count == new_count == nbytes and start == new_start:
            if source.parts[i] is new.parts[j]:
                return True
    return same_span(StoredSpan(source, a, nbytes), StoredSpan(new, b, nbytes))
