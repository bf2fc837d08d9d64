"""What several programs store in common: the analysis behind `share`.

A blob is one place an input stores bytes `share` may move or point at: a
constant-segment entry of a `.pte`, a named-data segment of a `.pte`, or a
segment of an input `.ptd`. Blobs are grouped by content as `audit` groups
duplicates (`duplicates.group_duplicates`: length, first bytes, then sha256,
each read in chunks), and a content is *shared* when it is stored in two or
more files, is at least `min_bytes` long, and a program stores a copy that can
move to the shared `.ptd`:

    A.pte  [constant: P W1 H1 | named: k1]      out/A.pte [constant: P H1]
    B.pte  [constant: P W1 H2 | named: k1]  ->  out/B.pte [constant: P H2]
                                                out/shared.ptd [W1 as key1 | k1]

Never moved: mutable data (copied into the arena at load), delegate blobs,
constants under a `fully_qualified_name` (the attribute API reads them by that
name; a new key would rename them), a content stored in one file only
(`dedupe` stores repeats inside one `.pte`), and what no program reads (a constant
no live value refers to, named data no delegate can reach: `analysis`'s rules):
it stays where it was, dead, for `prune` to drop.

Keys: a moved constant gets `constant_key`, derived from its content and its
tensor layout, so equal keys mean equal bytes and an equal layout in every
program (the runtime checks the layout of each external constant against the
`.ptd`'s). Named data keep their keys (delegate blobs name them). One key with
different bytes in two inputs cannot be loaded from one `.ptd` and is refused
(`_check_keys`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from emitter_filter.duplicates import StoredCopy, group_duplicates
from emitter_filter.errors import PteFormatError
from emitter_filter.flatbuffer_tables import Table
from emitter_filter.generated_fields import table_text, vector_ints
from emitter_filter.ondisk.analysis import FileAnalysis, analyse_file
from emitter_filter.ondisk.byte_source import ByteSource, StoredSpan, open_sources
from emitter_filter.ondisk.file_model import PtdFile
from emitter_filter.ondisk.layout import PteLayout
from emitter_filter.ondisk.read_ptd import read_ptd_flat_tensor
from emitter_filter.ondisk.read_pte import PteProgram, read_pte_program
from emitter_filter.reachability import DataSpace
from emitter_filter.scalar_types import SCALAR_TYPE_NAMES

__all__ = [
    "StoredBlob",
    "TensorLayoutKey",
    "SharedContent",
    "SharedSet",
    "ProgramSet",
    "constant_key",
    "read_set",
    "find_shared",
    "find_set_shared",
]



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


@dataclass(frozen=True)
class SharedContent:
    """Bytes stored in several input files, which the shared `.ptd` stores once.

    Attributes:
        nbytes: Their length.
        sha256: Their digest, hex.
        copies: Every blob with these bytes, inputs in the order given
            (`.ptd` segments first, then each program's constants and named data).
    """

    nbytes: int
    sha256: str
    copies: tuple[StoredBlob, ...]

    @property
    def alignment(self) -> int:
        """The largest alignment any copy has: the shared `.ptd` keeps it for all."""
        return max(c.alignment for c in self.copies)

    @property
    def saved_bytes(self) -> int:
        """Bytes no longer stored: one copy per file less one."""
        return self.nbytes * (len({c.file for c in self.copies}) - 1)


@dataclass(frozen=True)
class SharedSet:
    """What `share` moves: `find_shared`'s result.

    Attributes:
        shared: The shared contents, in order of their first copy.
        constant_keys: For each moved constant, (program, entry index), the key
            of each tensor layout its tensors have.
        moved_keys: Per program, the named-data keys of its `.pte` that move.
        content_of: For each blob in a group of equal contents, the group's
            number (equal numbers: equal bytes); absent for a unique blob.
        dead_bytes: Per program, the bytes of its `.pte` no plan reads
            (`analysis.ByteCount`): never moved, so left dead where they are.
    """

    shared: tuple[SharedContent, ...]
    constant_keys: Mapping[tuple[int, int], Mapping[TensorLayoutKey, str]]
    moved_keys: Mapping[int, frozenset[str]]
    content_of: Mapping[StoredBlob, int]
    dead_bytes: tuple[int, ...] = ()


@dataclass(frozen=True)
class ProgramSet:
    """The inputs of `share` (and of a set's audit), read.

    Attributes:
        reads: Each program, read with every `.ptd` (any of them may hold its keys).
        ptds: Each `.ptd` and its unpacked `FlatTensor`.
        layouts: The layout each program was written with (`layout.read_pte_layout`, read
            by `share` before anything changes), for the alignments; None when
            only the contents matter (the audit).
        ptd_alignments: Each `.ptd` segment's own alignment, per `.ptd`; None as `layouts`.
    """

    reads: tuple[PteProgram, ...]
    ptds: tuple[tuple[PtdFile, Table], ...]
    layouts: tuple[PteLayout, ...] | None = None
    ptd_alignments: tuple[tuple[int, ...], ...] | None = None


def read_set(ptes: Sequence[str], ptd_paths: Sequence[str]) -> ProgramSet:
    """Reads every program and every `.ptd`; refuses external tensors without a `.ptd`."""
    reads = tuple(read_pte_program(path, ptd_paths) for path in ptes)
    for read in reads:
        external = [t for t in read.pte.tensors if t.ref.space is DataSpace.EXTERNAL]
        if external and not ptd_paths:
            raise PteFormatError(
                read.pte.path,
                f"{len(external)} external tensors (e.g. {external[0].name!r}) and no .ptd "
                "given: pass the .ptd files the programs load with",
            )
    return ProgramSet(reads, tuple(read_ptd_flat_tensor(path) for path in ptd_paths))


def find_set_shared(programs: ProgramSet, min_bytes: int) -> SharedSet:
    """`find_shared` on a read set, each file opened for the time it takes."""
    paths = [*(p.path for p, _ in programs.ptds), *(r.pte.path for r in programs.reads)]
    alignments = programs.ptd_alignments or [None] * len(programs.ptds)
    with contextlib.ExitStack() as stack:
        sources = open_sources(stack, paths)
        return find_shared(
            programs.reads, programs.layouts,
            [(ptd, own) for (ptd, _), own in zip(programs.ptds, alignments)], sources, min_bytes,
        )


def constant_key(sha256: str, layout: TensorLayoutKey) -> str:
    """The key of a moved constant: its content and tensor layout, readable.

    The prefix keeps it apart from XNNPACK's keys (a bare sha256 of the bytes).
    """
    dtype = SCALAR_TYPE_NAMES.get(layout.scalar_type, str(layout.scalar_type))
    key = f"shared.{sha256[:40]}.{dtype}[{','.join(map(str, layout.sizes))}]"
    if layout.dim_order != tuple(range(len(layout.sizes))):
        key += f".dim_order[{','.join(map(str, layout.dim_order))}]"
    return key


def _tensor_layouts(read: PteProgram) -> dict[int, list[tuple[TensorLayoutKey, str | None]]]:
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


def _program_blobs(
    number: int, read: PteProgram, layout: PteLayout | None, analysis: FileAnalysis
) -> Iterator[StoredBlob]:
    """The constants live values read, then the `.pte`'s own named-data segments a
    delegate may read."""
    pte = read.pte
    read_data = analysis.liveness.live_data[DataSpace.CONSTANT]
    for index, entry in sorted(pte.entries[DataSpace.CONSTANT].items()):
        if index and entry.nbytes and index in read_data:
            yield StoredBlob(
                "constant", pte.path, index, entry.offset, entry.nbytes, (), number,
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
        if segment.size and not unread and index not in (pte.constant_segment,
                                                          pte.mutable_segment):
            yield StoredBlob(
                "named_data", pte.path, index, segment.offset, segment.size, tuple(names),
                number, 1 if layout is None else layout.segment_alignments[index],
            )


def _ptd_blobs(ptd: PtdFile, alignments: Sequence[int] | None) -> Iterator[StoredBlob]:
    keys: dict[int, list[str]] = {}
    for key, named in ptd.named_data.items():
        keys.setdefault(named.segment_index, []).append(key)
    for index, names in keys.items():
        segment = ptd.segments[index]
        if segment.size:
            yield StoredBlob(
                "external", ptd.path, index, segment.offset, segment.size, tuple(names),
                None, 1 if alignments is None else alignments[index],
            )


def _group(blobs: Sequence[StoredBlob], sources: Mapping[str, ByteSource]):
    """Groups the blobs by content: (nbytes, sha256 hex, blobs) per content stored twice or more."""
    by_copy = {
        StoredCopy(b.kind, b.file, b.index, b.keys): b for b in blobs
    }
    groups = group_duplicates(
        (copy, StoredSpan(sources[b.file], b.offset, b.nbytes)) for copy, b in by_copy.items()
    )
    order = {b: position for position, b in enumerate(blobs)}
    found = [
        (g.nbytes, g.sha256, sorted((by_copy[c] for c in g.copies), key=order.__getitem__))
        for g in groups
    ]
    found.sort(key=lambda item: order[item[2][0]])
    return found


def _movable(
    blob: StoredBlob, layouts: Mapping[int, Mapping[int, list[tuple[TensorLayoutKey, str | None]]]]
) -> bool:
    if blob.kind == "named_data":
        return True
    if blob.kind == "constant":
        return all(name is None for _, name in layouts[blob.program][blob.index])
    return False


def find_shared(
    reads: Sequence[PteProgram],
    layouts: Sequence[PteLayout] | None,
    ptds: Sequence[tuple[PtdFile, Sequence[int] | None]],
    sources: Mapping[str, ByteSource],
    min_bytes: int,
) -> SharedSet:
    """Finds the contents several input files store, and the keys the moved ones get.

    Args:
        reads: Each input program, as `read_pte_program` read it. Not modified.
        layouts: Each program's layout (`layout.read_pte_layout`), for the alignments;
            None: every alignment counts as 1.
        ptds: Each input `.ptd` with the own alignment of each of its segments (or None).
        sources: An open `ByteSource` for every input file, by path.
        min_bytes: Contents shorter than this stay where they are.

    Raises:
        PteFormatError: One key names different bytes in two inputs.
    """
    blobs = [b for ptd, alignments in ptds for b in _ptd_blobs(ptd, alignments)]
    analyses = [analyse_file(read.pte, sources) for read in reads]
    for number, (read, layout) in enumerate(zip(reads, layouts or [None] * len(reads))):
        blobs.extend(_program_blobs(number, read, layout, analyses[number]))
    tensor_layouts = {number: _tensor_layouts(read) for number, read in enumerate(reads)}
    groups = _group(blobs, sources)
    content_of = {blob: number for number, (_, _, members) in enumerate(groups) for blob in members}
    _check_keys(blobs, content_of)

    shared, constant_keys = [], {}
    moved_keys: dict[int, set[str]] = {}
    for nbytes, sha256, members in groups:
        movable = [b for b in members if _movable(b, tensor_layouts)]
        if nbytes < min_bytes or len({b.file for b in members}) < 2 or not movable:
            continue
        shared.append(SharedContent(nbytes, sha256, tuple(members)))
        for blob in movable:
            if blob.kind == "named_data":
                moved_keys.setdefault(blob.program, set()).update(blob.keys)
            else:
                constant_keys[(blob.program, blob.index)] = {
                    layout: constant_key(sha256, layout)
                    for layout, _ in tensor_layouts[blob.program][blob.index]
                }
    _check_new_keys(blobs, content_of, shared, constant_keys)
    return SharedSet(
        shared=tuple(shared),
        constant_keys=constant_keys,
        moved_keys={p: frozenset(k) for p, k in moved_keys.items()},
        content_of=content_of,
        dead_bytes=tuple(_own_dead_bytes(a) for a in analyses),
    )


def _own_dead_bytes(analysis: FileAnalysis) -> int:
    """Bytes of the `.pte` itself that pruning frees (its `.ptd` files are the set's)."""
    return sum(end - start for start, end in analysis.count.freed.get(analysis.pte.path, ()))


def _check_keys(blobs: Sequence[StoredBlob], content_of: Mapping[StoredBlob, int]) -> None:
    """Refuses a named-data key that holds different bytes in two inputs.

    The runtime resolves a key in one `.ptd` (and then the `.pte`): both
    programs cannot get their own bytes under it.
    """
    first: dict[str, StoredBlob] = {}
    for blob in blobs:
        for key in blob.keys:
            other = first.setdefault(key, blob)
            if other is blob or other == blob:
                continue
            same = content_of.get(blob) is not None and content_of.get(blob) == content_of.get(
                other
            )
            if not same:
                raise PteFormatError(
                    blob.file,
                    f"named data {key!r} ({blob.nbytes:,} B) holds other bytes than "
                    f"{key!r} in {other.file} ({other.nbytes:,} B): one shared .ptd "
                    "cannot hold both; share refuses the set",
                )


def _check_new_keys(blobs, content_of, shared, constant_keys) -> None:
    """Refuses a moved constant's key that an input already uses for other bytes."""
    existing = {key: blob for blob in blobs for key in blob.keys}
    for content in shared:
        for blob in content.copies:
            for key in constant_keys.get((blob.program, blob.index), {}).values():
                other = existing.get(key)
                if other is not None and content_of.get(other) != content_of[blob]:
                    raise PteFormatError(
                        other.file,
                        f"key {key!r} holds other bytes than the constant {blob.file} "
                        f"entry {blob.index} it names: share refuses the set",
                    )
