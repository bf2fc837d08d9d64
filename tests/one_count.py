"""The one count of every byte, checked on one file: what `test_one_count` asserts.

Imports neither torch nor executorch, so that the torch-free run can use it.

For a `.pte` and its `.ptd` files: `audit`'s dead bytes equal `explain`'s, and
`prune`'s dropped bytes; the pruned files hold exactly those data bytes fewer
(table and padding bytes are not data: they change with the layout), every part
`explain` called dead is gone from them, and they audit clean.
"""

from __future__ import annotations

import os
from pathlib import Path

from emitter_filter.ondisk.audit import audit_file
from emitter_filter.ondisk.explain import explain_file
from emitter_filter.ondisk.prune import prune_file

#: `explain`'s storages that hold data a program reads (the rest is tables and padding).
DATA_STORAGES = (
    "constant",
    "mutable",
    "external",
    "named_data",
    "delegate",
    "delegate_inline",
    "segments",
)


def data_bytes(explanation) -> int:
    """Bytes of the files' data parts, each stored range once."""
    return sum(p.nbytes for p in explanation.parts if p.storage in DATA_STORAGES)


def dead_bytes(explanation) -> int:
    return sum(p.nbytes for p in explanation.parts if p.status == "dead")


def check_one_count(pte: Path, ptds, out: Path) -> int:
    """Asserts the one count on `pte` (pruning it into `out`, a new directory); its dead bytes."""
    ptds = [Path(p) for p in ptds]
    audit = audit_file(pte, ptds)
    before = explain_file(pte, ptds)
    assert dead_bytes(before) == audit.dead_bytes, (pte, dead_bytes(before), audit.dead_bytes)
    assert sum(d.nbytes for d in audit.dead) == audit.dead_bytes
    assert sum(s.dead for s in audit.spaces.values()) == audit.dead_bytes
    # Each stored byte once: the spaces' totals are the data parts' bytes.
    assert audit.constant_bytes == data_bytes(before), (pte, audit.constant_bytes)
    os.makedirs(out)
    report = prune_file(pte, out / pte.name, ptds, out if ptds else None)
    dropped = sum(d.nbytes for d in report.dropped)
    assert dropped == audit.dead_bytes, (pte, dropped, audit.dead_bytes)
    written = [Path(o) for _, o in report.ptd_outputs if o is not None]
    after = explain_file(out / pte.name, written)
    assert after.audit.dead_bytes == 0 and dead_bytes(after) == 0, (pte, after.audit.dead)
    assert data_bytes(before) - data_bytes(after) == dropped, (
        pte,
        data_bytes(before),
        data_bytes(after),
        dropped,
    )
    # What explain called dead is no more: no part of the output holds its bytes.
    dead_contents = {_content(p) for p in before.parts if p.status == "dead"}
    live_contents = {_content(p) for p in before.parts if p.status != "dead"}
    kept = {_content(p) for p in after.parts if p.storage in DATA_STORAGES}
    assert not (dead_contents - live_contents) & kept, pte
    return audit.dead_bytes


def _content(part) -> bytes:
    with open(part.file, "rb") as f:
        f.seek(part.offset)
        return f.read(part.nbytes)
