"""Read `.pte` and `.ptd` files cheaply: headers, program flatbuffer, segment table.

Nothing here imports torch or `executorch.exir` (seconds to import): the program
flatbuffer is read with code generated from ExecuTorch's schema
(`emitter_filter._program_fbs`), and the fixed-size headers with `struct`.
Segment data is never read, except the header and flatbuffer of XNNPACK
delegate blobs, to learn which named-data keys each delegate uses; `StoredSpan`
reads an entry's bytes later, only when `audit` asks (to find duplicates).

`read_pte` returns a `PteFile`: the program's `PlanRefs` for
`reachability.find_live`, and for each data space the size and location of every
entry. Every offset and index is checked against the file before it is returned,
so callers never see a reference that points outside it.
`classify_file_named_data` applies the hook's named-data rules to it, for both
`audit` and `prune`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from emitter_filter._program_fbs.executorch_flatbuffer.DataLocation import DataLocation
from emitter_filter._program_fbs.executorch_flatbuffer.InstructionArguments import (
    InstructionArguments,
)
from emitter_filter._program_fbs.executorch_flatbuffer.KernelTypes import KernelTypes
from emitter_filter._program_fbs.executorch_flatbuffer.Program import ProgramT
from emitter_filter._program_fbs.executorch_flatbuffer.ScalarType import ScalarType
from emitter_filter._program_fbs.executorch_flatbuffer.TensorDataLocation import (
    TensorDataLocation,
)
from emitter_filter._program_fbs.flat_tensor_flatbuffer.FlatTensor import FlatTensorT
from emitter_filter.delegates import (
    XNN_HEADER_SIZE,
    XNNPACK_BACKEND_ID,
    xnnpack_flatbuffer_span,
    xnnpack_named_keys,
)
from emitter_filter.errors import ProgramFormatError, PteFormatError
from emitter_filter.ondisk.layout import (
    EH,
    EH_MAGIC,
    EH_MINIMUM_LENGTH,
    EH_OFFSET,
    EH_SEGMENT_DATA_SIZE,
    FH,
    FH_MAGIC,
    FLAT_TENSOR_IDENTIFIER,
    NUM_HEAD_BYTES,
    PROGRAM_IDENTIFIER,
)
from emitter_filter.regular_files import open_regular_input
from emitter_filter.named_keys import DelegateRef, NamedDataUse, classify_named_keys
from emitter_filter.reachability import (
    DataRef,
    DataSpace,
    PlanRefs,
    classify_tensor_data,
    is_attribute_root,
)

__all__ = [
    "ByteSource",
    "StoredSpan",
    "Segment",
    "TensorEntry",
    "DataEntry",
    "NamedData",
    "DelegateData",
    "PtdFile",
    "PteFile",
    "read_ptd",
    "read_ptd_flat_tensor",
    "read_pte",
    "read_pte_program",
    "classify_file_named_data",
]

logger = logging.getLogger(__name__)

# Bytes per read when hashing stored data: bounds memory whatever the entry's size.
_HASH_CHUNK = 1 << 20
# flat_tensor.fbs has three FlatTensor fields; the layout of ExecuTorch 0.6
# (early 2025, same identifier and version) had five: tensor_alignment and
# tensors before segments and named_data.
_FLAT_TENSOR_FIELDS = 3
_FLAT_TENSOR_VERSION = 0  # _FLAT_TENSOR_VERSION in serialize.py: the newest the runtime loads

# Bytes per element for each ScalarType, as the runtime's elementSize() has them.
_ELEMENT_SIZE = {
    ScalarType.BYTE: 1, ScalarType.CHAR: 1, ScalarType.SHORT: 2, ScalarType.INT: 4,
    ScalarType.LONG: 8, ScalarType.HALF: 2, ScalarType.FLOAT: 4, ScalarType.DOUBLE: 8,
    ScalarType.BOOL: 1, ScalarType.QINT8: 1, ScalarType.QUINT8: 1, ScalarType.QINT32: 4,
    ScalarType.BFLOAT16: 2, ScalarType.QUINT4X2: 1, ScalarType.QUINT2X4: 1,
    ScalarType.BITS16: 2, ScalarType.FLOAT8E5M2: 1, ScalarType.FLOAT8E4M3FN: 1,
    ScalarType.FLOAT8E5M2FNUZ: 1, ScalarType.FLOAT8E4M3FNUZ: 1, ScalarType.UINT16: 2,
    ScalarType.UINT32: 4, ScalarType.UINT64: 8,
}
_SCALAR_TYPE_NAMES = {
    value: name for name, value in vars(ScalarType).items() if not name.startswith("_")
}


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


class ByteSource:
    """Random access to a file or a bytes object, reading only what is asked for.

    A context manager: the file is closed on exit. `name` is the name `read_pte`
    gives the file (its path, or "<bytes>").
    """

    def __init__(self, source: str | os.PathLike | bytes) -> None:
        if isinstance(source, (bytes, bytearray, memoryview)):
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
        data = os.pread(self._fd, size, offset)
        if len(data) != size:
            raise PteFormatError(self.name, f"short read of {what}", offset)
        return data

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


def table_text(value: bytes | str | None) -> str | None:
    """A generated string field as text. Package-internal (the file side's readers)."""
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def vector_ints(vector) -> list[int]:
    """A generated vector field as a list; the object API leaves absent vectors None.

    Package-internal, like `table_text`: shared by the file side's readers and writers.
    """
    return [] if vector is None else [int(i) for i in vector]


def _check_identifier(source: ByteSource, head: bytes, expected: bytes, kind: str) -> None:
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


def _unpack(source: ByteSource, cls, buffer: bytes, what: str):
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


def _tensor_nbytes(tensor, where: str) -> int | None:
    """numel * element size: what the serializer wrote for a constant tensor."""
    size = _ELEMENT_SIZE.get(tensor.scalarType)
    if size is None:
        return None
    for dim in vector_ints(tensor.sizes):
        if dim < 0:
            raise ProgramFormatError(
                f"{where}: size {dim} < 0 in sizes {vector_ints(tensor.sizes)}"
            )
        size *= dim
    return size


def _plan_refs(plan, tensors: list[TensorEntry]) -> PlanRefs:
    """Describes a generated `ExecutionPlanT` for `find_live`, as `emitted.collect_plan_refs`."""
    name = table_text(plan.name) or ""
    roots: list[int] = [*vector_ints(plan.inputs), *vector_ints(plan.outputs)]
    for chain in plan.chains or ():
        roots.extend(vector_ints(chain.inputs))
        roots.extend(vector_ints(chain.outputs))
        for instruction in chain.instructions or ():
            kind, args = instruction.instrArgsType, instruction.instrArgs
            if args is None:
                # The object API leaves a missing table None: a corrupt or truncated program.
                raise ProgramFormatError(
                    f"plan {name!r}: instruction of kind {kind} has no arguments"
                )
            if kind in (InstructionArguments.KernelCall, InstructionArguments.DelegateCall):
                roots.extend(vector_ints(args.args))
            elif kind == InstructionArguments.MoveCall:
                roots.extend((args.moveFrom, args.moveTo))
            elif kind == InstructionArguments.JumpFalseCall:
                roots.append(args.condValueIndex)
            elif kind == InstructionArguments.FreeCall:
                roots.append(args.valueIndex)
            else:
                raise ProgramFormatError(f"plan {name!r}: unknown instruction kind {kind}")
    list_items: dict[int, Sequence[int]] = {}
    data_refs: dict[int, DataRef] = {}
    for index, evalue in enumerate(plan.values or ()):
        kind, val = evalue.valType, evalue.val
        if val is None and kind != KernelTypes.NONE:
            raise ProgramFormatError(f"plan {name!r}: value {index} of kind {kind} has no table")
        if kind in (KernelTypes.IntList, KernelTypes.TensorList, KernelTypes.OptionalTensorList):
            list_items[index] = vector_ints(val.items)
        elif kind == KernelTypes.Tensor:
            info = val.extraTensorInfo
            fqn = table_text(info.fullyQualifiedName) if info is not None else None
            mutable = val.allocationInfo is not None
            ref = classify_tensor_data(
                val.dataBufferIdx,
                external=info is not None and info.location == TensorDataLocation.EXTERNAL,
                mutable=mutable,
            )
            if ref is not None:
                data_refs[index] = ref
                tensors.append(
                    TensorEntry(
                        plan=name,
                        value_index=index,
                        ref=ref,
                        dtype=_SCALAR_TYPE_NAMES.get(val.scalarType, str(val.scalarType)),
                        shape=tuple(vector_ints(val.sizes)),
                        nbytes=_tensor_nbytes(val, f"plan {name!r} value {index}"),
                        name=fqn,
                    )
                )
            if is_attribute_root(mutable=mutable, fully_qualified_name=fqn):
                roots.append(index)
    return PlanRefs(
        name=name,
        num_values=len(plan.values or ()),
        roots=roots,
        list_items=list_items,
        data_refs=data_refs,
    )


def _read_header(source: ByteSource) -> tuple[int, int, int]:
    """(program size, header length, segment base offset) from the extended header, if any."""
    head = source.read(0, min(NUM_HEAD_BYTES, source.size), "file header")
    _check_identifier(source, head, PROGRAM_IDENTIFIER, "PTE")
    if head[EH_OFFSET : EH_OFFSET + 4] != EH_MAGIC:
        return source.size, 0, 0
    if len(head) < EH_OFFSET + EH.size:
        raise PteFormatError(source.name, "truncated extended header", EH_OFFSET)
    _, length, program_size, segment_base_offset = EH.unpack_from(head, EH_OFFSET)
    if length < EH_MINIMUM_LENGTH:
        raise PteFormatError(
            source.name, f"extended header length {length} < {EH_MINIMUM_LENGTH}", EH_OFFSET + 4
        )
    if not EH_OFFSET + length <= program_size <= source.size:
        raise PteFormatError(
            source.name,
            f"truncated: program size {program_size} > file size {source.size}"
            if program_size > source.size
            else f"program size {program_size} smaller than its header",
            EH_OFFSET + 8,
        )
    if segment_base_offset and not program_size <= segment_base_offset <= source.size:
        raise PteFormatError(
            source.name,
            f"segment base offset {segment_base_offset} outside "
            f"{program_size}..{source.size} (file size)",
            EH_OFFSET + 16,
        )
    if length >= EH_MINIMUM_LENGTH + EH_SEGMENT_DATA_SIZE.size:
        (segment_data_size,) = EH_SEGMENT_DATA_SIZE.unpack_from(head, EH_OFFSET + EH.size)
        if segment_base_offset + segment_data_size > source.size:
            raise PteFormatError(
                source.name,
                f"truncated: segment data ends at {segment_base_offset + segment_data_size}, "
                f"file has {source.size} bytes",
                EH_OFFSET + EH.size,
            )
    return program_size, length, segment_base_offset


def _read_segments(source: ByteSource, program, base: int) -> tuple[Segment, ...]:
    segments = []
    for index, segment in enumerate(program.segments or ()):
        offset = base + segment.offset
        # Without an extended header the serializer still lists empty segments.
        if segment.size and not base:
            raise PteFormatError(
                source.name, f"segment {index} has data but the file has no extended header"
            )
        if offset + segment.size > source.size:
            raise PteFormatError(
                source.name,
                f"segment {index} (offset {segment.offset}, size {segment.size}) ends at "
                f"{offset + segment.size}, outside the file ({source.size} bytes)",
                offset,
            )
        segments.append(Segment(index, offset, segment.size))
    return tuple(segments)


def _segment(source: ByteSource, segments: Sequence[Segment], index: int, what: str) -> Segment:
    if not 0 <= index < len(segments):
        raise PteFormatError(
            source.name, f"{what}: segment index {index} >= len(segments) {len(segments)}"
        )
    return segments[index]


def _subsegment_entries(
    source: ByteSource,
    space: DataSpace,
    segment: Segment,
    offsets: Sequence[int],
    nbytes: Mapping[int, int],
) -> dict[int, DataEntry]:
    """Entries of a constant or mutable subsegment; `nbytes` by index where a tensor says."""
    entries = {}
    for index, start in enumerate(offsets):
        end = offsets[index + 1] if index + 1 < len(offsets) else segment.size
        if not start <= end <= segment.size:
            raise PteFormatError(
                source.name,
                f"{space.value} entry {index}: offsets {start}..{end} outside its segment "
                f"{segment.index} (size {segment.size})",
                segment.offset + start,
            )
        size = nbytes.get(index, end - start)
        if start + size > segment.size:
            raise PteFormatError(
                source.name,
                f"{space.value} entry {index}: {size} bytes at {start} overflow segment "
                f"{segment.index} (size {segment.size})",
                segment.offset + start,
            )
        entries[index] = DataEntry(DataRef(space, index), size, source.name, segment.offset + start)
    return entries


def _first_nbytes(tensors: Iterable[TensorEntry], space: DataSpace) -> dict[int, int]:
    sizes: dict[int, int] = {}
    for tensor in tensors:
        if tensor.ref.space is space and tensor.nbytes is not None:
            sizes.setdefault(tensor.ref.index, tensor.nbytes)
    return sizes


def _xnnpack_keys(source: ByteSource, blob_offset: int, blob_size: int, read) -> frozenset[str]:
    """The named-data keys of an XNNPACK blob, reading only its header and flatbuffer."""
    try:
        head = read(0, min(XNN_HEADER_SIZE, blob_size))
        fb_offset, fb_size = xnnpack_flatbuffer_span(head, blob_size)
        return frozenset(xnnpack_named_keys(read(fb_offset, fb_size)))
    except ProgramFormatError as error:
        raise PteFormatError(source.name, f"XNNPACK blob: {error}", blob_offset) from error


def _read_delegates(
    source: ByteSource, program, segments: Sequence[Segment]
) -> tuple[DelegateData, ...]:
    """Each delegate blob once, from every plan's `delegates` (all are initialised at load)."""
    inline = program.backendDelegateData or []
    users: dict[tuple[str, int], list[DelegateRef]] = {}
    for plan in program.executionPlan or ():
        plan_name = table_text(plan.name) or ""
        for number, delegate in enumerate(plan.delegates or ()):
            where = f"plan {plan_name!r} delegate {number}"
            if delegate.processed is None:
                raise PteFormatError(source.name, f"{where}: no processed data reference")
            location, index = delegate.processed.location, delegate.processed.index
            if location == DataLocation.SEGMENT:
                _segment(source, segments, index, where)
                key = ("segment", index)
            elif location == DataLocation.INLINE:
                if not 0 <= index < len(inline):
                    raise PteFormatError(
                        source.name,
                        f"{where}: backend_delegate_data index {index} >= {len(inline)}",
                    )
                key = ("inline", index)
            else:
                raise PteFormatError(source.name, f"{where}: unknown data location {location}")
            users.setdefault(key, []).append(
                DelegateRef(plan_name, number, table_text(delegate.id) or "")
            )
    for index in range(len(inline)):
        users.setdefault(("inline", index), [])

    blobs = []
    for (location, index), refs in users.items():
        if location == "segment":
            segment = segments[index]
            offset, size = segment.offset, segment.size

            def read(start, count, offset=offset):
                return source.read(offset + start, count, "delegate blob")

        else:
            data = bytes(inline[index].data) if inline[index].data is not None else b""
            offset, size = 0, len(data)

            def read(start, count, data=data):
                return data[start : start + count]

        opaque = not refs or any(r.backend_id != XNNPACK_BACKEND_ID for r in refs)
        keys = None if opaque or not size else _xnnpack_keys(source, offset, size, read)
        blobs.append(DelegateData(location, index, size, offset, tuple(refs), keys))
    return tuple(blobs)


def read_ptd(path: str | os.PathLike) -> PtdFile:
    """Reads a `.ptd` file's header and flatbuffer, not its segment data.

    Raises:
        PteFormatError: The file is not a `.ptd`, or an offset points outside it.
    """
    return read_ptd_flat_tensor(path)[0]


def _check_flat_tensor_fields(source: ByteSource, buffer: bytes) -> None:
    """Refuses a FlatTensor whose table has more fields than flat_tensor.fbs.

    The early-2025 schema kept the identifier and version but had
    `tensor_alignment` and `tensors` where `segments` and `named_data` are now,
    so reading it with today's schema would misread every field.
    """
    root = int.from_bytes(buffer[0:4], "little")
    if not 8 <= root <= len(buffer) - 4:
        raise PteFormatError(
            source.name, f"flatbuffer: root offset {root} outside 8..{len(buffer)}", 0
        )
    vtable = root - int.from_bytes(buffer[root : root + 4], "little", signed=True)
    if not 0 <= vtable <= len(buffer) - 4:
        raise PteFormatError(
            source.name, f"flatbuffer: vtable at {vtable} outside the buffer", root
        )
    fields = (int.from_bytes(buffer[vtable : vtable + 2], "little") - 4) // 2
    if fields > _FLAT_TENSOR_FIELDS:
        raise PteFormatError(
            source.name,
            f"FlatTensor table with {fields} fields (flat_tensor.fbs has {_FLAT_TENSOR_FIELDS}): "
            "the .ptd layout of ExecuTorch 0.6 (FlatTensor.tensor_alignment, tensors) "
            "is not supported; export it again with ExecuTorch 0.7 or later",
            vtable,
        )


def read_ptd_flat_tensor(path: str | os.PathLike) -> tuple[PtdFile, FlatTensorT]:
    """`read_ptd`, plus the unpacked `FlatTensor`, for a rewrite."""
    source = ByteSource(path)
    try:
        head = source.read(0, min(NUM_HEAD_BYTES, source.size), "file header")
        _check_identifier(source, head, FLAT_TENSOR_IDENTIFIER, "PTD")
        if len(head) < 8 + FH.size or head[8:12] != FH_MAGIC:
            raise PteFormatError(source.name, f"missing {FH_MAGIC!r} header", 8)
        _, length, fb_offset, fb_size, base, data_size = FH.unpack_from(head, 8)
        if length < FH.size:
            raise PteFormatError(
                source.name, f"{FH_MAGIC!r} header length {length} < {FH.size}", 12
            )
        if fb_offset + fb_size > source.size or base + data_size > source.size:
            raise PteFormatError(
                source.name,
                f"truncated: flatbuffer ends at {fb_offset + fb_size}, segment data at "
                f"{base + data_size}, file has {source.size} bytes",
                16,
            )
        buffer = source.read(0, fb_offset + fb_size, "flatbuffer")
        _check_flat_tensor_fields(source, buffer)
        flat_tensor = _unpack(source, FlatTensorT, buffer, "flatbuffer")
        if flat_tensor.version > _FLAT_TENSOR_VERSION:
            raise PteFormatError(
                source.name,
                f"FlatTensor version {flat_tensor.version} is newer than the supported "
                f"{_FLAT_TENSOR_VERSION}",
                int.from_bytes(buffer[0:4], "little"),
            )
        segments = []
        for index, segment in enumerate(flat_tensor.segments or ()):
            if segment.offset + segment.size > data_size:
                raise PteFormatError(
                    source.name,
                    f"segment {index} (offset {segment.offset}, size {segment.size}) "
                    f"outside segment data ({data_size} bytes)",
                    base + segment.offset,
                )
            segments.append(Segment(index, base + segment.offset, segment.size))
        named: dict[str, NamedData] = {}
        layouts: dict[str, tuple[int, tuple[int, ...]]] = {}
        for entry in flat_tensor.namedData or ():
            key = table_text(entry.key) or ""
            segment = _segment(source, segments, entry.segmentIndex, f"named data {key!r}")
            named[key] = NamedData(
                key, source.name, segment.index, segment.offset, segment.size
            )
            if entry.tensorLayout is not None:
                layout = entry.tensorLayout
                layouts[key] = (layout.scalarType, tuple(vector_ints(layout.sizes)))
        ptd = PtdFile(
            source.name, source.size, named, layouts, fb_offset + fb_size, base, tuple(segments)
        )
        return ptd, flat_tensor
    finally:
        source.close()


def _external_entries(
    pte: str, tensors: Sequence[TensorEntry], ptds: Sequence[PtdFile]
) -> tuple[dict[int, DataEntry], set[str]]:
    """External entries by index, sized from the `.ptd` files when given, else from the tensors."""
    by_key = {key: (ptd, entry) for ptd in ptds for key, entry in ptd.named_data.items()}
    entries: dict[int, DataEntry] = {}
    used_keys: set[str] = set()
    for tensor in tensors:
        if tensor.ref.space is not DataSpace.EXTERNAL:
            continue
        if tensor.name is None:
            raise ProgramFormatError(
                f"{pte}: plan {tensor.plan!r} value {tensor.value_index}: "
                "external tensor without fully_qualified_name"
            )
        found = by_key.get(tensor.name)
        if ptds and found is None:
            raise PteFormatError(
                pte,
                f"external tensor {tensor.name!r} is in none of "
                f"{', '.join(p.path for p in ptds)}: the .ptd does not match the .pte",
            )
        if found is not None:
            ptd, entry = found
            used_keys.add(tensor.name)
            layout = ptd.layouts.get(tensor.name)
            wrong_size = tensor.nbytes not in (None, entry.nbytes)
            if layout is not None and (layout[1] != tensor.shape or wrong_size):
                raise PteFormatError(
                    ptd.path,
                    f"{tensor.name!r}: shape {list(layout[1])}, {entry.nbytes} bytes; "
                    f"{pte} expects {list(tensor.shape)} {tensor.dtype}: "
                    "the .ptd does not match the .pte",
                    entry.offset,
                )
            data = DataEntry(tensor.ref, entry.nbytes, ptd.path, entry.offset)
        else:
            data = DataEntry(tensor.ref, tensor.nbytes or 0, pte, -1)
        entries.setdefault(tensor.ref.index, data)
    return entries, used_keys


def read_pte(
    source: str | os.PathLike | bytes, ptd_paths: Sequence[str | os.PathLike] = ()
) -> PteFile:
    """Reads a `.pte` file's headers, program flatbuffer and segment table.

    Segment data is not read (only XNNPACK blob headers), so this costs the same
    for a 1 GiB file as for a 1 KiB one.

    Args:
        source: A path, or the file's bytes. Not modified.
        ptd_paths: The `.ptd` files holding its external constants, if any.

    Returns:
        Everything the audit and the prune need, checked against the file.

    Raises:
        PteFormatError: The file is not a `.pte`, is truncated, or points outside itself.
        ProgramFormatError: The program refers to something that does not exist.
    """
    return read_pte_program(source, ptd_paths)[0]


def read_pte_program(
    source: str | os.PathLike | bytes, ptd_paths: Sequence[str | os.PathLike] = ()
) -> tuple[PteFile, ProgramT, bytes]:
    """`read_pte`, plus the unpacked program and the file's bytes up to its end, for a rewrite."""
    ptds = tuple(read_ptd(path) for path in ptd_paths)
    reader = ByteSource(source)
    try:
        program_size, header_length, base = _read_header(reader)
        program_data = reader.read(0, program_size, "program flatbuffer")
        program = _unpack(reader, ProgramT, program_data, "program flatbuffer")
        segments = _read_segments(reader, program, base)
        tensors: list[TensorEntry] = []
        try:
            plans = tuple(_plan_refs(plan, tensors) for plan in program.executionPlan or ())
        except ProgramFormatError as error:
            # Name the file: the plan-level checks do not know it.
            raise PteFormatError(reader.name, str(error)) from error

        entries: dict[DataSpace, dict[int, DataEntry]] = {space: {} for space in DataSpace}
        referenced: set[int] = set()
        constant_segment = mutable_segment = None
        offsets = vector_ints(program.constantSegment.offsets) if program.constantSegment else []
        if offsets:
            constant_segment = program.constantSegment.segmentIndex
            segment = _segment(reader, segments, constant_segment, "constant_segment")
            entries[DataSpace.CONSTANT] = _subsegment_entries(
                reader, DataSpace.CONSTANT, segment, offsets,
                _first_nbytes(tensors, DataSpace.CONSTANT),
            )
        elif any(len(vector_ints(b.storage)) for b in program.constantBuffer or ()):
            # Only the empty placeholder entry is a program without constants: accepted.
            raise PteFormatError(
                reader.name,
                "constants inline in Program.constant_buffer (the deprecated layout) "
                "are not supported",
            )
        if program.mutableDataSegments:
            mutable = program.mutableDataSegments[0]
            mutable_segment = mutable.segmentIndex
            segment = _segment(reader, segments, mutable_segment, "mutable_data_segments[0]")
            entries[DataSpace.MUTABLE] = _subsegment_entries(
                reader, DataSpace.MUTABLE, segment, vector_ints(mutable.offsets),
                _first_nbytes(tensors, DataSpace.MUTABLE),
            )
        for tensor in tensors:
            space = entries[tensor.ref.space]
            if tensor.ref.space is not DataSpace.EXTERNAL and tensor.ref.index not in space:
                raise ProgramFormatError(
                    f"{reader.name}: plan {tensor.plan!r} value {tensor.value_index}: "
                    f"data_buffer_idx {tensor.ref.index} >= len({tensor.ref.space.value} "
                    f"data) {len(space)}"
                )
        entries[DataSpace.EXTERNAL], used_keys = _external_entries(reader.name, tensors, ptds)
        referenced.update(i for i in (constant_segment, mutable_segment) if i is not None)

        named_data = []
        for entry in program.namedData or ():
            key = table_text(entry.key) or ""
            segment = _segment(reader, segments, entry.segmentIndex, f"named data {key!r}")
            referenced.add(segment.index)
            named_data.append(
                NamedData(key, reader.name, segment.index, segment.offset, segment.size)
            )
        for ptd in ptds:
            named_data.extend(e for k, e in ptd.named_data.items() if k not in used_keys)

        delegates = _read_delegates(reader, program, segments)
        referenced.update(d.index for d in delegates if d.location == "segment")
        return PteFile(
            path=reader.name,
            file_bytes=reader.size,
            program_size=program_size,
            header_length=header_length,
            segment_base_offset=base,
            segments=segments,
            plans=plans,
            tensors=tuple(tensors),
            entries=entries,
            constant_segment=constant_segment,
            mutable_segment=mutable_segment,
            named_data=tuple(named_data),
            delegates=delegates,
            unreferenced_segments=tuple(s for s in segments if s.index not in referenced),
            ptd_files=ptds,
        ), program, program_data
    finally:
        reader.close()


def classify_file_named_data(pte: PteFile) -> NamedDataUse:
    """Which named-data keys of a file its delegates can reach: the hook's rules, on disk.

    The roots are every plan's `delegates` entries (`named_data` module
    docstring); the keys are `pte.named_data` less the external constants'
    fully qualified names, which are tensor data, not named data. `audit` counts
    and `prune` drops exactly `dead`.

    Args:
        pte: What `read_pte` returned. Not modified.
    """
    plan_position = {plan.name: position for position, plan in enumerate(pte.plans)}
    uses = sorted(
        ((ref, blob.named_keys) for blob in pte.delegates for ref in blob.users),
        key=lambda use: (plan_position[use[0].plan], use[0].index),
    )
    external_fqns = {t.name for t in pte.tensors if t.ref.space is DataSpace.EXTERNAL}
    return classify_named_keys(
        [(ref, None if keys is None else tuple(sorted(keys))) for ref, keys in uses],
        [entry.key for entry in pte.named_data if entry.key not in external_fqns],
    )
