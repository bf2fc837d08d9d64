"""The blobs of a set of programs: each place an input stores bytes `share` may move or point at.

A blob is a constant-segment entry of a `.pte` that a live value reads, a named-data
segment of a `.pte` a delegate may read, or a segment of an input `.ptd`
(`share_find` groups them by content).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from emitter_filter.ondisk.read.file_model import PtdFile
from emitter_filter.program.generated_fields import table_text, vector_ints
from emitter_filter.program.reachability import DataSpace

if TYPE_CHECKING:
    from emitter_filter.ondisk.analyse.analysis import FileAnalysis
    from emitter_filter.ondisk.read.layout import PteLayout
    from emitter_filter.ondisk.read.read_pte import PteProgram

__all__ = ["StoredBlob", "TensorLayoutKey", "constant_tensor_layouts", "program_blobs", "ptd_blobs"]


@dataclass(frozen=True)
class StoredBlob:
    """One place an input stores some bytes.

    Attributes:
        kind: "constant" (entry `index` of a `.pte`'s constant segment),
            "named_data" (segment `index` of a `.pte`) or "external" (segment
            `index` of a `.ptd`).
        file: The file that stores it.
        index: As `kind` says.
        offset: Absolute offset in `file`.
        nbytes: Its length (a constant's: its tensor's size).
        keys: The named-data keys at that segment (none for a constant).
        program: The input program that stores it; None for a `.ptd` segment.
        alignment: The alignment it has where it is (what the shared `.ptd` keeps).
    """

    kind: str
    file: str
    index: int
    offset: int
    nbytes: int
    keys: tuple[str, ...]
    program: int | None
    alignment: int


@dataclass(frozen=True)
class TensorLayoutKey:
    """What the runtime compares for an external constant: `FlatTensor`'s `TensorLayout`."""

    scalar_type: int
    sizes: tuple[int, ...]
    dim_order: tuple[int, ...]


def constant_tensor_layouts(
    read: PteProgram,
) -> dict[int, list[tuple[TensorLayoutKey, str | None]]]:
    """For each constant entry, the layout and FQN of each tensor that reads it."""
    plans = {table_text(p.name) or "": p for p in read.program.executionPlan or ()}
    layouts: dict[int, list[tuple[TensorLayoutKey, str | None]]] = {}
    for tensor in read.pte.tensors:
        if tensor.ref.space is not DataSpace.CONSTANT:
            continue
        value = plans[tensor.plan].values[tensor.value_index].val
        layout = TensorLayoutKey(
            int(value.scalarType),
            tuple(vector_ints(value.sizes)),
            tuple(vector_ints(value.dimOrder)),
        )
        layouts.setdefault(tensor.ref.index, []).append((layout, tensor.name))
    return layouts


def program_blobs(
    number: int, read: PteProgram, layout: PteLayout | None, analysis: FileAnalysis
) -> Iterator[StoredBlob]:
    """The constants live values read, then the `.pte`'s own named-data segments a
    delegate may read."""
    pte = read.pte
    read_data = analysis.liveness.live_data[DataSpace.CONSTANT]
    for index, entry in sorted(pte.entries[DataSpace.CONSTANT].items()):
        if index and entry.nbytes and index in read_data:
            yield StoredBlob(
                "constant",
                pte.path,
                index,
                entry.offset,
                entry.nbytes,
                (),
                number,
                1 if layout is None else layout.tensor_alignment,
            )
    keys: dict[int, list[str]] = {}
    for named in pte.named_data:
        if named.file == pte.path:
            keys.setdefault(named.segment_index, []).append(named.key)
    dead_keys = frozenset(analysis.use.dead)
    for index, names in keys.items():
        segment = pte.segments[index]
        unread = all(name in dead_keys for name in names)
        if segment.size and not unread and index not in (pte.constant_segment, pte.mutable_segment):
            yield StoredBlob(
                "named_data",
                pte.path,
                index,
                segment.offset,
                segment.size,
                tuple(names),
                number,
                1 if layout is None else layout.segment_alignments[index],
            )


def ptd_blobs(ptd: PtdFile, alignments: Sequence[int] | None) -> Iterator[StoredBlob]:
    """Each non-empty segment of an input `.ptd`, with all its keys."""
    keys: dict[int, list[str]] = {}
    for key, named in ptd.named_data.items():
        keys.setdefault(named.segment_index, []).append(key)
    for index, names in keys.items():
        segment = ptd.segments[index]
        if segment.size:
            yield StoredBlob(
                "external",
                ptd.path,
                index,
                segment.offset,
                segment.size,
                tuple(names),
                None,
                1 if alignments is None else alignments[index],
            )
