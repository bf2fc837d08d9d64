"""A damaged XNNPACK graph is read or refused in one line, the same by both readers.

`xnnpack_constant_types` reads a blob with `flatbuffer_tables` (fast; the proof asks it of
every blob) and falls back to the generated readers where that reader refuses; `explain`,
`audit` and every writer's proof call it. A byte changed anywhere in the golden program's
graph must give either the generated readers' answer or `ProgramFormatError`, never another
exception (a union member absent where its type says it is there once raised
`AttributeError`: a traceback for `audit` of a damaged file).
"""

from __future__ import annotations

import pytest

from emitter_filter.delegates import xnnpack
from emitter_filter.errors import ProgramFormatError
from emitter_filter.ondisk.read.read_pte import read_pte
from tests.files import GOLDEN

pytestmark = pytest.mark.filetools


def _golden_blob() -> bytes:
    path = GOLDEN / "xnnpack" / "pruned" / "model.pte"
    (blob,) = [d for d in read_pte(path).delegates if d.location == "segment"]
    return path.read_bytes()[blob.offset : blob.offset + blob.nbytes]


def _outcome(read, data: bytes):
    try:
        return list(read(data).items())
    except ProgramFormatError:
        return "refused"


def test_every_byte_of_the_graph_changed_is_read_as_the_generated_readers_read_it():
    blob = _golden_blob()
    start, size = xnnpack.xnnpack_flatbuffer_span(blob[:32], len(blob))
    assert _outcome(xnnpack.xnnpack_constant_types, blob) != "refused"
    outcomes = set()
    for offset in range(start, start + size):
        for value in (0x00, 0xFF, blob[offset] ^ 0x01, blob[offset] ^ 0x10):
            data = blob[:offset] + bytes([value]) + blob[offset + 1 :]
            found = _outcome(xnnpack.xnnpack_constant_types, data)
            assert found == _outcome(xnnpack._generated_constant_types, data), (offset, value)
            outcomes.add(found == "refused")
    assert outcomes == {True, False}, "every change read, or every change refused"
