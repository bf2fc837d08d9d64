"""Read a `.pte` file cheaply: headers, program flatbuffer, segment table.

Nothing here imports torch or `executorch.exir` (seconds to import): the program
flatbuffer is read by `flatbuffer_tables` from ExecuTorch's schema
(`fbs_schemas.PROGRAM`), and the fixed-size headers with `struct`.
Segment data is never read, except the header and graph of the delegate blobs
`delegates` reads (XNNPACK, Vulkan, Core ML references), to learn which
named-data keys each delegate uses; `StoredSpan`
reads an entry's bytes later, only when `audit` asks (to find duplicates).

`read_pte` returns a `PteFile`: the program's `PlanRefs` for
`reachability.find_live`, and for each data space the size and location of every
entry. Every offset and index is checked against the file before it is returned,
so callers never see a reference that points outside it. `read_pte_program` adds
what a rewrite needs: the decoded program and its flatbuffer bytes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from emitter_filter._program_fbs.executorch_flatbuffer.DataLocation import DataLocation
from emitter_filter.delegates import blob_format
from emitter_filter.errors import ProgramFormatError, PteFormatError
from emitter_filter.ondisk.read.byte_source import ByteSource, check_identifier, read_root
from emitter_filter.ondisk.read.file_headers import (
    EH,
    EH_MAGIC,
    EH_MINIMUM_LENGTH,
    EH_OFFSET,
    EH_SEGMENT_DATA_SIZE,
    NUM_HEAD_BYTES,
    PROGRAM_IDENTIFIER,
)
from emitter_filter.ondisk.read.file_model import (
    DataEntry,
    DelegateData,
    NamedData,
    PtdFile,
    PteFile,
    Segment,
    TensorEntry,
    segment_at,
)
from emitter_filter.ondisk.read.read_ptd import read_ptd
from emitter_filter.program.fbs_schemas import PROGRAM
from emitter_filter.program.flatbuffer_tables import Table
from emitter_filter.program.generated_fields import table_text, vector_ints
from emitter_filter.program.named_keys import DelegateRef
from emitter_filter.program.object_models import GENERATED
from emitter_filter.program.plan_indices import check_data_refs, collect_plan_refs
from emitter_filter.program.reachability import DataRef, DataSpace, PlanRefs
from emitter_filter.program.scalar_types import SCALAR_TYPE_NAMES, tensor_nbytes

__all__ = ["PteProgram", "check_program_header", "read_pte", "read_pte_program"]


@dataclass(frozen=True)
class PteProgram:
    """What a rewrite of a `.pte` needs: `read_pte`'s result, the decoded program, its bytes.

    Attributes:
        pte: What `read_pte` returns.
        program: The decoded `Program` (`fbs_schemas.PROGRAM`: the object API's names),
            to read, or to modify and pack again (`layout.pack_program`).
        program_data: The file's bytes up to the end of the program flatbuffer
            (extended header included).
    """

    pte: PteFile
    program: Table
    program_data: bytes


def _plan_refs(plan, tensors: list[TensorEntry]) -> PlanRefs:
    """`plan_indices.collect_plan_refs` of a decoded `ExecutionPlan`; notes its tensors."""
    name = table_text(plan.name) or ""

    def found(index: int, tensor, ref: DataRef, fqn: str | None) -> None:
        tensors.append(
            TensorEntry(
                plan=name,
                value_index=index,
                ref=ref,
                dtype=SCALAR_TYPE_NAMES.get(tensor.scalarType, str(tensor.scalarType)),
                shape=tuple(vector_ints(tensor.sizes)),
                nbytes=tensor_nbytes(tensor, f"plan {name!r} value {index}"),
                name=fqn,
            )
        )

    return collect_plan_refs(GENERATED, plan, on_tensor=found)


def check_program_header(path: str) -> None:
    """Refuses a file that is not a program (a `.ptd`, say) in one line, before a runtime is
    asked to load it (the pybindings say only `Program identifier 'FT01' != expected`)."""
    with ByteSource(path) as source:
        _read_header(source)


def _read_header(source: ByteSource) -> tuple[int, int, int]:
    """(program size, header length, segment base offset) from the extended header, if any."""
    head = source.read(0, min(NUM_HEAD_BYTES, source.size), "file header")
    check_identifier(source, head, PROGRAM_IDENTIFIER, "PTE")
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


def _blob_keys(
    source: ByteSource, refs: Sequence[DelegateRef], blob_offset: int, blob_size: int, read
) -> frozenset[str] | None:
    """The named-data keys a blob reads, reading only its header and graph; None when
    it may read any (no caller, callers of two backends, or a backend not read here)."""
    backends = {r.backend_id for r in refs}
    if len(backends) != 1 or not blob_size:
        return None
    found = blob_format(backends.pop())
    if found is None:
        return None
    try:
        keys = found.named_keys(found.read_graph(read, blob_size))
    except ProgramFormatError as error:
        raise PteFormatError(source.name, f"{found.name} blob: {error}", blob_offset) from error
    return None if keys is None else frozenset(keys)


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
                segment_at(source.name, segments, index, where)
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

        keys = _blob_keys(source, refs, offset, size, read)
        blobs.append(DelegateData(location, index, size, offset, tuple(refs), keys))
    return tuple(blobs)


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

    Segment data is not read (only delegate blob headers and graphs), so this costs the same
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
    return read_pte_program(source, ptd_paths).pte


def _subsegment(
    reader: ByteSource, segments, subsegment, space: DataSpace, what: str, tensors
) -> tuple[int, dict[int, DataEntry]]:
    """(segment index, entries) of the constant or mutable data subsegment `subsegment`."""
    index = subsegment.segmentIndex
    segment = segment_at(reader.name, segments, index, what)
    entries = _subsegment_entries(
        reader, space, segment, vector_ints(subsegment.offsets), _first_nbytes(tensors, space)
    )
    return index, entries


def _tensor_data_entries(
    reader: ByteSource, program, segments, tensors
) -> tuple[dict[DataSpace, dict[int, DataEntry]], int | None, int | None]:
    """(entries per space, constant segment index, mutable segment index), external left empty."""
    entries: dict[DataSpace, dict[int, DataEntry]] = {space: {} for space in DataSpace}
    constant_segment = mutable_segment = None
    if program.constantSegment is not None and vector_ints(program.constantSegment.offsets):
        constant_segment, entries[DataSpace.CONSTANT] = _subsegment(
            reader,
            segments,
            program.constantSegment,
            DataSpace.CONSTANT,
            "constant_segment",
            tensors,
        )
    elif any(len(vector_ints(b.storage)) for b in program.constantBuffer or ()):
        # Only the empty placeholder entry is a program without constants: accepted.
        raise PteFormatError(
            reader.name,
            "constants inline in Program.constant_buffer: relies on the constant_buffer "
            "path, which ExecuTorch's runtime refuses (ET_ENABLE_DEPRECATED_CONSTANT_BUFFER=0); "
            "export the program again",
        )
    if program.mutableDataSegments:
        mutable_segment, entries[DataSpace.MUTABLE] = _subsegment(
            reader,
            segments,
            program.mutableDataSegments[0],
            DataSpace.MUTABLE,
            "mutable_data_segments[0]",
            tensors,
        )
    return entries, constant_segment, mutable_segment


def _named_data(
    reader: ByteSource, program, segments, ptds: Sequence[PtdFile], used_keys: set[str]
) -> tuple[NamedData, ...]:
    """`Program.named_data`, located, then each `.ptd`'s keys that no tensor uses."""
    named_data = []
    for entry in program.namedData or ():
        key = table_text(entry.key) or ""
        segment = segment_at(reader.name, segments, entry.segmentIndex, f"named data {key!r}")
        named_data.append(NamedData(key, reader.name, segment.index, segment.offset, segment.size))
    for ptd in ptds:
        named_data.extend(e for k, e in ptd.named_data.items() if k not in used_keys)
    return tuple(named_data)


def read_pte_program(
    source: str | os.PathLike | bytes | ByteSource,
    ptd_paths: Sequence[str | os.PathLike | ByteSource] = (),
) -> PteProgram:
    """`read_pte`, plus the decoded program and its flatbuffer's bytes, for a rewrite.

    `source` may be an open `ByteSource` (the caller's: not closed here).
    """
    ptds = tuple(read_ptd(path) for path in ptd_paths)
    reader = source if isinstance(source, ByteSource) else ByteSource(source)
    try:
        program_size, header_length, base = _read_header(reader)
        program_data = reader.read(0, program_size, "program flatbuffer")
        program = read_root(reader, PROGRAM, program_data, "program flatbuffer")
        segments = _read_segments(reader, program, base)
        tensors: list[TensorEntry] = []
        try:
            plans = tuple(_plan_refs(plan, tensors) for plan in program.executionPlan or ())
        except ProgramFormatError as error:
            # Name the file: the plan-level checks do not know it.
            raise PteFormatError(reader.name, str(error)) from error
        entries, constant_segment, mutable_segment = _tensor_data_entries(
            reader, program, segments, tensors
        )
        check_data_refs(
            plans,
            {space: len(entries[space]) for space in (DataSpace.CONSTANT, DataSpace.MUTABLE)},
            reader.name,
        )
        entries[DataSpace.EXTERNAL], used_keys = _external_entries(reader.name, tensors, ptds)
        named_data = _named_data(reader, program, segments, ptds, used_keys)
        delegates = _read_delegates(reader, program, segments)
        referenced = {i for i in (constant_segment, mutable_segment) if i is not None}
        referenced.update(e.segment_index for e in named_data if e.file == reader.name)
        referenced.update(d.index for d in delegates if d.location == "segment")
        pte = PteFile(
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
            named_data=named_data,
            delegates=delegates,
            unreferenced_segments=tuple(s for s in segments if s.index not in referenced),
            ptd_files=ptds,
        )
        return PteProgram(pte, program, program_data)
    finally:
        if reader is not source:
            reader.close()
