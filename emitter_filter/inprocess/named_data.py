"""Drop the named data that no emitted delegate can reach.

`EdgeProgramManager` collects every lowered module's named data when it is
built; passes that `to_executorch` runs later can remove delegate calls, whose
data is then still written. Before and after, for a program whose second
XNNPACK call a pass removed::

    plan.delegates   [xnnpack 0]
    pte_data         {w0, b0, w1, b1}  ->  {w0, b0}

Which keys of the store (`pte_data` and every `external_data[tag]`) are live, dead
(dropped) or kept because unprovable is decided by `named_keys.classify_named_keys`,
whose docstring names the roots.

Never touched: the program, `buffers` and the bytes in it (the serializers
write only the buffers some entry refers to), and the `DataEntry` objects.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from emitter_filter.delegates import delegate_named_keys
from emitter_filter.errors import InvariantError, ProgramFormatError
from emitter_filter.program.duplicates import DuplicateGroup, find_duplicate_data
from emitter_filter.program.named_keys import DelegateRef, NamedDataUse, classify_named_keys

if TYPE_CHECKING:
    from executorch.exir._serialize._named_data_store import NamedDataStoreOutput
    from executorch.exir.emit import EmitterOutput
    from executorch.exir.schema import BackendDelegate, ExecutionPlan, Program

__all__ = [
    "BlobKeys",
    "blob_named_keys",
    "NamedDataEntry",
    "NamedDataReport",
    "find_named_data_use",
    "drop_dead_named_data",
    "prune_named_data",
]

logger = logging.getLogger(__name__)

#: The named-data keys of each delegate blob read so far, by (backend id, id(blob)), with the
#: blob (which keeps its id its own): the hook reads a blob once for the prune and its proof.
BlobKeys = dict[tuple[str, int], tuple[bytes, "tuple[str, ...] | None"]]


def blob_named_keys(backend_id: str, blob: bytes, cache: BlobKeys) -> tuple[str, ...] | None:
    """`delegates.delegate_named_keys` of a blob, read once per blob object.

    Raises:
        ProgramFormatError: A readable backend's blob is malformed.
    """
    found = cache.get((backend_id, id(blob)))
    if found is not None and found[0] is blob:
        return found[1]
    keys = delegate_named_keys(backend_id, blob)
    cache[(backend_id, id(blob))] = (blob, keys)
    return keys


@dataclass(frozen=True)
class NamedDataEntry:
    """One key of the store; `tag` is None in the .pte, else its `external_data` tag."""

    key: str
    tag: str | None
    nbytes: int


@dataclass(frozen=True)
class NamedDataReport:
    """What pruning did to the named data, and the duplicated bytes in the output.

    Attributes:
        bytes_before: Named-data bytes per file, by tag (None: the .pte), before;
            a buffer that several keys of one file share counts once.
        bytes_after: The same, after (0 for a tag left with no named data).
        dropped: The dropped entries.
        kept_unprovable: Entries kept only because of `opaque_delegates`.
        opaque_delegates: Delegates whose blobs cannot be read for keys.
        missing: Keys a delegate names that the store does not hold.
        duplicates: Contents written more than once, over every data space
            (`duplicates.find_duplicate_data`), after pruning. Found on first use,
            not in the hook: hashing look-alike weights can cost more than the prune.
    """

    bytes_before: Mapping[str | None, int]
    bytes_after: Mapping[str | None, int]
    dropped: tuple[NamedDataEntry, ...]
    kept_unprovable: tuple[NamedDataEntry, ...]
    opaque_delegates: tuple[DelegateRef, ...]
    missing: tuple[str, ...]
    find_duplicates: Callable[[], tuple[DuplicateGroup, ...]] = dataclasses.field(
        repr=False, compare=False
    )

    @functools.cached_property
    def duplicates(self) -> tuple[DuplicateGroup, ...]:
        return self.find_duplicates()

    @property
    def dropped_bytes(self) -> int:
        """Named-data bytes that were not written, over all files."""
        return sum(self.bytes_before.values()) - sum(self.bytes_after.values())

    @property
    def duplicated_bytes(self) -> int:
        """Bytes written more than once: each content's size times its extra copies."""
        return sum(group.duplicated_bytes for group in self.duplicates)

    def summary(self) -> str:
        """One line, for the INFO log after each prune: what was dropped, found without
        looking for duplicates."""
        parts = [f"dropped {len(self.dropped)} named data ({self.dropped_bytes:,} B)"]
        if self.kept_unprovable:
            backends = sorted({d.backend_id for d in self.opaque_delegates})
            parts.append(
                f"kept {len(self.kept_unprovable)} unprovable "
                f"(opaque delegates: {', '.join(backends)})"
            )
        if self.missing:
            parts.append(f"{len(self.missing)} keys named by delegates are missing")
        # No duplicate figure: finding one compares the weights, which costs more
        # than the prune (issue 20). It is in `duplicates`, at DEBUG and in `audit`.
        return "; ".join(parts)


def _store_entries(named_data: NamedDataStoreOutput | None) -> Iterator[NamedDataEntry]:
    """Every (key, tag) of the store: `pte_data` first, then each tag in order."""
    if named_data is None:
        return
    locations = [(None, named_data.pte_data), *named_data.external_data.items()]
    for tag, entries in locations:
        for key, entry in entries.items():
            if not 0 <= entry.buffer_index < len(named_data.buffers):
                place = "pte_data" if tag is None else f"external_data[{tag!r}]"
                raise ProgramFormatError(
                    f"{place}[{key!r}]: buffer_index {entry.buffer_index} "
                    f">= len(buffers) {len(named_data.buffers)}"
                )
            yield NamedDataEntry(key, tag, len(named_data.buffers[entry.buffer_index]))


def _processed_bytes(
    program: Program, plan: ExecutionPlan, index: int, delegate: BackendDelegate
) -> bytes:
    # Imported here: the file side (`rewrite_file`) shares this module without
    # paying for `executorch.exir`.
    from executorch.exir.schema import DataLocation

    processed = delegate.processed
    if processed.location != DataLocation.INLINE:
        # As emitted, every delegate is inline; `deserialize_pte_binary` inlines them again.
        raise ProgramFormatError(
            f"plan {plan.name!r} delegate {index}: processed data is in segment "
            f"{processed.index}, expected INLINE"
        )
    if not 0 <= processed.index < len(program.backend_delegate_data):
        raise ProgramFormatError(
            f"plan {plan.name!r} delegate {index}: processed.index {processed.index} "
            f">= len(backend_delegate_data) {len(program.backend_delegate_data)}"
        )
    return program.backend_delegate_data[processed.index].data


def find_named_data_use(
    program: Program, named_data: NamedDataStoreOutput | None, blobs: BlobKeys | None = None
) -> NamedDataUse:
    """Finds which keys of the named data the program's delegates can reach.

    Args:
        program: The emitted program; its delegates' processed data must be
            INLINE, as `emit_program` leaves it. Not modified.
        named_data: The named data to be serialized with it. Not modified.
        blobs: The blobs read so far (`blob_named_keys`), to add those read here to.

    Returns:
        Live, dead and unprovable keys (see the module docstring for the rules).

    Raises:
        ProgramFormatError: A delegate refers to data that does not exist, an
            XNNPACK blob is malformed, or an entry refers to a missing buffer.
    """
    delegate_keys: list[tuple[DelegateRef, tuple[str, ...] | None]] = []
    # `backend_delegate_data` is deduplicated by bytes alone, across backends:
    # read each (backend, blob) once.
    blobs = {} if blobs is None else blobs
    for plan in program.execution_plan:
        for index, delegate in enumerate(plan.delegates):
            processed = _processed_bytes(program, plan, index, delegate)
            try:
                keys = blob_named_keys(delegate.id, processed, blobs)
            except ProgramFormatError as e:
                raise ProgramFormatError(f"plan {plan.name!r} delegate {index}: {e}") from e
            delegate_keys.append((DelegateRef(plan.name, index, delegate.id), keys))
    return classify_named_keys(delegate_keys, (e.key for e in _store_entries(named_data)))


def drop_dead_named_data(
    named_data: NamedDataStoreOutput, use: NamedDataUse
) -> NamedDataStoreOutput:
    """Returns the named data without `use.dead`, sharing `buffers` and every `DataEntry`.

    A tag left with no entries is removed, as `NamedDataStore` itself does, so no
    empty `.ptd` is written for it.

    Args:
        named_data: Not modified: it is the `EdgeProgramManager`'s own store, which
            a later `to_executorch` call serializes again.
        use: `find_named_data_use` of this store.

    Raises:
        InvariantError: `use` names a dead key this store does not hold.
    """
    dead = frozenset(use.dead)
    held = {entry.key for entry in _store_entries(named_data)}
    if not dead <= held:
        raise InvariantError(f"dead keys not in the named data: {sorted(dead - held)[:5]}")
    external_data = {}
    for tag, entries in named_data.external_data.items():
        kept = {key: entry for key, entry in entries.items() if key not in dead}
        if kept:
            external_data[tag] = kept
    return dataclasses.replace(
        named_data,
        pte_data={key: entry for key, entry in named_data.pte_data.items() if key not in dead},
        external_data=external_data,
    )


def _bytes_per_file(named_data: NamedDataStoreOutput | None) -> dict[str | None, int]:
    """Bytes each file's named data takes, one count per distinct buffer (before padding)."""
    if named_data is None:
        return {}
    locations = [(None, named_data.pte_data), *named_data.external_data.items()]
    return {
        tag: sum(
            len(named_data.buffers[i]) for i in {entry.buffer_index for entry in entries.values()}
        )
        for tag, entries in locations
    }


def prune_named_data(
    emitter_output: EmitterOutput,
    named_data: NamedDataStoreOutput | None,
    use: NamedDataUse | None = None,
) -> tuple[NamedDataStoreOutput | None, NamedDataReport]:
    """Drops the named data no delegate can reach; reports it and the duplicated bytes.

    Call it after `emitted.prune_emitter_output`, so that the duplicates reported
    are those of the constants that will be written.

    Args:
        emitter_output: The output of `emit_program`. Not modified.
        named_data: The named data `to_executorch` passes to the serializer. Not
            modified (see `drop_dead_named_data`).
        use: `find_named_data_use` of this program and store, when the caller
            already ran it (the hook does, before modifying anything).

    Returns:
        The named data to serialize (`named_data` itself when nothing is dead)
        and the report.

    Raises:
        ProgramFormatError: See `find_named_data_use`.
    """
    if use is None:
        use = find_named_data_use(emitter_output.program, named_data)
    entries = list(_store_entries(named_data))
    pruned = drop_dead_named_data(named_data, use) if use.dead else named_data
    dead, unprovable = frozenset(use.dead), frozenset(use.kept_unprovable)
    bytes_before, bytes_after = _bytes_per_file(named_data), _bytes_per_file(pruned)
    report = NamedDataReport(
        bytes_before=bytes_before,
        bytes_after={tag: bytes_after.get(tag, 0) for tag in bytes_before},
        dropped=tuple(entry for entry in entries if entry.key in dead),
        kept_unprovable=tuple(entry for entry in entries if entry.key in unprovable),
        opaque_delegates=use.opaque_delegates,
        missing=use.missing,
        # A shallow copy, not `emitter_output` itself: reports live as long as the
        # emitter output does (`reports._record_report`), which a reference would extend.
        find_duplicates=functools.partial(find_duplicate_data, copy.copy(emitter_output), pruned),
    )
    for entry in report.dropped:
        logger.debug("dropped named data %r (tag %s, %d B)", entry.key, entry.tag, entry.nbytes)
    # Looking at the duplicates finds them: do so only if they will be logged.
    for group in report.duplicates if logger.isEnabledFor(logging.DEBUG) else ():
        logger.debug("%d B written %d times: %s", group.nbytes, len(group.copies), group.copies)
    return pruned, report
