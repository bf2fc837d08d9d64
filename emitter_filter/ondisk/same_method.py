"""Whether methods of two programs are one method: `merge` writes such a method once.

Every exporter adds constant methods to `forward` (`export_llama`: `get_max_seq_len`,
`use_kv_cache`, ...; optimum-executorch: `get_dtype`, `get_bos_id`, ...), and the
programs a user merges hold most of them alike. Two methods are one (`same_method`)
when their plans are equal once each data index and delegate is read as the bytes it
points at, and the named data their delegates use is equal; the bytes are compared
last, and only up to the first difference. A constant method (`is_constant_method`)
runs no instruction: where two differ, `merge` keeps the first input's value.
"""

from __future__ import annotations

import contextlib

from emitter_filter._program_fbs.executorch_flatbuffer.DataLocation import DataLocation
from emitter_filter.errors import MethodSetError
from emitter_filter.ondisk.read.byte_source import ByteSource, StoredSpan
from emitter_filter.ondisk.read.read_pte import PteProgram

__all__ = ["is_constant_method", "same_method", "spans_open"]


def _same_tensor(a, b) -> bool:
    """Two Tensor tables alike but for where their data is (compared as bytes after)."""
    return all(getattr(a, f) == getattr(b, f) for f in a._attributes if f != "dataBufferIdx")


class _Spans:
    """Open sources of the files compared, by path, opened once."""

    def __init__(self) -> None:
        self.sources: dict[str, ByteSource] = {}

    def span(self, file: str, offset: int, nbytes: int) -> StoredSpan:
        if file not in self.sources:
            self.sources[file] = ByteSource(file)
        return StoredSpan(self.sources[file], offset, nbytes)

    def close(self) -> None:
        for source in self.sources.values():
            source.close()


@contextlib.contextmanager
def spans_open():
    """The files `same_method` compares, each opened once, closed on leaving."""
    spans = _Spans()
    try:
        yield spans
    finally:
        spans.close()


def _same_bytes(spans: _Spans, a: tuple[str, int, int], b: tuple[str, int, int]) -> bool:
    if a[2] != b[2]:
        return False
    return a[2] == 0 or bool(spans.span(*a).same_bytes(spans.span(*b)))


def _delegate_blob(read: PteProgram, delegate) -> tuple[tuple[str, int, int], frozenset | None]:
    """Where a plan's delegate reads its blob, and the named-data keys the blob uses."""
    location = "inline" if delegate.processed.location == DataLocation.INLINE else "segment"
    for blob in read.pte.delegates:
        if blob.location == location and blob.index == delegate.processed.index:
            return (read.pte.path, blob.offset, blob.nbytes), blob.named_keys
    raise MethodSetError(
        f"{read.pte.path}: a delegate's blob {delegate.processed.index} is not in the file"
    )


def _named(read: PteProgram) -> dict[str, tuple[str, int, int]]:
    return {e.key: (e.file, e.offset, e.nbytes) for e in read.pte.named_data}


def same_method(a: PteProgram, i: int, b: PteProgram, j: int, spans: _Spans) -> bool:
    """Whether plan `i` of `a` and plan `j` of `b` are one method: equal plans (names
    aside) once each data index and delegate is read as the bytes it points at, and
    the named data their delegates use equal. Bytes are compared only where
    everything else is equal, a chunk at a time, and only up to the first difference."""
    pa, pb = a.program.executionPlan[i], b.program.executionPlan[j]
    refs_a, refs_b = a.pte.plans[i], b.pte.plans[j]
    for attribute in pa._attributes:
        if attribute not in ("name", "values", "delegates") and (
            getattr(pa, attribute) != getattr(pb, attribute)
        ):
            return False
    values_a, values_b = pa.values or [], pb.values or []
    if len(values_a) != len(values_b) or set(refs_a.data_refs) != set(refs_b.data_refs):
        return False
    data = []
    for number, (va, vb) in enumerate(zip(values_a, values_b, strict=True)):
        if number not in refs_a.data_refs:
            if va != vb:
                return False
            continue
        ra, rb = refs_a.data_refs[number], refs_b.data_refs[number]
        if va.valType != vb.valType or ra.space != rb.space or not _same_tensor(va.val, vb.val):
            return False
        ea, eb = a.pte.entries[ra.space][ra.index], b.pte.entries[rb.space][rb.index]
        data.append(((ea.file, ea.offset, ea.nbytes), (eb.file, eb.offset, eb.nbytes)))
    delegates_a, delegates_b = pa.delegates or [], pb.delegates or []
    if len(delegates_a) != len(delegates_b):
        return False
    keys_a: set[str] = set()
    keys_b: set[str] = set()
    for da, db in zip(delegates_a, delegates_b, strict=True):
        if (da.id, da.compileSpecs, da.processed.location) != (
            db.id,
            db.compileSpecs,
            db.processed.location,
        ):
            return False
        (blob_a, used_a), (blob_b, used_b) = _delegate_blob(a, da), _delegate_blob(b, db)
        data.append((blob_a, blob_b))
        # A blob whose keys are unknown (an opaque backend) may read any key.
        keys_a |= set(_named(a)) if used_a is None else used_a
        keys_b |= set(_named(b)) if used_b is None else used_b
    if keys_a != keys_b:
        return False
    named_a, named_b = _named(a), _named(b)
    if any((key in named_a) != (key in named_b) for key in keys_a):
        return False
    data += [(named_a[key], named_b[key]) for key in sorted(keys_a) if key in named_a]
    if any(x[2] != y[2] for x, y in data):
        return False
    return all(_same_bytes(spans, x, y) for x, y in data)


def is_constant_method(read: PteProgram, position: int) -> bool:
    """A method that runs no instruction: it returns values stored in its plan
    (ExecuTorch's `constant_methods`: `get_max_seq_len`, `use_kv_cache`, ...)."""
    plan = read.program.executionPlan[position]
    return not plan.delegates and all(not chain.instructions for chain in plan.chains or ())
