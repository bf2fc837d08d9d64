"""What several programs store in common: the analysis behind `share`.

A blob is one place an input stores bytes `share` may move or point at: a
constant-segment entry of a `.pte`, a named-data segment of a `.pte`, or a
segment of an input `.ptd`. Blobs are grouped by content as `audit` groups
duplicates (`duplicates.group_duplicates`: length, first bytes, then sha256,
each read in chunks), and a content is *shared* when it is stored in two or
more files, is at least `min_bytes` long, and a program stores a copy that can
move to the shared `.ptd`; or when two or more input `.ptd` files hold it (the
shared `.ptd` holds it once, whatever its size):

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
`.ptd`'s). Named data keep their keys (delegate blobs name them), as do `.ptd`
entries. Each program resolves a key in its own files (`_resolve_keys`): one key
with two contents for one program is refused. One key with other bytes for
other programs (two heads exported apart, each `.ptd` with its `head.weight`)
cannot be one entry of the shared `.ptd`: it is *own* to each program that
reads it, which keeps its bytes in its `.pte` under the same name.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from emitter_filter.errors import PteFormatError
from emitter_filter.ondisk.analyse.analysis import FileAnalysis, analyse_file
from emitter_filter.ondisk.analyse.dead_bytes import keep_ptd_key
from emitter_filter.ondisk.read.byte_source import ByteSource, StoredSpan, open_sources
from emitter_filter.ondisk.read.file_model import PtdFile
from emitter_filter.ondisk.read.layout import PteLayout
from emitter_filter.ondisk.read.read_ptd import read_ptd_flat_tensor
from emitter_filter.ondisk.read.read_pte import PteProgram, read_pte_program
from emitter_filter.program.duplicates import StoredCopy, group_duplicates
from emitter_filter.program.flatbuffer_tables import Table
from emitter_filter.program.generated_fields import table_text, vector_ints
from emitter_filter.program.reachability import DataSpace
from emitter_filter.program.scalar_types import SCALAR_TYPE_NAMES

__all__ = [
    "DEFAULT_MIN_BYTES",
    "StoredBlob",
    "TensorLayoutKey",
    "SharedContent",
    "SharedSet",
    "ProgramSet",
    "constant_key",
    "read_set",
    "find_shared",
    "find_set_shared",
    "KeyClash",
    "key_clashes",
]

#: Below this, moving a blob costs about what it saves: its key is written twice
#: (tensor and .ptd entry), with a TensorLayout and its tables (~200 B for a
#: constant), and the .ptd pads each segment to the segment alignment (128).
#: `share`'s default, and what `audit` and `explain` of a set count as stored twice.
DEFAULT_MIN_BYTES = 1024


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
        own_keys: Per program, the keys of its `.ptd` files it reads whose bytes
            differ for another program: written into its `.pte`, under that key.
        clashing: Every key with other bytes for other programs: not in the
            shared `.ptd`.
    """

    shared: tuple[SharedContent, ...]
    constant_keys: Mapping[tuple[int, int], Mapping[TensorLayoutKey, str]]
    moved_keys: Mapping[int, frozenset[str]]
    content_of: Mapping[StoredBlob, int]
    dead_bytes: tuple[int, ...] = ()
    own_keys: Mapping[int, frozenset[str]] = dataclasses.field(default_factory=dict)
    clashing: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ProgramSet:
    """The inputs of `share` (and of a set's audit), read.

    Attributes:
        reads: Each program, read with the `.ptd` files it loads with (`read.pte.ptd_files`).
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


def read_set(
    ptes: Sequence[str],
    ptd_paths: Sequence[str],
    data_of: Sequence[Sequence[str]] | None = None,
) -> ProgramSet:
    """Reads every program and every `.ptd`; refuses external tensors without a `.ptd`.

    `data_of` gives each program the `.ptd` files it reads (`data_files.data_files_of`);
    by default every program reads all of `ptd_paths`.
    """
    if data_of is None:
        data_of = [ptd_paths] * len(ptes)
    reads = tuple(read_pte_program(path, files) for path, files in zip(ptes, data_of, strict=True))
    for read, files in zip(reads, data_of, strict=True):
        external = [t for t in read.pte.tensors if t.ref.space is DataSpace.EXTERNAL]
        if external and not files:
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
            programs.reads,
            programs.layouts,
            [(ptd, own) for (ptd, _), own in zip(programs.ptds, alignments, strict=True)],
            sources,
            min_bytes,
        )


@dataclass(frozen=True)
class KeyClash:
    """A named-data key that programs of one set hold with different bytes.

    ExecuTorch resolves a key within one program, so each program computes with its own
    bytes; but a loader that caches by key across programs trusts the name: XNNPACK's
    weights cache, when on, packs a key once and gives every later program the first
    one's packed weights (it compares keys, not bytes). Nor can such files become one
    `.ptd`, or one program (ExecuTorch's own multi-method export keeps one of the two).

    Attributes:
        key: The key.
        copies: Each file holding it and the copy's size, in the set's file order.
    """

    key: str
    copies: tuple[tuple[str, int], ...]

    def line(self) -> str:
        held = ", ".join(f"{path} ({nbytes:,} B)" for path, nbytes in self.copies)
        return f"key {self.key!r} holds other bytes in {held}"

    def to_json(self) -> dict:
        return {
            "key": self.key,
            "copies": [{"file": path, "bytes": nbytes} for path, nbytes in self.copies],
        }


def key_clashes(programs: ProgramSet, found: SharedSet) -> tuple[KeyClash, ...]:
    """The keys `find_shared` found with other bytes for other programs (`SharedSet.clashing`),
    each with the files that hold it.

    What share and merge keep apart (each program's copy in its own `.pte`, under its
    name) is still a clash: a weights cache shared by the programs would see one key.
    An external tensor that `share` wrote into a program's constant segment has no key
    there, only its name: no clash.
    """
    copies: dict[str, dict[str, int]] = {}
    for read in programs.reads:
        held = [
            *read.pte.named_data,
            *(named for ptd in read.pte.ptd_files for named in ptd.named_data.values()),
        ]
        for named in held:
            if named.key in found.clashing:
                copies.setdefault(named.key, {})[named.file] = named.nbytes
    return tuple(KeyClash(key, tuple(copies[key].items())) for key in sorted(copies))


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


def _ptd_blobs(ptd: PtdFile, alignments: Sequence[int] | None) -> Iterator[StoredBlob]:
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


def _group(blobs: Sequence[StoredBlob], sources: Mapping[str, ByteSource]):
    """Groups the blobs by content: (nbytes, sha256 hex, blobs) per content stored twice or more."""
    by_copy = {StoredCopy(b.kind, b.file, b.index, b.keys): b for b in blobs}
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
    if blob.kind == "constant" and blob.program is not None:  # a `.pte`'s: always
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
        min_bytes: Contents shorter than this stay where they are (but for what
            several `.ptd` files hold).

    Raises:
        PteFormatError: One program loads one key with two contents.
    """
    blobs = [b for ptd, alignments in ptds for b in _ptd_blobs(ptd, alignments)]
    analyses = [analyse_file(read.pte, sources) for read in reads]
    per_program: Sequence[PteLayout | None] = layouts or [None] * len(reads)
    for number, (read, layout) in enumerate(zip(reads, per_program, strict=True)):
        blobs.extend(_program_blobs(number, read, layout, analyses[number]))
    tensor_layouts = {number: _tensor_layouts(read) for number, read in enumerate(reads)}
    groups = _group(blobs, sources)
    content_of = {blob: number for number, (_, _, members) in enumerate(groups) for blob in members}
    ptd_keys_read = _ptd_keys_read(reads, analyses)
    clashing, own_keys = _resolve_keys(reads, blobs, content_of, ptd_keys_read)

    shared, constant_keys = [], {}
    moved_keys: dict[int, set[str]] = {}
    for nbytes, sha256, members in groups:
        if len({b.file for b in members}) < 2:
            continue
        # Below `min_bytes`, moving a copy costs about what it saves; but the shared `.ptd`
        # holds what several `.ptd` files hold once, whatever its size. What no program
        # reads is dead, not shared (it too is stored once, but `prune` drops it).
        movable = [
            b
            for b in members
            if nbytes >= min_bytes
            and _movable(b, tensor_layouts)
            and not clashing.intersection(b.keys)
        ]
        in_ptds = [
            b
            for b in members
            if b.kind == "external"
            and not clashing.issuperset(b.keys)
            and _read_by_some(b, reads, ptd_keys_read)
        ]
        if not movable and len({b.file for b in in_ptds}) < 2:
            continue
        shared.append(SharedContent(nbytes, sha256, tuple(members if movable else in_ptds)))
        for blob in movable:
            if blob.kind == "named_data":
                moved_keys.setdefault(blob.program, set()).update(blob.keys)
            else:
                constant_keys[(blob.program, blob.index)] = {
                    layout: constant_key(sha256, layout)
                    for layout, _ in tensor_layouts[blob.program][blob.index]
                }
    _check_new_keys(blobs, content_of, shared, constant_keys)
    if not shared:
        own_keys = {}  # Nothing shared: each program keeps its own `.ptd`, as it was.
    return SharedSet(
        shared=tuple(shared),
        constant_keys=constant_keys,
        moved_keys={p: frozenset(k) for p, k in moved_keys.items()},
        content_of=content_of,
        dead_bytes=tuple(_own_dead_bytes(a) for a in analyses),
        own_keys=own_keys,
        clashing=clashing,
    )


def _own_dead_bytes(analysis: FileAnalysis) -> int:
    """Bytes of the `.pte` itself that pruning frees (its `.ptd` files are the set's)."""
    return sum(end - start for start, end in analysis.count.freed.get(analysis.pte.path, ()))


def _ptd_keys_read(
    reads: Sequence[PteProgram], analyses: Sequence[FileAnalysis]
) -> list[frozenset[str]]:
    """Per program, the keys of its `.ptd` files it reads (`analysis.keep_ptd_key`)."""
    read_keys = []
    for read, analysis in zip(reads, analyses, strict=True):
        keep = keep_ptd_key(read.pte, read.program, analysis.liveness, frozenset(analysis.use.dead))
        read_keys.append(
            frozenset(key for ptd in read.pte.ptd_files for key in ptd.named_data if keep(key))
        )
    return read_keys


def _read_by_some(
    blob: StoredBlob, reads: Sequence[PteProgram], ptd_keys_read: Sequence[frozenset[str]]
) -> bool:
    """Whether a program that loads with the blob's `.ptd` reads one of its keys."""
    return any(
        ptd_keys_read[number].intersection(blob.keys)
        for number, read in enumerate(reads)
        if blob.file in {ptd.path for ptd in read.pte.ptd_files}
    )


def _resolve_keys(
    reads: Sequence[PteProgram],
    blobs: Sequence[StoredBlob],
    content_of: Mapping[StoredBlob, int],
    ptd_keys_read: Sequence[frozenset[str]],
) -> tuple[frozenset[str], dict[int, frozenset[str]]]:
    """The keys with other bytes for other programs, and per program those of them its
    `.ptd` files hold and it reads (what it keeps in its `.pte`).

    A program resolves a key in its `.ptd` files, then its `.pte` (as the runtime
    does): one key with two contents there is refused, as is a key with other bytes
    elsewhere that a program holding it does not read (share would have to drop it).
    """
    holders: dict[str, list[StoredBlob]] = {}
    for blob in blobs:
        for key in blob.keys:
            holders.setdefault(key, []).append(blob)
    content = {blob: content_of.get(blob, blob) for blob in blobs}
    resolved: list[dict[str, StoredBlob]] = []
    for number, read in enumerate(reads):
        files = {ptd.path for ptd in read.pte.ptd_files}
        own: dict[str, StoredBlob] = {}
        for key, found in holders.items():
            for blob in found:
                if blob.file not in files and blob.program != number:
                    continue
                other = own.setdefault(key, blob)
                if content[other] != content[blob]:
                    raise PteFormatError(
                        blob.file,
                        f"named data {key!r} ({blob.nbytes:,} B) holds other bytes than "
                        f"{key!r} in {other.file} ({other.nbytes:,} B), and "
                        f"{read.pte.path} loads with both: share refuses the set",
                    )
        resolved.append(own)
    clashing = frozenset(
        key for key in holders if len({content[own[key]] for own in resolved if key in own}) > 1
    )
    own_keys: dict[int, frozenset[str]] = {}
    for number, (read, own) in enumerate(zip(reads, resolved, strict=True)):
        mine = set()
        for key in sorted(clashing.intersection(own)):
            blob = own[key]
            if blob.kind != "external":
                continue  # In its `.pte` already, where it stays.
            if key not in ptd_keys_read[number]:
                raise PteFormatError(
                    blob.file,
                    f"{key!r} holds other bytes for another program of the set, and "
                    f"{read.pte.path} does not read it: prune it first (one shared .ptd "
                    "cannot hold both)",
                )
            mine.add(key)
        if mine:
            own_keys[number] = frozenset(mine)
    return clashing, own_keys


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
