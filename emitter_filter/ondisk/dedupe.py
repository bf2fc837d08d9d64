"""Store identical bytes of a `.pte` once: named data that repeats a constant points into it.

A tied embedding lowered to XNNPACK is written twice: once in the constant segment
for the portable `embedding` op, once as XNNPACK named data for the linear. In the
`.pte` format both are `(offset, size)` ranges relative to `segment_base_offset`,
so the named data's `DataSegment` can point at the constant's range instead:

    in.pte   [header | program  | constant: P W E | delegate | named: W  b ]
    out.pte  [header | program' | constant: P W E | delegate | named: b     ]
             segments[j] = (offset of W in the constant segment, len(W))

One transform of serialized bytes, wherever they are: `dedupe_pieces` on the
buffers of ExecuTorch's `Cord` (the hook, after pruning when both are on),
`dedupe_output` on a pruned file not yet written (`emitter-filter prune
--dedupe`), `dedupe_file` and `dedupe_pte`; so all write the same bytes for the
same input by construction. It costs one compare of the repeated bytes and a
few kilobytes of program: the input is read as parts (`ByteSource`), compared
where it lies, and the output is those parts again (the same buffer objects,
ranges of the same files) around a new header and program; no weight is copied.
On disk (`write_deduplicated`) a large repeat is compared while the output is
written, a core each.

Rules:

- Aliased: a named-data segment of the `.pte` whose bytes equal a constant
  entry's bytes (the tensor's size, compared in full: `dedupe_find`).
  Its `Program.segments` slot is rewritten in place to the constant's range, so no
  index changes; the keys sharing that segment follow it.
- Only onto live bytes: the constant must be one a live value reads, so that
  pruning (on or off) never drops what an alias reads; a live weight is never
  pointed at a dead buffer that happens to hold the same bytes.
- Never aliased: mutable data (the runtime copies it into its arena at load, and
  nothing may depend on it being read-only), delegate blobs, `.ptd` files, and
  constants with constants or named data with named data (the emitter and
  `NamedDataStore` already store those once).
- Alignment: an aliased range keeps the alignment ExecuTorch gave the named
  data's segment (the segment alignment, or the entry's own where its padding
  shows a larger one). The constant segment is laid out again with zeros inserted
  before an aliased entry where it needs more alignment than it has; every other
  entry keeps its offset modulo its alignment. Segments keep their order and are
  placed as `serialize_pte_binary` places them.
- The program: only numbers change (segment ranges, constant offsets, the
  header's segment data size), so they are written over the input's own
  program bytes and every other byte stays (`layout.patch_program`); where a
  number is not stored (a zero the packer left out), the program is packed
  again as the serializer options read back from the file pack it.
- Nothing to alias: the input is returned as it is, byte for byte.

What is about the file format is `layout`'s, as for `prune_file`: the segment
alignments read back from the file (`read_segment_layout`), segment placement,
the in-place patch, and for the fallback the serializer options
(`read_pte_layout`) and the packer (`pack_program`). The streamed, atomic write
is `output`'s. `dedupe_find` decides what to alias, `dedupe_rewrite` where the
constant segment needs zeros and every byte goes; this module runs the two on a
`.pte` in memory, in pieces, as a pruned output not yet written, or on disk.

What is valid and which ranges are already shared is `analysis.analyse_file`'s,
the analysis `audit` and `prune` call: a file whose ranges overlap without being
the same range is a `PteFormatError` here as there.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from emitter_filter.ondisk.analyse.dedupe_find import collect_aliases
from emitter_filter.ondisk.analyse.stored_ranges import SharedRange
from emitter_filter.ondisk.dedupe_rewrite import alias_repeated_named_data, output_parts
from emitter_filter.ondisk.read.byte_source import ByteSource, Compared, Piece
from emitter_filter.ondisk.read.read_pte import PteProgram, read_pte_program
from emitter_filter.ondisk.write.output import (
    OutputCheck,
    OutputFile,
    ProgressFn,
    UnconfirmedOutput,
    write_outputs,
)
from emitter_filter.ondisk.write.stream import EarlyCopy
from emitter_filter.ondisk.write.targets import check_outputs

__all__ = [
    "DedupeReport",
    "dedupe_pte",
    "dedupe_pieces",
    "dedupe_output",
    "write_deduplicated",
    "dedupe_file",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DedupeReport:
    """What `dedupe_pte` or `dedupe_file` did.

    Attributes:
        bytes_before: Size of the input.
        bytes_after: Size of the output.
        shared: The ranges of the output that are now stored once for several
            references (only those this run created), in output offsets.
        seconds: Wall time of the transform.
    """

    bytes_before: int
    bytes_after: int
    shared: tuple[SharedRange, ...]
    seconds: float

    @property
    def saved_bytes(self) -> int:
        """Bytes the output is smaller than the input."""
        return self.bytes_before - self.bytes_after

    def __str__(self) -> str:
        return self.summary()

    def to_json(self) -> dict:
        """The "dedupe" object of `prune --dedupe --json`."""
        return {
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "saved_bytes": self.saved_bytes,
            "shared": [shared.to_json() for shared in self.shared],
        }

    def summary(self) -> str:
        """One line, for the log and the CLI."""
        return (
            f"deduplicated {len(self.shared)} named data into the constant segment: "
            f"{self.bytes_before:,} -> {self.bytes_after:,} B ({self.saved_bytes:,} saved) "
            f"in {self.seconds * 1e3:.1f} ms"
        )


def dedupe_pte(data: bytes, segment_alignment: int | None = None) -> tuple[bytes, DedupeReport]:
    """Stores each named-data blob that repeats a constant once, in a serialized `.pte`.

    Args:
        data: The `.pte` file's bytes. Not modified.
        segment_alignment: The `segment_alignment` it was written with, where the
            caller knows it (the hook does): the file alone may allow several.

    Returns:
        The new file's bytes (`data` itself when nothing is stored twice) and
        what was shared.

    Raises:
        PteFormatError: The file is malformed, or ranges overlap without being the same.
        ProgramFormatError: The program refers to something that does not exist.
    """
    started = time.perf_counter()
    with ByteSource(data) as source:
        deduplicated = _dedupe_source(source, source.name, segment_alignment)
    if deduplicated is None:
        return data, _report(len(data), len(data), (), started)
    result = b"".join(deduplicated.parts)
    return result, _report(len(data), len(result), deduplicated.shared, started)


def dedupe_pieces(
    pieces: Sequence[bytes | Piece],
    segment_alignment: int | None = None,
    compared: Compared | None = None,
    *,
    read: PteProgram | None = None,
) -> tuple[Sequence[bytes | Piece], DedupeReport]:
    """`dedupe_pte` of a `.pte` given as its pieces in order (a serializer's chunks).

    Never joins them, and never reads a `Piece` (a range of a file) except
    where the transform reads: the output reuses every piece it copies whole
    (a weight is one), so no weight is copied or read. Returns `pieces`
    itself when nothing is stored twice. `compared` records each memcmp of
    two `bytes` pieces (for the proof of the result to find); `read` is
    `read_pte_program` of a `ByteSource` of `pieces` (named "<bytes>"), where
    the caller has it.
    """
    started = time.perf_counter()
    with ByteSource(list(pieces), compared=compared) as source:
        deduplicated = _dedupe_source(source, source.name, segment_alignment, read)
    if deduplicated is None:
        return pieces, _report(source.size, source.size, (), started)
    parts = [bytes(p) if isinstance(p, memoryview) else p for p in deduplicated.parts]
    return parts, _report(source.size, sum(len(p) for p in parts), deduplicated.shared, started)


def dedupe_output(
    output: OutputFile,
    segment_alignment: int | None = None,
    *,
    read: PteProgram | None = None,
    compare_later: bool = False,
) -> tuple[OutputFile, DedupeReport]:
    """`dedupe_pte` of an output not yet written (a pruned file, as `prune_file` decided it).

    Reads from its inputs only where the transform reads, so that a prune and a
    dedupe write the file once. `read` is the output's reading where the caller
    has one (an output that is its input as it is: `read_pte_program` of it;
    rewritten by the dedupe where the program must be packed again). Returns
    `output` itself when nothing is stored twice. With `compare_later`, a large
    repeat is compared while the result is written (its `confirm`): see
    `write_deduplicated`.
    """
    started = time.perf_counter()
    # The source reads the output's pieces, whose descriptors are the caller's:
    # the comparisons left to `confirm` read them after this block too.
    with ByteSource(output.parts(), name=output.path) as source:
        deduplicated = _dedupe_source(source, output.path, segment_alignment, read, compare_later)
    if deduplicated is None:
        return output, _report(source.size, source.size, (), started)
    confirm = tuple(
        functools.partial(source.same_bytes, a, b, size, "named data")
        for a, b, size in deduplicated.unconfirmed
    )
    result = OutputFile(output.path, output.source_fd, b"", [(0, deduplicated.parts)], confirm)
    return result, _report(source.size, result.size, deduplicated.shared, started)


def write_deduplicated(
    outputs: list[OutputFile],
    segment_alignment: int | None = None,
    *,
    read: PteProgram | None = None,
    progress: ProgressFn | None = None,
    early: EarlyCopy | None = None,
    validate: OutputCheck | None = None,
    prove: Callable[[Sequence[OutputFile]], None] | None = None,
) -> tuple[int, DedupeReport]:
    """Deduplicates `outputs[0]` (`dedupe_output`) and writes every output (`write_outputs`).

    A large repeat is compared while the kernel copies the output: the two take
    a core each, and on a 652 MB file the compare of the two 113 MB copies no
    longer comes before the copy. Where a compare finds the bytes differ (they
    matched in size, first and last bytes), nothing was written: the output is
    decided again, every compare made first, and written. Returns the bytes
    written and what was shared; `outputs[0]` becomes the deduplicated output.
    `early` is a copy of the input begun already (`stream.EarlyCopy`); `validate`
    checks the outputs before they replace anything (`output.write_outputs`); `prove`
    (`proof.prove_outputs`) is called with the outputs as decided, before anything is
    written.
    """
    planned = outputs[0]
    outputs[0], report = dedupe_output(planned, segment_alignment, read=read, compare_later=True)
    if prove is not None and not outputs[0].confirm:
        # A repeat compared while it is written is proven on the bytes written (`validate`).
        prove(outputs)
    try:
        return write_outputs(outputs, progress, early, validate=validate), report
    except UnconfirmedOutput:
        logger.debug("%s: a repeat's bytes differ after all; deciding again", planned.path)
    # The first try may have rewritten `read.program`: read the planned output again.
    outputs[0], report = dedupe_output(planned, segment_alignment)
    if prove is not None:
        prove(outputs)
    return write_outputs(outputs, progress, validate=validate), report


def dedupe_file(
    src: str | os.PathLike, dst: str | os.PathLike, segment_alignment: int | None = None
) -> DedupeReport:
    """Writes `src` with each named-data blob that repeats a constant stored once.

    The same transform as `dedupe_pte`, streamed by `output` as `prune_file`
    writes: only headers, the program and the entries whose size another entry
    shares are read into memory, and those a chunk at a time.

    Args:
        src: The `.pte` to read. Not modified.
        dst: Where to write; must not be `src`. Written atomically (a temporary
            file in its directory, renamed over it once complete). A file with
            nothing stored twice is copied as it is.
        segment_alignment: Taken where the file allows it, as `dedupe_pte` takes it.

    Raises:
        PteFormatError: The file is malformed, or ranges overlap without being the same.
        ProgramFormatError: The program refers to something that does not exist.
        OutputFileError: `dst` is `src`, or cannot be written.
    """
    started = time.perf_counter()
    src, dst = os.fspath(src), os.fspath(dst)
    check_outputs([src], [dst], "dedupe")
    with EarlyCopy(src, dst) as early, ByteSource(src) as source:
        (whole,) = source.parts
        # Not validated (`validate.validate_outputs`): the hook imports this module, and the
        # validator above it would make the import graph deeper than tests/test_layout.py
        # allows; `prune --dedupe` (`prune_file(dedupe=True)`) validates what it writes.
        bytes_after, report = write_deduplicated(
            [OutputFile(dst, whole.fd, b"", [(0, [whole])])], segment_alignment, early=early
        )
    report = dataclasses.replace(
        report, bytes_after=bytes_after, seconds=time.perf_counter() - started
    )
    logger.info("%s -> %s: %s", src, dst, report)
    return report


@dataclass(frozen=True)
class _Deduplicated:
    """The output as parts of its source's parts, what it shares, and what is yet to compare."""

    parts: list
    shared: tuple[SharedRange, ...]
    unconfirmed: tuple[tuple[int, int, int], ...]


def _dedupe_source(
    source: ByteSource,
    output_name: str,
    segment_alignment: int | None,
    read: PteProgram | None = None,
    compare_later: bool = False,
) -> _Deduplicated | None:
    """Reads the `.pte` in `source` (unless `read` is its reading already) and deduplicates
    it; None when nothing is stored twice."""
    read = read_pte_program(source) if read is None else read
    aliases = collect_aliases(read.pte, source, compare_later)
    if aliases is None:
        return None
    output = alias_repeated_named_data(
        read.pte,
        read.program,
        read.program_data,
        source,
        aliases,
        output_name,
        segment_alignment,
    )
    return _Deduplicated(output_parts(source, output), output.shared, aliases.unconfirmed)


def _report(before: int, after: int, shared, started: float) -> DedupeReport:
    report = DedupeReport(before, after, shared, time.perf_counter() - started)
    logger.debug("%s", report)
    return report
