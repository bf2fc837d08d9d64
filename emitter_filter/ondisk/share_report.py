"""What `share_files` wrote: each program's output and what moved, and the set's bytes.

`ShareReport` renders itself: `summary` is the line the log and the CLI print,
`to_json` what `share --json` prints.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from emitter_filter.ondisk.analyse.share_find import SharedSet

__all__ = ["SharedProgram", "ShareReport", "build_report"]


@dataclass(frozen=True)
class SharedProgram:
    """One program of the set: what was written for it.

    Attributes:
        path: The input `.pte`.
        output: The `.pte` written.
        bytes_before: The input's size.
        bytes_after: The output's size.
        moved_constants: Constant entries now read from the shared `.ptd`.
        moved_named_data: Named-data keys now read from the shared `.ptd`.
        own_keys: Keys of its `.ptd` whose bytes differ for another program of the
            set (both heads' `head.weight`), now in its `.pte` under the same name.
        data: The `.ptd` files it was read with (`data_files.data_files_for`).
    """

    path: str
    output: str
    bytes_before: int
    bytes_after: int
    moved_constants: int
    moved_named_data: int
    own_keys: tuple[str, ...] = ()
    data: tuple[str, ...] = ()


@dataclass(frozen=True)
class ShareReport:
    """What `share_files` wrote.

    Attributes:
        programs: Each program, in the order given.
        ptd_inputs: The input `.ptd` files.
        ptd_outputs: The `.ptd` files written: the shared one, or each input's
            copy when nothing was shared.
        bytes_before: Size of the input files together.
        bytes_after: Size of the output files together.
        shared_contents: Contents now stored once for several files.
        shared_bytes: Their bytes (each counted once).
        seconds: Wall time.
        dead_bytes: Bytes of the programs no plan reads (`audit`'s count): share
            moves none of them, so they stay, dead, for `prune` (or `--prune`).
        deduplicated_bytes: With `dedupe`, what storing repeats within each program
            once saved on top.
    """

    programs: tuple[SharedProgram, ...]
    ptd_inputs: tuple[str, ...]
    ptd_outputs: tuple[str, ...]
    bytes_before: int
    bytes_after: int
    shared_contents: int
    shared_bytes: int
    seconds: float
    dead_bytes: int = 0
    deduplicated_bytes: int = 0

    @property
    def saved_bytes(self) -> int:
        return self.bytes_before - self.bytes_after

    def summary(self) -> str:
        """One line, for the log and the CLI."""
        stored = (
            f"{self.shared_contents} contents ({self.shared_bytes:,} B) stored once in "
            + ", ".join(self.ptd_outputs)
            if self.ptd_outputs
            else "nothing stored once"
        )
        programs = "1 program" if len(self.programs) == 1 else f"{len(self.programs)} programs"
        own = sum(len(p.own_keys) for p in self.programs)
        return (
            f"{programs}: {self.bytes_before:,} -> {self.bytes_after:,} B "
            f"({self.saved_bytes:,} saved); {stored} in {self.seconds * 1e3:.1f} ms"
            + (
                f"; {own} key(s) with other bytes in another program kept in each program's .pte"
                if own
                else ""
            )
            + (
                f"; {self.deduplicated_bytes:,} B stored once within programs (--dedupe)"
                if self.deduplicated_bytes
                else ""
            )
            + (
                f"; {self.dead_bytes:,} B no program reads left in place (prune them, or "
                "share --prune)"
                if self.dead_bytes
                else ""
            )
        )

    def to_json(self) -> dict:
        """The form `share --json` prints."""
        return {
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)},
            "programs": [dataclasses.asdict(p) for p in self.programs],
            "saved_bytes": self.saved_bytes,
            "data": [{"program": p.path, "data": list(p.data)} for p in self.programs],
        }


def build_report(
    reads, ptds, found: SharedSet, pte_outputs, ptd_outputs, sizes, bytes_after, started, data_of
) -> ShareReport:
    """What was written, from what `share_files` read, found and wrote."""
    programs = tuple(
        SharedProgram(
            path=read.pte.path,
            output=output,
            bytes_before=read.pte.file_bytes,
            bytes_after=size,
            moved_constants=sum(1 for p, _ in found.constant_keys if p == number),
            moved_named_data=len(found.moved_keys.get(number, ())),
            own_keys=tuple(sorted(found.own_keys.get(number, ()))),
            data=tuple(data_of[number]),
        )
        # `sizes` lists the programs' outputs first, then the `.ptd` outputs.
        for number, (read, output, size) in enumerate(
            zip(reads, pte_outputs, sizes[: len(pte_outputs)], strict=True)
        )
    )
    return ShareReport(
        programs=programs,
        ptd_inputs=tuple(ptd.path for ptd, _, _ in ptds),
        ptd_outputs=tuple(ptd_outputs),
        bytes_before=sum(r.pte.file_bytes for r in reads) + sum(p.file_bytes for p, _, _ in ptds),
        bytes_after=bytes_after,
        shared_contents=len(found.shared),
        shared_bytes=sum(c.nbytes for c in found.shared),
        seconds=time.perf_counter() - started,
        dead_bytes=sum(found.dead_bytes),
    )
