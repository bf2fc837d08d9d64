"""`validate_file`: the runtime's load checks, on files built in code and mutated.

Each invalid case is a field the runtime checks (`emitter_filter/ondisk/analyse/validate.py` and `method_checks.py` name
its function), changed in a program that is valid as built; `test_validate_runtime.py`
loads the same files in ExecuTorch's runtime. Nothing here imports torch or executorch.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from emitter_filter.cli import main
from emitter_filter.errors import InvalidOutputError
from emitter_filter.ondisk.analyse.validate import Validity, validate_bytes, validate_file
from emitter_filter.ondisk.merge import merge_files
from emitter_filter.ondisk.read.read_pte import read_pte_program
from emitter_filter.program.fbs_schemas import PROGRAM
from tests.files import GOLDEN
from tests.layouts import LIVE, build_program, flat_tensor, with_program_changed
from tests.realworld import needs_realworld, real_files

pytestmark = pytest.mark.filetools

_INT, _STRING, _TENSOR_LIST, _TENSOR = 2, 6, 10, 5  # KernelTypes


def _values(program):
    return program.executionPlan[0].values


def _planned(memory_id: int, offset: int):
    def change(program) -> None:
        _values(program)[2].val.allocationInfo = PROGRAM.AllocationDetails(
            memoryId=memory_id, memoryOffsetLow=offset
        )

    return change


def _set(path: Callable, attribute: str, value):
    def change(program) -> None:
        setattr(path(program), attribute, value)

    return change


def _tensor(index: int):
    return lambda program: _values(program)[index].val


def _plan(program):
    return program.executionPlan[0]


def _call(program):
    return program.executionPlan[0].chains[0].instructions[0].instrArgs


def _add_values(*values):
    def change(program) -> None:
        _values(program).extend(values)

    return change


_NOT_A_TENSOR = [
    PROGRAM.EValue(valType=_INT, val=PROGRAM.Int(intVal=1)),
    PROGRAM.EValue(valType=_TENSOR_LIST, val=PROGRAM.TensorList(items=[0, 3])),
]


@dataclass(frozen=True)
class Case:
    """A change to the valid `build_program(where="segment")` and what the runtime says of it
    (None: the changed file still loads)."""

    change: Callable
    problem: str | None


#: Files the runtime refuses (or loads, `problem` None), by the field changed.
CASES = {
    "planned-in-range": Case(_planned(1, 16), None),
    "planned-memory-id-past-the-buffers": Case(_planned(2, 0), "names no planned buffer"),
    "planned-memory-id-0": Case(_planned(0, 0), "names no planned buffer"),
    "planned-past-the-buffer-end": Case(_planned(1, 20), "overrun planned buffer 1"),
    "dim-order-longer-than-sizes": Case(_set(_tensor(1), "dimOrder", [0, 1]), "dim_order of 2"),
    "dim-order-no-permutation": Case(
        lambda p: (_set(_tensor(0), "sizes", [2, 2])(p), _set(_tensor(0), "dimOrder", [1, 1])(p)),
        "no permutation",
    ),
    "scalar-type-unknown": Case(_set(_tensor(0), "scalarType", 99), "invalid scalar_type 99"),
    "scalar-type-complex": Case(_set(_tensor(0), "scalarType", 9), None),
    "negative-size": Case(_set(_tensor(0), "sizes", [-1]), "negative size"),
    "storage-offset": Case(_set(_tensor(0), "storageOffset", 4), "storage_offset 4"),
    "op-index-past-the-operators": Case(
        _set(_call, "opIndex", 3), "op_index 3 >= len(operators) 1"
    ),
    "arg-index-past-the-values": Case(_set(_call, "args", [0, 1, 7]), "value index 7 outside"),
    "no-chains": Case(_set(_plan, "chains", []), "no chains"),
    "method-name-not-utf-8": Case(_set(_plan, "name", b"forw\x80rd"), "name is not UTF-8"),
    "no-delegates-field": Case(_set(_plan, "delegates", None), "ExecutionPlan.delegates is absent"),
    "operator-name-too-long": Case(
        lambda p: setattr(_plan(p).operators[0], "name", b"x" * 120),
        "124 characters, the runtime takes 99",
    ),
    "string-without-string-val": Case(
        _add_values(PROGRAM.EValue(valType=_STRING, val=PROGRAM.String())), "without string_val"
    ),
    "tensor-list-item-not-a-tensor": Case(_add_values(*_NOT_A_TENSOR), "item 3 is not a Tensor"),
    "constant-buffer-beside-the-constant-segment": Case(
        _set(lambda p: p, "constantBuffer", [PROGRAM.Buffer(storage=[])]),
        "constant_buffer has 1 entries and constant_segment.offsets 2: only one may be used",
    ),
}


def changed(name: str) -> bytes:
    return with_program_changed(build_program(dead=False).pte, CASES[name].change)


@pytest.mark.parametrize("name", CASES)
def test_each_check_of_the_runtime_finds_its_field(name):
    validity = validate_bytes(changed(name))
    problem = CASES[name].problem
    if problem is None:
        assert validity.valid, validity.problems
    else:
        assert not validity.valid
        assert any(problem in p for p in validity.problems), validity.problems
        assert all("\n" not in p for p in validity.problems)


def flipped(index: int, val_type: int) -> bytes:
    """The built program with value `index`'s `val_type` byte set, its table left as it is:
    what no packer writes, and a reader of the table decodes as another type."""
    pte = build_program(dead=False).pte
    evalue = read_pte_program(pte).program.executionPlan[0].values[index]
    vtable = evalue._pos - struct.unpack_from("<i", pte, evalue._pos)[0]
    (at,) = struct.unpack_from("<H", pte, vtable + 4)  # slot 0: `val_type`
    data = bytearray(pte)
    data[evalue._pos + at] = val_type
    return bytes(data)


#: (value, val_type) of `flipped` files the runtime's flatbuffers Verifier refuses: a
#: Tensor table read as an Int or a Double, whose 8-byte field is then misaligned.
FLIPPED = [(0, 2), (1, 2), (2, 4)]


#: Fields of the built program changed in its bytes where the reader still reads it and
#: the flatbuffers Verifier does not (`verify_flatbuffer`): (its table, the field, the problem).
VERIFIER_CASES = {
    "offset-0": (lambda p: p.executionPlan[0].chains[0], "inputs", "offset 0 at"),
    "string-without-nul": (
        lambda p: p.executionPlan[0].operators[0],
        "name",
        "does not end in NUL",
    ),
}


def unverified(name: str) -> bytes:
    """The built program with the change `VERIFIER_CASES[name]` names, in its bytes."""
    table_of, field, _ = VERIFIER_CASES[name]
    pte = bytearray(build_program(dead=False).pte)
    at = PROGRAM.field_at(bytes(pte), table_of(read_pte_program(bytes(pte)).program), field)
    if name == "offset-0":
        pte[at : at + 4] = bytes(4)
    else:
        string = at + int.from_bytes(pte[at : at + 4], "little")
        pte[string + 4 + int.from_bytes(pte[string : string + 4], "little")] = ord("x")
    return bytes(pte)


@pytest.mark.parametrize("name", VERIFIER_CASES)
def test_what_the_flatbuffers_verifier_refuses_is_invalid(name):
    (problem,) = validate_bytes(unverified(name)).problems
    assert VERIFIER_CASES[name][2] in problem and "the flatbuffers Verifier refuses it" in problem


@pytest.mark.parametrize("index, val_type", FLIPPED)
def test_a_value_of_another_type_than_its_table_is_invalid(index, val_type):
    (problem,) = validate_bytes(flipped(index, val_type)).problems
    assert problem.startswith("program flatbuffer: ") and "is not 8-aligned" in problem


def test_a_program_as_built_is_valid_and_lists_its_operators():
    validity = validate_bytes(build_program(dead=True).pte)
    assert validity == Validity((), ("aten::add.out",), (), ())
    assert validity.valid and validity.status == "valid"


def test_a_program_on_the_constant_buffer_path_is_invalid_by_name():
    validity = validate_bytes(build_program(dead=False, where="placeholder").pte)
    assert validity.problems[0].startswith("relies on the constant_buffer path")
    assert validity.status.startswith("invalid: relies on the constant_buffer path")


def test_a_file_that_cannot_be_read_is_invalid_with_the_reader_s_error():
    pte = build_program(dead=False).pte
    for data in (pte[:100], b"\0" * 64, pte[:8]):
        validity = validate_bytes(data)
        assert not validity.valid and len(validity.problems) == 1


def test_external_keys_without_data_files_are_missing_not_problems(tmp_path):
    built = build_program(dead=False, where="external")
    pte, ptd, other = tmp_path / "m.pte", tmp_path / "m.ptd", tmp_path / "other.ptd"
    pte.write_bytes(built.pte)
    ptd.write_bytes(built.ptd)
    other.write_bytes(flat_tensor([("v", LIVE, 4)]))
    alone = validate_file(pte)
    assert alone.valid and alone.missing_data == ("w",)
    assert validate_file(pte, [ptd]) == Validity((), ("aten::add.out",), (), ())
    wrong = validate_file(pte, [other])
    assert wrong.missing_data == ("w",)
    assert wrong.problems == (f"plan 'forward' value 1: external tensor 'w' is in none of {other}",)


def test_an_external_tensor_of_another_type_than_its_data_is_invalid(tmp_path):
    built = build_program(dead=False, where="external")
    pte, ptd = tmp_path / "m.pte", tmp_path / "m.ptd"
    pte.write_bytes(with_program_changed(built.pte, _set(_tensor(1), "scalarType", 3)))
    ptd.write_bytes(built.ptd)
    (problem,) = validate_file(pte, [ptd]).problems
    assert "external tensor 'w' is INT [4] dim_order [0], its data FLOAT [4]" in problem


def test_a_data_file_that_cannot_be_read_is_a_problem_naming_it(tmp_path):
    built = build_program(dead=False, where="external")
    pte, ptd = tmp_path / "m.pte", tmp_path / "m.ptd"
    pte.write_bytes(built.pte)
    ptd.write_bytes(b"not a ptd" * 8)
    problems = validate_file(pte, [ptd]).problems
    assert problems[0].startswith(str(ptd))


def test_xnnpack_keys_in_no_named_data_are_missing(tmp_path):
    golden = (GOLDEN / "xnnpack" / "pruned" / "model.pte").read_bytes()
    assert validate_bytes(golden).backends == ("XnnpackBackend",)
    assert validate_bytes(golden).missing_data == ()

    def rename(program) -> None:
        program.namedData[0].key = b"renamed"

    renamed = tmp_path / "renamed.pte"
    renamed.write_bytes(with_program_changed(golden, rename))
    missing = validate_file(renamed).missing_data
    assert len(missing) == 1 and missing[0] != "renamed"
    other = tmp_path / "other.ptd"
    other.write_bytes(flat_tensor([("v", LIVE, 4)]))
    (problem,) = validate_file(renamed, [other]).problems
    assert f"named data {missing[0]!r} is in neither the .pte nor {other}" in problem


# --- the tools ------------------------------------------------------------------------


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("command", ["audit", "explain"])
def test_audit_and_explain_call_an_invalid_file_invalid_in_one_line(tmp_path, capsys, command):
    pte = _write(tmp_path / "m.pte", changed("constant-buffer-beside-the-constant-segment"))
    assert main([command, str(pte)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"emitter-filter: {pte}: invalid: {validate_file(pte).problems[0]}\n"
    placeholder = _write(tmp_path / "p.pte", build_program(dead=False, where="placeholder").pte)
    assert main([command, str(placeholder)]) == 2
    assert "invalid: relies on the constant_buffer path" in capsys.readouterr().err


def test_the_constant_buffer_path_is_named_with_prune_that_repairs_it_and_prune_says_so(
    tmp_path, capsys
):
    placeholder = _write(tmp_path / "p.pte", build_program(dead=False, where="placeholder").pte)
    assert main(["audit", str(placeholder)]) == 2
    assert capsys.readouterr().err.endswith(
        "; emitter-filter prune rewrites it to the constant segment\n"
    )
    out = tmp_path / "q.pte"
    assert main(["prune", str(placeholder), "-o", str(out)]) == 0
    said = capsys.readouterr().out.rstrip()
    assert said.endswith(
        "; rewritten from the deprecated constant_buffer path, which the runtime refuses, "
        "to the constant segment"
    )
    assert validate_file(out).valid
    assert main(["prune", str(placeholder), "-o", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["left_constant_buffer_path"] is True
    assert main(["prune", str(out), "-o", str(tmp_path / "r.pte"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["left_constant_buffer_path"] is False


def test_audit_of_several_files_reports_the_valid_and_names_the_invalid(tmp_path, capsys):
    good = _write(tmp_path / "good.pte", build_program(dead=False).pte)
    bad = _write(tmp_path / "bad.pte", changed("no-chains"))
    assert main(["audit", str(good), str(bad)]) == 2
    out, err = capsys.readouterr()
    assert str(good) in out and str(bad) not in out
    assert err == f"emitter-filter: {bad}: invalid: plan 'forward': no chains\n"


def test_audit_require_data_fails_without_the_ptd_and_passes_with_it(tmp_path, capsys):
    built = build_program(dead=False, where="external")
    pte = _write(tmp_path / "m.pte", built.pte)
    assert main(["audit", str(pte)]) == 0
    assert main(["audit", "--require-data", str(pte)]) == 1
    err = capsys.readouterr().err
    assert err.endswith(
        f"{pte}: --require-data: external data in none of the data files given or beside it: 'w'\n"
    )
    ptd = _write(tmp_path / "weights.ptd", built.ptd)
    assert main(["audit", "--require-data", str(pte), "--ptd", str(ptd)]) == 0
    _write(tmp_path / "m.ptd", built.ptd)  # beside it, with its stem
    assert main(["audit", "--require-data", str(pte)]) == 0


def test_a_merge_of_a_constant_buffer_input_writes_a_valid_program(tmp_path):
    # issue 40: hello_world_add_model.pte (constant_buffer path) merged with a program
    # with constants wrote a file the runtime refuses ("Only one should be used"); merge
    # now writes its placeholder in the constant segment (tests/ondisk/test_merge.py).
    h = _write(tmp_path / "h.pte", build_program(dead=False, where="placeholder").pte)
    d = _write(tmp_path / "d.pte", build_program(dead=False).pte)
    out = tmp_path / "hd.pte"
    merge_files([h, d], out, methods=["h=h.pte:forward", "d=d.pte:forward"])
    assert validate_file(out).valid


def test_an_output_the_validator_refuses_is_not_written(tmp_path, monkeypatch):
    """The write gate (`validate_outputs`, called by `write_outputs` before any rename):
    a problem planted in the validator's answer for the written file refuses the merge."""
    import emitter_filter.ondisk.analyse.validate as validate

    real = validate.validate_file

    def planted(pte, data=()):
        found = real(pte, data)
        if Path(pte).name in ("h.pte", "d.pte"):  # the inputs, checked before anything
            return found
        return Validity(("planted problem",), found.operators, found.backends, found.missing_data)

    monkeypatch.setattr(validate, "validate_file", planted)
    h = _write(tmp_path / "h.pte", build_program(dead=False, where="placeholder").pte)
    d = _write(tmp_path / "d.pte", build_program(dead=False).pte)
    out = tmp_path / "hd.pte"
    with pytest.raises(InvalidOutputError, match="planted problem") as error:
        merge_files([h, d], out, methods=["h=h.pte:forward", "d=d.pte:forward"])
    assert str(error.value).startswith(f"{out}: not written: invalid: planted problem")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.pte", "h.pte"]


@needs_realworld
def test_hello_world_add_model_relies_on_the_constant_buffer_path(capsys):
    (pte,) = [p for p, _ in real_files() if p.name.endswith("hello_world_add_model.pte")]
    assert main(["audit", str(pte)]) == 2
    assert "invalid: relies on the constant_buffer path" in capsys.readouterr().err


@needs_realworld
@pytest.mark.parametrize("pte, ptds", real_files(), ids=lambda v: getattr(v, "name", ""))
def test_a_real_file_the_tools_read_validates_without_raising(pte, ptds):
    validity = validate_file(pte, ptds)
    assert validity.valid or validity.problems
