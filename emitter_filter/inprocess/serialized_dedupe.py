"""The hook's dedupe of the `.pte` ExecuTorch serialized, and the proof of it.

`dedupe_serialized` passes the serializer's `Cord` through `dedupe.dedupe_pieces` on its own
buffers (no join, no copy of a weight), then `proof.prove_rewrite` of the result against
what was serialized, both read where they lie, before the `Cord` is handed back. A
`ProgramFormatError` or the proof's refusal leaves the `.pte` as serialized (`fail_safe`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time

from emitter_filter import _upstream
from emitter_filter.inprocess.fail_safe import fail_safe

__all__ = ["dedupe_serialized"]

# The hook's logger: its INFO line reads as the hook's, as it did before this module.
logger = logging.getLogger("emitter_filter.inprocess.hook")


def dedupe_serialized(emitter_output, serialized, config, prune_report):
    """Deduplicates the serialized `.pte` (`.ptd` files are left alone) and records the report.

    A `ProgramFormatError` from reading the file (an upstream quirk the prune did
    not meet, or no prune) leaves the `.pte` as serialized, under the fail-safe.
    """
    from emitter_filter.errors import InvalidOutputError, ProgramFormatError
    from emitter_filter.inprocess.reports import _record_dedupe_report, _record_dedupe_skipped

    started = time.perf_counter()
    pte, ptd_files = serialized
    try:
        deduplicated, dedupe_report = _dedupe_cord(pte, getattr(config, "segment_alignment", None))
    except (ProgramFormatError, InvalidOutputError) as error:
        written = "as ExecuTorch writes it" if prune_report is None else "pruned only"
        fail_safe(config, error, "deduplicating", written)
        _record_dedupe_skipped(emitter_output, str(error))
        return serialized
    dedupe_report = dataclasses.replace(dedupe_report, seconds=time.perf_counter() - started)
    _record_dedupe_report(emitter_output, dedupe_report)
    logger.info("emitter_filter: %s", dedupe_report)
    return deduplicated, ptd_files


def _dedupe_cord(pte, alignment):
    """`dedupe_pieces` of the serializer's `Cord`, and the `Cord` to write (`pte` itself when
    nothing is shared).

    On the Cord's own buffers: no join, no copy of any weight. A `FileBackedData`
    buffer stays on disk: it is read through its file only where the transform
    reads (a prefix, a chunked compare), and goes into the new Cord as itself.
    """
    from emitter_filter.ondisk.dedupe import dedupe_pieces, dedupe_pte
    from emitter_filter.ondisk.read.byte_source import Piece
    from emitter_filter.regular_files import open_regular_input

    buffers = _upstream.cord_pieces(pte)
    if buffers is None:
        whole = bytes(pte)
        deduplicated, report = dedupe_pte(whole, alignment)
        if report.shared:
            _prove_deduplicated([whole], [deduplicated])
        return (_upstream.cord(deduplicated) if report.shared else pte), report
    with contextlib.ExitStack() as opened:
        pieces, owners = [], {}
        for buffer in buffers:
            path = _upstream.file_backed_path(buffer)
            if path is None:
                pieces.append(buffer)
                continue
            fd = open_regular_input(path)
            opened.callback(os.close, fd)
            pieces.append(Piece(fd, 0, len(buffer)))
            owners[id(pieces[-1])] = buffer
        deduplicated, report = dedupe_pieces(pieces, alignment)
        if not report.shared:
            return pte, report
        _prove_deduplicated(pieces, deduplicated)
        return _upstream.cord_of(_cord_buffer(part, owners) for part in deduplicated), report


def _prove_deduplicated(before, after) -> None:
    """`proof.prove_rewrite` of the deduplicated `.pte` against the serialized one, both
    read where they lie (the serializer's buffers, the weights' files): each method reads
    the same bytes. An `InvalidOutputError` is a `ProgramFormatError`'s sibling: the caller's
    fail-safe writes the `.pte` as serialized."""
    from emitter_filter.ondisk.analyse.proof import Side, prove_rewrite
    from emitter_filter.ondisk.read.byte_source import ByteSource

    with (
        ByteSource(list(before), "serialized") as old,
        ByteSource(list(after), "deduplicated") as new,
    ):
        prove_rewrite([Side(old)], Side(new))


def _cord_buffer(part, owners: dict):
    """A part of the deduplicated file as a `Cord` buffer: bytes, or a file-backed buffer
    as itself. A part of one (never a whole blob: the transform cuts only the constant
    segment, which the serializer holds as bytes) is read here, that part alone."""
    from emitter_filter.ondisk.read.byte_source import Piece

    if not isinstance(part, Piece):
        return part
    if id(part) in owners:
        return owners[id(part)]
    return os.pread(part.fd, part.nbytes, part.offset)
