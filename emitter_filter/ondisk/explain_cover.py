"""From the parts `explain` found to parts that cover every byte of each file, once.

Audit's copies marked (`mark_copies`), the ranges several references read made one
part (`merge_shared`), the bytes between parts given to the file's flatbuffer or to
padding (`fill_gaps`), and each plan's sections taken out of the program's
(`split_program`): the steps after attribution, in that order, that make the parts
add up to the files' sizes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from emitter_filter.errors import InvariantError, PteFormatError
from emitter_filter.ondisk.explain_part import Part
from emitter_filter.ondisk.read.file_model import PteFile
from emitter_filter.ondisk.read.program_sections import count_plan_sections

if TYPE_CHECKING:
    from emitter_filter.ondisk.analyse.audit_report import AuditReport

__all__ = ["mark_copies", "merge_shared", "fill_gaps", "split_program"]


def mark_copies(parts: list[Part], report: AuditReport) -> list[Part]:
    """Audit's duplicates: every copy after the first `duplicated`, each naming the others.

    `parts` is modified in place (and returned)."""
    position = {
        (p.storage if p.tag is None else "external", p.tag, p.index): i
        for i, p in enumerate(parts)
        if p.storage in ("constant", "mutable", "named_data", "external")
    }
    for group in report.duplicates:
        try:
            found = [position[(c.space, c.tag, c.index)] for c in group.copies]
        except KeyError:
            raise InvariantError(
                f"{report.path}: a duplicate copy is no part: {group.copies}"
            ) from None
        labels = [parts[i].label for i in found]
        for number, i in enumerate(found):
            others = tuple(label for label in labels if label != parts[i].label)
            status = parts[i].status
            if status == "live" and number:
                status = "duplicated"
            parts[i] = replace(parts[i], status=status, copies=others)
    return parts


def merge_shared(parts: list[Part], report: AuditReport) -> list[Part]:
    """One part per range audit lists as shared, its bytes on its first reference."""
    shared = {(s.file, s.offset, s.nbytes) for s in report.shared}
    merged: dict[tuple[str, int, int], Part] = {}
    for part in parts:
        where = (part.file, part.offset, part.nbytes)
        first = merged.get(where)
        if first is None:
            merged[where] = part
            continue
        if where not in shared:
            raise InvariantError(
                f"{part.file}: {first.label} and {part.label} read the same range at "
                f"{part.offset}, which audit does not list as shared"
            )
        status = first.status if first.status == "dead" else "shared"
        # Names stay the first reference's (a key is not the tensor's name); readers are all.
        merged[where] = replace(
            first,
            status=status,
            copies=(*first.copies, part.label),
            readers=tuple(dict.fromkeys((*first.readers, *part.readers))),
        )
    return list(merged.values())


def fill_gaps(
    file: str, size: int, structure_end: int, structure: str, parts: Iterable[Part]
) -> list[Part]:
    """`parts` of one file, by offset, with the bytes between them attributed.

    Bytes before `structure_end` no part claims are the file's flatbuffer
    (`structure`, one part); bytes after it, padding (one part per gap).

    Raises:
        PteFormatError: Two parts overlap, or one ends past the file.
    """
    placed = sorted((p for p in parts if p.nbytes), key=lambda p: (p.offset, p.nbytes))
    out: list[Part] = []
    flatbuffer = 0
    cursor = 0

    def gap(start: int, end: int) -> None:
        nonlocal flatbuffer
        cut = min(max(start, structure_end), end)
        flatbuffer += cut - start
        if end > cut:
            out.append(Part(file, cut, end - cut, "padding", status="padding"))

    for part in placed:
        if part.offset < cursor:
            raise PteFormatError(
                file,
                f"{part.label} ({part.nbytes} bytes) overlaps the part before it, "
                f"which ends at {cursor}",
                part.offset,
            )
        gap(cursor, part.offset)
        out.append(part)
        cursor = part.end
    if cursor > size:
        raise PteFormatError(file, f"{out[-1].label} ends at {cursor}, past the file ({size})")
    gap(cursor, size)
    if flatbuffer:
        out.insert(0, Part(file, 0, flatbuffer, structure))
    return out


def split_program(pte: PteFile, program_data: bytes, parts: list[Part]) -> list[Part]:
    """`parts` with each plan's values, instructions and operators taken out of `program`."""
    sections = [
        Part(pte.path, 0, nbytes, section, tag=plan.name)
        for plan, counts in zip(
            pte.plans,
            count_plan_sections(program_data, pte.path, (8, pte.header_length)),
            strict=True,
        )
        for section, nbytes in counts.items()
        if nbytes
    ]
    taken = sum(p.nbytes for p in sections)
    programs: list[int | None] = [i for i, p in enumerate(parts) if p.storage == "program"]
    (position,) = programs or [None]
    if position is None or parts[position].nbytes < taken:
        raise InvariantError(f"{pte.path}: plan sections of {taken} bytes exceed the program's")
    rest = replace(parts[position], nbytes=parts[position].nbytes - taken)
    return [*parts[:position], *([rest] if rest.nbytes else []), *sections, *parts[position + 1 :]]
