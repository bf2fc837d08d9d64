"""What the on-disk readers learn about a `.pte` or `.ptd` file: plain frozen records.

`read_pte.read_pte` returns a `PteFile`, `read_ptd.read_ptd` a `PtdFile`; every offset in
them is absolute in its file and already checked against it. `segment_at` is the one
bounds check of a segment index, for both readers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from emitter_filter.errors import PteFormatError
from emitter_filter.program.named_keys import DelegateRef
from emitter_filter.program.reachability import DataRef, DataSpace, PlanRefs

__all__ = [
    "Segment",
    "TensorEntry",
    "DataEntry",
    "NamedData",
    "DelegateData",
    "PtdFile",
    "PteFile",
    "segment_at",
]


@dataclass(frozen=True)
class Segment:
    """One entry of `Program.segments`, with its absolute position in the file."""

    index: int
    offset: int
    size: int


@dataclass(frozen=True)
class TensorEntry:
    """One Tensor value that has data, and where its data lives."""

    plan: str
    value_index: int
    ref: DataRef
    dtype: str
    shape: tuple[int, ...]
    nbytes: int | None
    name: str | None


@dataclass(frozen=True)
class DataEntry:
    """One entry of a data space: `ref.space[ref.index]`.

    `offset` is absolute in `file`; `nbytes` is the tensor's size where a tensor
    refers to the entry (what the serializer wrote), else the span up to the next
    entry, padding included.
    """

    ref: DataRef
    nbytes: int
    file: str
    offset: int


@dataclass(frozen=True)
class NamedData:
    """One entry of `Program.named_data` (`.pte`) or `FlatTensor.named_data` (`.ptd`), located."""

    key: str
    file: str
    segment_index: int
    offset: int
    nbytes: int


@dataclass(frozen=True)
class DelegateData:
    """One delegate blob of `backend_delegate_data` or `segments`, and its users.

    `users` are the plans' `delegates` entries that refer to it, in plan order;
    `named_keys` are the named-data keys the blob uses, or None when a user's
    backend format is opaque to us (anything but XNNPACK).
    """

    location: str
    index: int
    nbytes: int
    offset: int
    users: tuple[DelegateRef, ...]
    named_keys: frozenset[str] | None


@dataclass(frozen=True)
class PtdFile:
    """A `.ptd` file: its named blobs, with tensor layouts where it has them.

    `flatbuffer_end` is where the header and FlatTensor flatbuffer end,
    `segment_base_offset` where the segment data starts, `segments` are
    `FlatTensor.segments` with absolute offsets.
    """

    path: str
    file_bytes: int
    named_data: Mapping[str, NamedData]
    layouts: Mapping[str, tuple[int, tuple[int, ...]]]
    flatbuffer_end: int
    segment_base_offset: int
    segments: tuple[Segment, ...]


@dataclass(frozen=True)
class PteFile:
    """What `read_pte` learned about a `.pte` file and its `.ptd` files.

    Attributes:
        path: The file's path, or "<bytes>".
        file_bytes: Its size.
        program_size: Bytes of the program flatbuffer, extended header included.
        header_length: The extended header's length field; 0 when there is none.
        segment_base_offset: Where segment data starts; 0 when there is none.
        segments: `Program.segments`, with absolute offsets.
        plans: One `PlanRefs` per execution plan, for `find_live`.
        tensors: Every Tensor value with data, in plan then value order.
        entries: Per data space, its entries by index (placeholders included).
        constant_segment: Index of the constant segment in `segments`, if any.
        mutable_segment: Index of the mutable data segment in `segments`, if any.
        named_data: `Program.named_data`, then each `.ptd`'s keys that no tensor uses.
        delegates: Each delegate blob once, with the backends that use it.
        unreferenced_segments: Segments no field of the program refers to.
        ptd_files: The `.ptd` files read with it.
    """

    path: str
    file_bytes: int
    program_size: int
    header_length: int
    segment_base_offset: int
    segments: tuple[Segment, ...]
    plans: tuple[PlanRefs, ...]
    tensors: tuple[TensorEntry, ...]
    entries: Mapping[DataSpace, Mapping[int, DataEntry]]
    constant_segment: int | None
    mutable_segment: int | None
    named_data: tuple[NamedData, ...]
    delegates: tuple[DelegateData, ...]
    unreferenced_segments: tuple[Segment, ...]
    ptd_files: tuple[PtdFile, ...]


def segment_at(file: str, segments: Sequence[Segment], index: int, what: str) -> Segment:
    """`segments[index]`, or a `PteFormatError` naming `what` refers to it and the limit."""
    if not 0 <= index < len(segments):
        raise PteFormatError(
            file, f"{what}: segment index {index} >= len(segments) {len(segments)}"
        )
    return segments[index]
