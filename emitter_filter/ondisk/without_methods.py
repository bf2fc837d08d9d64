"""A program without some of its methods, as a view of its file: what `split` prunes.

The view's program has only the plans kept and the inline delegate blobs they read;
after it comes the input's segment data, where the input has it, so that every offset
a rewrite copies from is the input file's own. `split` prunes the view; `merge` reads
an input with some methods left out (`--drop`) from it.

    input  [header | program: forward, head_a, head_b | segments ]
    view   [header | program: head_a                  | segments ]   (the same offsets)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from emitter_filter._program_fbs.executorch_flatbuffer.BackendDelegateInlineData import (
    BackendDelegateInlineDataT,
)
from emitter_filter._program_fbs.executorch_flatbuffer.DataLocation import DataLocation
from emitter_filter.errors import PteFormatError
from emitter_filter.ondisk.analyse.analysis import analyse_file
from emitter_filter.ondisk.analyse.stored_ranges import find_aliases
from emitter_filter.ondisk.read.byte_source import ByteSource, Piece
from emitter_filter.ondisk.read.file_headers import extended_header_prefix
from emitter_filter.ondisk.read.layout import PteLayout, pack_program, read_pte_layout
from emitter_filter.ondisk.read.read_pte import PteProgram
from emitter_filter.ondisk.read.segment_layout import shared_segment_alignment
from emitter_filter.program.generated_fields import table_text

__all__ = ["ViewOf", "view_without"]

#: The view's bytes, from a source open on the input (a `ProgramView`'s `source`).
ViewOf = Callable[[ByteSource], ByteSource]


def view_without(
    read: PteProgram,
    methods: Sequence[str],
    source: ByteSource,
    renames: Mapping[str, str] | None = None,
    move: bool = False,
) -> tuple[ViewOf, PteLayout]:
    """`_without_plans` with the layout of the file `read` is, `source` open on it: its
    shared data analysed for aliases as `prune` finds them, so the view packs as the
    input did (`split` and `merge`'s inputs with methods left out both read this way)."""
    analysis = analyse_file(read.pte, {read.pte.path: source})
    aliased = find_aliases(analysis.shared)
    layout = read_pte_layout(
        read.pte,
        read.program,
        read.program_data,
        aliased,
        shared_segment_alignment(read.pte, aliased),
    )
    return _without_plans(read, methods, layout, renames, move)


def _without_plans(
    read: PteProgram,
    methods: Sequence[str],
    layout: PteLayout,
    renames: Mapping[str, str] | None = None,
    move: bool = False,
) -> tuple[ViewOf, PteLayout]:
    """A view of the file `read` is (the `source` of `prune_file`'s `view`, and the
    layout to write it with), whose program has only
    `methods`' plans (named as `renames` says) and the inline blobs they read, and whose
    segments are the input's bytes where the input has them: `prune` of it is the split.
    With `move`, segment data the program does not end before is moved on (`split`
    then writes the view out first); without, that is refused."""
    program = read.program
    plans = [p for p in program.executionPlan or () if (table_text(p.name) or "") in methods]
    for plan in plans:
        name = table_text(plan.name) or ""
        plan.name = (renames or {}).get(name, name)
    program.executionPlan = plans
    inline, where = program.backendDelegateData or [], {}
    kept: list[BackendDelegateInlineDataT] = []
    for plan in plans:
        for delegate in plan.delegates or ():
            if delegate.processed.location == DataLocation.INLINE:
                old = delegate.processed.index
                if old not in where:
                    where[old] = len(kept)
                    kept.append(inline[old])
                delegate.processed.index = where[old]
    if program.backendDelegateData is not None:
        program.backendDelegateData = kept
    flatbuffer = pack_program(program, layout.tensor_alignment, layout.delegate_alignment)
    pte, base = read.pte, read.pte.segment_base_offset

    def view(source: ByteSource) -> ByteSource:
        if not base:
            return ByteSource([flatbuffer], name=source.name)
        # Aligned to the input's segment base itself: a program no larger than the input's
        # puts its segment data where the input's is.
        size = pte.file_bytes - base
        header = (layout.header_padded_length, layout.header_length)
        prefix, at = extended_header_prefix(flatbuffer, header[0], base, size, header[1])
        if at != base and not move:
            raise PteFormatError(
                pte.path,
                "the program without the other methods "
                f"does not end before the segment data at {base}",
            )
        if at != base:
            # On by a multiple of the widest power of two the base is aligned to: every
            # segment keeps the alignment it had in the file.
            prefix, at = extended_header_prefix(
                flatbuffer, header[0], base & -base, size, header[1]
            )
        whole = source.parts[0]
        return ByteSource([prefix.ljust(at, b"\0"), Piece(whole.fd, base, size)], name=source.name)

    return view, layout
