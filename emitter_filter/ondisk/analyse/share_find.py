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
entries. Each program resolves a key in its own files (`resolve_keys`): one key
with two contents for one program is refused. One key with other bytes for
other programs (two heads exported apart, each `.ptd` with its `head.weight`)
cannot be one entry of the shared `.ptd`: it is *own* to each program that
reads it, which keeps its bytes in its `.pte` under the same name.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from emitter_filter.errors import PteFormatError
from emitter_filter.ondisk.analyse.analysis import FileAnalysis, analyse_file
from emitter_filter.ondisk.analyse.set_keys import (
    check_new_keys,
    constant_key,
    find_ptd_keys_read,
    read_by_some,
    resolve_keys,
)
from emitter_filter.ondisk.analyse.stored_blobs import (
    StoredBlob,
    TensorLayoutKey,
    constant_tensor_layouts,
    program_blobs,
    ptd_blobs,
)
from emitter_filter.ondisk.read.byte_source import ByteSource, StoredSpan, open_sources
from emitter_filter.ondisk.read.file_model import PtdFile
from emitter_filter.ondisk.read.layout import PteLayout
from emitter_filter.ondisk.read.read_ptd import read_ptd_flat_tensor
from emitter_filter.ondisk.read.read_pte import PteProgram, read_pte_program
from emitter_filter.program.duplicates import StoredCopy, group_duplicates
from emitter_filter.program.flatbuffer_tables import Table
from emitter_filter.program.reachability import DataSpace

__all__ = [
    "DEFAULT_MIN_BYTES",
    "SharedContent",
    "SharedSet",
    "ProgramSet",
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
            (`dead_bytes.ByteCount`): never moved, so left dead where they are.
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
    blobs = [b for ptd, alignments in ptds for b in ptd_blobs(ptd, alignments)]
    analyses = [analyse_file(read.pte, sources) for read in reads]
    per_program: Sequence[PteLayout | None] = layouts or [None] * len(reads)
    for number, (read, layout) in enumerate(zip(reads, per_program, strict=True)):
        blobs.extend(program_blobs(number, read, layout, analyses[number]))
    tensor_layouts = {number: constant_tensor_layouts(read) for number, read in enumerate(reads)}
    groups = _group(blobs, sources)
    content_of = {blob: number for number, (_, _, members) in enumerate(groups) for blob in members}
    ptd_keys_read = find_ptd_keys_read(reads, analyses)
    clashing, own_keys = resolve_keys(reads, blobs, content_of, ptd_keys_read)

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
            and read_by_some(b, reads, ptd_keys_read)
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
    check_new_keys(blobs, content_of, shared, constant_keys)
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
