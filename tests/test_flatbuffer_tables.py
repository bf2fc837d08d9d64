"""`flatbuffer_tables` reads what the generated object API reads, and nothing outside the buffer.

The schema descriptions (`fbs_schemas`) are checked against the object API
generated from the same `.fbs` files: the same attributes in the same slots
with the same defaults. Then random tables of every schema, packed by the
object API, are decoded back equal; the test programs decode as the object API
unpacks them; damaged buffers raise `FlatbufferError` and nothing else.
"""

from __future__ import annotations

import importlib
import struct

import flatbuffers
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from emitter_filter.program.fbs_schemas import FLAT_TENSOR, PROGRAM, XNNPACK
from emitter_filter.program.flatbuffer_tables import (
    FlatbufferError,
    Table,
    attribute_name,
    to_object_api,
)

pytestmark = pytest.mark.filetools

_RANGES = {
    "?": None,
    "b": (-(1 << 7), (1 << 7) - 1),
    "B": (0, (1 << 8) - 1),
    "h": (-(1 << 15), (1 << 15) - 1),
    "H": (0, (1 << 16) - 1),
    "i": (-(1 << 31), (1 << 31) - 1),
    "I": (0, (1 << 32) - 1),
    "q": (-(1 << 63), (1 << 63) - 1),
    "Q": (0, (1 << 64) - 1),
}


def _generated(schema, table: str):
    module = importlib.import_module(f"emitter_filter._program_fbs.{schema.namespace}.{table}")
    return getattr(module, table + "T")


def _plain(value):
    """A decoded or generated table as nested (name, {field: value}), numbers as Python's."""
    if isinstance(value, Table) or hasattr(value, "Pack"):
        name = type(value).__name__.removesuffix("T")
        fields = value._attributes if isinstance(value, Table) else list(vars(value))
        return name, {field: _plain(getattr(value, field)) for field in fields}
    if isinstance(value, (list, tuple)) or type(value).__name__ == "ndarray":
        return [_plain(item) for item in value]
    if type(value).__module__ == "numpy":
        return value.item()
    return value


@pytest.mark.parametrize("schema", (PROGRAM, FLAT_TENSOR), ids=lambda s: s.namespace)
def test_every_described_table_has_the_object_apis_fields_in_slot_order(schema):
    # XNNPACK's readers are generated without the object API: its slots are checked
    # by reading the test programs' blobs with both (below).
    for name, cls in schema.classes.items():
        generated = vars(_generated(schema, name)())
        assert generated == dict(zip(cls._attributes, cls._defaults, strict=True)), name
        assert list(generated) == list(cls._attributes), name


def _scalar(code: str):
    if code == "?":
        return st.booleans()
    if code in "fd":
        return st.floats(allow_nan=False, width=32 if code == "f" else 64)
    return st.integers(*_RANGES[code])


def _field_values(schema, kind: str, depth: int):
    from emitter_filter.program.flatbuffer_tables import _SCALARS

    if kind in _SCALARS:
        return _scalar(_SCALARS[kind])
    if kind == "string":
        return st.none() | st.binary(max_size=12)
    if kind.startswith("["):
        item = kind[1:-1]
        if item in _SCALARS:
            return st.none() | st.lists(_scalar(_SCALARS[item]), max_size=5)
        return st.none() | st.lists(_tables(schema, item, depth + 1), max_size=3)
    return st.none() | _tables(schema, kind, depth + 1)


def _tables(schema, name: str, depth: int = 0):
    """Random tables of `schema.name`: each field its type's values, absent or present."""
    cls = schema.classes[name]
    if depth > 5:
        return st.just(cls())
    fields = {}
    for field, kind in schema.tables[name]:
        if kind is None:
            continue
        attribute = attribute_name(field)
        if kind in schema.unions:
            members = schema.unions[kind]
            fields[attribute] = st.one_of(
                st.just((0, None)),
                *(
                    st.tuples(st.just(number), _tables(schema, member, depth + 1))
                    for number, member in enumerate(members, start=1)
                ),
            )
        else:
            fields[attribute] = _field_values(schema, kind, depth)

    def build(values: dict) -> Table:
        table = cls()
        for attribute, value in values.items():
            if isinstance(value, tuple):
                setattr(table, attribute + "Type", value[0])
                value = value[1]
            setattr(table, attribute, value)
        return table

    return st.fixed_dictionaries(fields).map(build)


def _pack(table: Table, force_defaults: bool = False) -> bytes:
    builder = flatbuffers.Builder(64)
    builder.ForceDefaults(force_defaults)
    builder.Finish(to_object_api(table).Pack(builder))
    return bytes(builder.Output())


@pytest.mark.parametrize("schema", (PROGRAM, FLAT_TENSOR), ids=lambda s: s.namespace)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), force_defaults=st.booleans())
def test_a_packed_table_decodes_to_what_was_packed(schema, data, force_defaults):
    table = data.draw(_tables(schema, schema.root))
    packed = _pack(table, force_defaults)
    decoded = schema.read(packed)
    assert _plain(decoded) == _plain(table)
    # And as the object API unpacks the same bytes.
    generated = _generated(schema, schema.root).InitFromPackedBuf(packed, 0)
    assert _plain(decoded) == _plain(generated)


def test_the_test_programs_decode_as_the_object_api_unpacks_them(built):
    from emitter_filter.ondisk.read.read_pte import read_pte_program

    for name, case in built.items():
        read = read_pte_program(case.pte)
        generated = _generated(PROGRAM, "Program").InitFromPackedBuf(read.program_data, 0)
        assert _plain(read.program) == _plain(generated), name


def test_the_xnnpack_keys_are_the_generated_readers(built):
    from emitter_filter._program_fbs.fb_xnnpack.XNNGraph import XNNGraph
    from emitter_filter.delegates import xnnpack_flatbuffer_span
    from emitter_filter.ondisk.read.read_pte import read_pte

    blobs = 0
    for case in built.values():
        for blob in read_pte(case.pte).delegates:
            if blob.named_keys is None or blob.location != "segment":
                continue
            data = case.pte.read_bytes()[blob.offset : blob.offset + blob.nbytes]
            offset, _ = xnnpack_flatbuffer_span(data[:32], len(data))
            graph = XNNGraph.GetRootAs(data, offset)
            expected = [graph.ConstantData(i).NamedKey() for i in range(graph.ConstantDataLength())]
            decoded = XNNPACK.read(data, offset).constantData
            assert [entry.namedKey for entry in decoded] == expected
            blobs += 1
    assert blobs


def test_the_xnnpack_constant_types_are_the_generated_readers(built):
    # `xnnpack_constant_types` reads XNNPACK_VALUES (the proof asks it of every blob); the
    # generated readers, which it falls back to where that reader refuses, answer the same.
    from emitter_filter.delegates import xnnpack
    from emitter_filter.ondisk.read.read_pte import read_pte

    blobs = 0
    for name, case in built.items():
        for blob in read_pte(case.pte).delegates:
            if blob.named_keys is None or blob.location != "segment":
                continue
            data = case.pte.read_bytes()[blob.offset : blob.offset + blob.nbytes]
            expected = xnnpack._generated_constant_types(data)
            found = xnnpack.xnnpack_constant_types(data)
            assert list(found.items()) == list(expected.items()), name
            blobs += 1
    assert blobs


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_a_damaged_program_is_read_or_refused_never_misread_outside(built, data):
    from emitter_filter.ondisk.read.read_pte import read_pte_program

    case = data.draw(st.sampled_from(sorted(built)))
    program = bytearray(read_pte_program(built[case].pte).program_data)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(program) - 1))
        program[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(8, len(program)))
    try:
        PROGRAM.read(bytes(program[:cut]))
    except FlatbufferError:
        pass


def test_a_vector_longer_than_its_buffer_is_refused_before_it_is_read():
    table = PROGRAM.Program(segments=[PROGRAM.DataSegment(offset=1, size=2)])
    packed = bytearray(_pack(table))
    segments = PROGRAM.read(bytes(packed))
    start = PROGRAM.vector_at(bytes(packed), segments, "segments")
    struct.pack_into("<I", packed, start - 4, 1 << 30)  # the vector's length
    with pytest.raises(FlatbufferError, match="overrun"):
        PROGRAM.read(bytes(packed))


def test_a_vtable_before_the_buffer_is_refused():
    packed = bytearray(_pack(PROGRAM.Program(version=3)))
    root = struct.unpack_from("<I", packed)[0]
    struct.pack_into("<i", packed, root, root + 100)  # soffset to a vtable before 0
    with pytest.raises(FlatbufferError, match="before the buffer"):
        PROGRAM.read(bytes(packed))


def test_where_a_field_is_stored_is_where_the_object_api_finds_it():
    from emitter_filter._program_fbs.executorch_flatbuffer.Program import Program

    table = PROGRAM.Program(
        segments=[PROGRAM.DataSegment(offset=7, size=0), PROGRAM.DataSegment(offset=0, size=9)],
        constantSegment=PROGRAM.SubsegmentOffsets(segmentIndex=1, offsets=[0, 16]),
    )
    packed = _pack(table)
    decoded, generated = PROGRAM.read(packed), Program.GetRootAs(packed, 0)
    for index, segment in enumerate(decoded.segments):
        tab = generated.Segments(index)._tab
        for field, slot in (("offset", 4), ("size", 6)):
            expected = tab.Offset(slot)
            assert PROGRAM.field_at(packed, segment, field) == (
                tab.Pos + expected if expected else None
            )
    constant = generated.ConstantSegment()._tab
    assert PROGRAM.vector_at(packed, decoded.constantSegment, "offsets") == constant.Vector(
        constant.Offset(6)
    )


def _stub_methods(stub) -> dict[str, set[str]]:
    import ast

    tree = ast.parse(stub.read_text())
    return {
        node.name: {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
        for node in tree.body
        if isinstance(node, ast.ClassDef)
    }


def test_the_xnnpack_stubs_name_what_the_generated_readers_have():
    # The .pyi stubs beside fb_xnnpack's readers are written by hand, for mypy: a
    # regeneration that renames or drops an accessor must fail here, not at run time.
    import pathlib

    from emitter_filter._program_fbs import fb_xnnpack

    stubs = sorted(pathlib.Path(fb_xnnpack.__path__[0]).glob("*.pyi"))
    assert stubs
    for stub in stubs:
        module = importlib.import_module(f"{fb_xnnpack.__name__}.{stub.stem}")
        for name, methods in _stub_methods(stub).items():
            cls = getattr(module, name)
            generated = {m for m in vars(cls) if not m.startswith("_")}
            deprecated = {f"GetRootAs{name}", f"{name}BufferHasIdentifier"}
            assert methods == generated - deprecated, stub.name
