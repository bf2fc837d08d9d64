"""`audit`, `prune` and `prune --dedupe` agree on what a valid file is: one analysis.

The files are built in code (`tests/layouts.py`) and then made malformed by
changing their program: stored ranges that overlap without being the same range.
`audit` always refused them; `prune` used to write a copy of the corrupt file.
"""

from __future__ import annotations

import pytest

from emitter_filter._program_fbs.executorch_flatbuffer.DataSegment import DataSegmentT
from emitter_filter._program_fbs.executorch_flatbuffer.NamedData import NamedDataT
from emitter_filter.cli import main
from emitter_filter.errors import PteFormatError
from emitter_filter.ondisk.audit import audit_file
from emitter_filter.ondisk.dedupe import dedupe_file
from emitter_filter.ondisk.prune import prune_file
from tests.layouts import build_constants, with_program_changed

pytestmark = pytest.mark.filetools

# Two live 32-byte constants at 0 and 32 of the constant segment (64 bytes).
_CONSTANTS = [bytes(range(32)), bytes(range(32, 64))]


def _constant_inside_another(program) -> None:
    # constant[2] starts halfway through constant[1] (both are 32 bytes).
    program.constantSegment.offsets = [0, 0, 16]


def _named_data_across_two_constants(program) -> None:
    segment = DataSegmentT()
    segment.offset, segment.size = 16, 32
    program.segments.append(segment)
    named = NamedDataT()
    named.key, named.segmentIndex = "k", len(program.segments) - 1
    program.namedData = [named]


MALFORMED = {
    "constant_inside_another": _constant_inside_another,
    "named_data_across_two_constants": _named_data_across_two_constants,
}


@pytest.fixture(params=list(MALFORMED), ids=list(MALFORMED))
def malformed(request, tmp_path):
    for dead in (frozenset(), frozenset({1})):
        good = build_constants(_CONSTANTS, dead)
        audit_file(good)  # the file before the change is valid
    data = with_program_changed(build_constants(_CONSTANTS, frozenset()), MALFORMED[request.param])
    path = tmp_path / "malformed.pte"
    path.write_bytes(data)
    return path


def test_audit_refuses_ranges_that_overlap_without_being_the_same(malformed):
    with pytest.raises(PteFormatError, match="overlaps .* without being the same range"):
        audit_file(malformed)


@pytest.mark.parametrize("dedupe", [False, True], ids=["prune", "prune_dedupe"])
def test_prune_refuses_what_audit_refuses_and_leaves_no_output(malformed, dedupe):
    out = malformed.parent / "out.pte"
    with pytest.raises(PteFormatError, match="overlaps .* without being the same range"):
        prune_file(malformed, out, dedupe=dedupe)
    assert sorted(p.name for p in malformed.parent.iterdir()) == ["malformed.pte"]


def test_dedupe_refuses_what_audit_refuses(malformed):
    with pytest.raises(PteFormatError, match="overlaps .* without being the same range"):
        dedupe_file(malformed, malformed.parent / "out.pte")
    assert sorted(p.name for p in malformed.parent.iterdir()) == ["malformed.pte"]


@pytest.mark.parametrize(
    "command",
    [["audit"], ["prune", "-o", "OUT"], ["prune", "--dedupe", "-o", "OUT"]],
    ids=["audit", "prune", "prune_dedupe"],
)
def test_every_command_exits_2_on_the_file(malformed, command, capsys):
    out = malformed.parent / "out.pte"
    argv = [str(out) if arg == "OUT" else arg for arg in command]
    assert main([argv[0], str(malformed), *argv[1:]]) == 2
    assert "without being the same range" in capsys.readouterr().err
    assert sorted(p.name for p in malformed.parent.iterdir()) == ["malformed.pte"]
