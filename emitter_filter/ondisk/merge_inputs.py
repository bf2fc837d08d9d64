"""Each input of a merge, read and analysed as `prune` reads it.

`read_inputs` opens every input and the `.ptd` files it reads once (a file given twice
is one descriptor), analyses each as `prune` does (`analysis.analyse_file`) and orders
its live data in first-reference order (`order_live_data`): a `MergeInput` each.
`dropped_bytes` counts what the merge leaves out as dead.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from emitter_filter.errors import PteFormatError
from emitter_filter.ondisk.analyse.analysis import FileAnalysis, analyse_file
from emitter_filter.ondisk.analyse.dead_bytes import keep_ptd_key
from emitter_filter.ondisk.analyse.stored_ranges import find_aliases
from emitter_filter.ondisk.read.byte_source import ByteSource
from emitter_filter.ondisk.read.layout import PteLayout, read_pte_layout
from emitter_filter.ondisk.read.read_pte import PteProgram
from emitter_filter.ondisk.read.segment_layout import shared_segment_alignment
from emitter_filter.ondisk.write.prune_rewrite import StoredEntry, stored_entries
from emitter_filter.ondisk.write.targets import open_input
from emitter_filter.program.generated_fields import vector_ints
from emitter_filter.program.object_models import GENERATED
from emitter_filter.program.reachability import DataSpace, order_live_data

__all__ = ["MergeInput", "dropped_bytes", "read_inputs"]


@dataclass
class MergeInput:
    """One input while merging: what was read, its analysis and layout, its open files.

    `keep_ptd_key` (`dead_bytes.keep_ptd_key`) says which keys of the `.ptd` files it reads
    live: taken before its program is rewritten.
    """

    path: str
    read: PteProgram
    analysis: FileAnalysis
    layout: PteLayout
    fds: Mapping[str, int]
    order: dict[DataSpace, list[int]]
    keep_ptd_key: Callable[[str], bool]

    @property
    def program(self):
        return self.read.program

    @property
    def fd(self) -> int:
        return self.fds[self.path]

    def entries(self, space: DataSpace) -> list[StoredEntry]:
        """The entries of its constant or mutable segment, by index."""
        subsegment = (
            self.program.constantSegment
            if space is DataSpace.CONSTANT
            else (self.program.mutableDataSegments or [None])[0]
        )
        if subsegment is None or not vector_ints(subsegment.offsets):
            return []
        alignment = self.layout.tensor_alignment if space is DataSpace.CONSTANT else 1
        return stored_entries(self.read.pte, subsegment, self.fd, space, alignment)

    def external(self, index: int) -> StoredEntry:
        """External entry `index` (in a `.ptd`), as a constant entry would be copied."""
        entry = self.read.pte.entries[DataSpace.EXTERNAL][index]
        return StoredEntry(
            self.fds[entry.file],
            entry.offset,
            entry.nbytes,
            entry.nbytes,
            True,
            self.layout.tensor_alignment,
        )

    def external_names(self) -> dict[int, str]:
        return {
            t.ref.index: t.name
            for t in self.read.pte.tensors
            if t.ref.space is DataSpace.EXTERNAL and t.name is not None
        }

    def mutable_external(self) -> frozenset[int]:
        """The external entries mutable tensors read (`allocation_info` set: training
        weights, `external_mutable_weights`): the runtime copies their initial bytes into
        the arena from the data map, or, inline, from the mutable data segment; never
        from the constant segment. Taken before the program is rewritten."""
        mutable: set[int] = set()
        constant: set[int] = set()
        for plan, refs in zip(self.program.executionPlan or (), self.read.pte.plans, strict=True):
            for value, ref in refs.data_refs.items():
                if ref.space is DataSpace.EXTERNAL:
                    tensor = GENERATED.value(plan.values[value])[1]
                    (mutable if tensor.allocationInfo is not None else constant).add(ref.index)
        both = mutable & constant
        if both:
            name = self.external_names().get(min(both))
            raise PteFormatError(
                self.path,
                f"external tensor {name!r} is read both as a "
                "mutable and as a constant tensor; merge cannot inline it",
            )
        return frozenset(mutable)


def read_inputs(
    inputs, reads, stack, opened, layouts=()
) -> tuple[list[MergeInput], dict[int, ByteSource]]:
    """Analyses each input as `prune` does; opens its files (into `opened`), and a
    `ByteSource` of each by its descriptor. A layout given (`layouts`, or None) is the
    input's file's, where `reads` has the input without some methods (`merge._read_without`)."""
    fds: dict[str, int] = {}
    sources: dict[str, ByteSource] = {}
    items = []
    for path, read, given in itertools.zip_longest(inputs, reads, layouts[: len(inputs)]):
        for file in [path, *(ptd.path for ptd in read.pte.ptd_files)]:
            if file not in fds:
                fds[file] = open_input(file, opened)
                sources[file] = stack.enter_context(ByteSource(file))
        analysis = analyse_file(read.pte, {f: sources[f] for f in fds})
        aliased = find_aliases(analysis.shared)
        layout = given or read_pte_layout(
            read.pte,
            read.program,
            read.program_data,
            aliased,
            shared_segment_alignment(read.pte, aliased),
        )
        order = order_live_data(read.pte.plans, analysis.liveness)
        keep = keep_ptd_key(read.pte, read.program, analysis.liveness, frozenset(analysis.use.dead))
        files = {path: fds[path], **{p.path: fds[p.path] for p in read.pte.ptd_files}}
        items.append(MergeInput(path, read, analysis, layout, files, order, keep))
    return items, {fds[file]: source for file, source in sources.items()}


def dropped_bytes(items: Sequence[MergeInput]) -> int:
    """The inputs' dead bytes, but a `.ptd` key one input leaves and another reads."""
    kept = {
        key
        for item in items
        for ptd in item.read.pte.ptd_files
        for key in ptd.named_data
        if item.keep_ptd_key(key)
    }
    return sum(
        d.nbytes
        for item in items
        for d in item.analysis.dead
        if not (d.space == "named_data" and d.name in kept)
    )
