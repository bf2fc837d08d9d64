"""The pure-Python `.ptd` writer writes ExecuTorch's bytes: compared with its flatc, many inputs.

ExecuTorch writes the FlatTensor flatbuffer with the wheel's flatc from JSON
(`_serialize_to_flatbuffer`); `flat_tensor_writer.pack_flat_tensor` must give
the same bytes for every table, and a whole `.ptd` rebuilt from what
`read_ptd` reads of one `FlatTensorSerializer` wrote must be that file.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from emitter_filter._program_fbs.flat_tensor_flatbuffer.DataSegment import DataSegmentT
from emitter_filter._program_fbs.flat_tensor_flatbuffer.FlatTensor import FlatTensorT
from emitter_filter._program_fbs.flat_tensor_flatbuffer.NamedData import NamedDataT
from emitter_filter._program_fbs.flat_tensor_flatbuffer.TensorLayout import TensorLayoutT
from emitter_filter.ondisk.write.ptd_writer import pack_flat_tensor

serialize = pytest.importorskip("executorch.extension.flat_tensor.serialize.serialize")
schema = pytest.importorskip("executorch.extension.flat_tensor.serialize.flat_tensor_schema")

SCALAR_TYPES = [0, 1, 2, 3, 4, 5, 6, 7, 11, 15]
u64 = st.one_of(st.just(0), st.integers(0, 2**64 - 1), st.integers(0, 1 << 20))
u32 = st.one_of(st.just(0), st.integers(0, 2**32 - 1), st.integers(0, 8))
keys = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
layouts = st.one_of(
    st.none(),
    st.builds(
        lambda scalar_type, sizes, dim_order: (scalar_type, sizes, dim_order),
        st.sampled_from(SCALAR_TYPES),
        st.lists(st.integers(-(2**31), 2**31 - 1), max_size=5),
        st.lists(st.integers(0, 255), max_size=5),
    ),
)
tables = st.builds(
    lambda version, segments, named: (version, segments, named),
    u32,
    st.lists(st.tuples(u64, u64), max_size=5),
    st.lists(st.tuples(keys, u32, layouts), max_size=5),
)


def _dataclass(version, segments, named):
    """The `FlatTensor` dataclass ExecuTorch serializes."""
    from executorch.exir.scalar_type import ScalarType
    from executorch.exir.tensor_layout import TensorLayout

    return schema.FlatTensor(
        version=version,
        segments=[schema.DataSegment(offset=o, size=s) for o, s in segments],
        named_data=[
            schema.NamedData(
                key=key,
                segment_index=index,
                tensor_layout=None
                if layout is None
                else TensorLayout(
                    scalar_type=ScalarType(layout[0]), sizes=layout[1], dim_order=layout[2]
                ),
            )
            for key, index, layout in named
        ],
    )


def _table(version, segments, named) -> FlatTensorT:
    """The same table as the generated object API holds it."""
    table = FlatTensorT()
    table.version = version
    table.segments = []
    for offset, size in segments:
        segment = DataSegmentT()
        segment.offset, segment.size = offset, size
        table.segments.append(segment)
    table.namedData = []
    for key, index, layout in named:
        entry = NamedDataT()
        entry.key, entry.segmentIndex = key, index
        if layout is not None:
            entry.tensorLayout = TensorLayoutT()
            entry.tensorLayout.scalarType = layout[0]
            entry.tensorLayout.sizes, entry.tensorLayout.dimOrder = layout[1], layout[2]
        table.namedData.append(entry)
    return table


@settings(
    max_examples=150, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(tables)
def test_the_writer_packs_what_flatc_packs_from_executorchs_json(table):
    expected = bytes(serialize._serialize_to_flatbuffer(_dataclass(*table)))
    assert pack_flat_tensor(_table(*table)) == expected
    # And what it reads back from flatc's buffer packs the same.
    assert pack_flat_tensor(FlatTensorT.InitFromPackedBuf(expected, 0)) == expected


payloads = st.lists(
    st.tuples(
        st.binary(min_size=0, max_size=300),
        st.sampled_from([None, 1, 8, 16, 64, 256]),
        st.booleans(),
    ),
    min_size=1,
    max_size=5,
)


def _serialized(payload, alignments, segment_alignment: int, dropped: int | None) -> bytes:
    """The `.ptd` ExecuTorch writes for `payload`, each key with its alignment, less `dropped`."""
    from executorch.exir._serialize.data_serializer import DataEntry, DataPayload
    from executorch.exir.scalar_type import ScalarType
    from executorch.exir.tensor_layout import TensorLayout

    named = {
        f"key{i}": DataEntry(
            buffer_index=i,
            alignment=alignment,
            tensor_layout=TensorLayout(ScalarType.BYTE, [len(data)], [0]) if tensor else None,
        )
        for i, ((data, _, tensor), alignment) in enumerate(zip(payload, alignments, strict=True))
        if i != dropped
    }
    config = serialize.FlatTensorConfig(segment_alignment)
    return bytes(
        serialize.FlatTensorSerializer(config).serialize(
            DataPayload(buffers=[data for data, _, _ in payload], named_data=named)
        )
    )


@settings(
    max_examples=60, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(payloads, st.sampled_from([1, 16, 128, 4096]), st.data())
def test_a_ptd_executorch_wrote_prunes_to_what_it_writes_without_the_key(
    tmp_path_factory, payload, segment_alignment, data
):
    """The `.ptd` side of `prune` (`pruned_ptd`): byte for byte ExecuTorch's file."""
    from emitter_filter.ondisk.read.read_ptd import read_ptd
    from emitter_filter.ondisk.read.segment_layout import ptd_segment_alignments
    from emitter_filter.ondisk.write.output import write_outputs
    from emitter_filter.ondisk.write.prune_rewrite import pruned_ptd

    alignments = [alignment or 1 for _, alignment, _ in payload]
    dropped = data.draw(st.integers(0, len(payload) - 1))
    directory = tmp_path_factory.mktemp("ptd")
    path = directory / "data.ptd"
    path.write_bytes(_serialized(payload, alignments, segment_alignment, None))
    with open(path, "rb") as source:
        output = pruned_ptd(
            str(path),
            str(directory / "out.ptd"),
            source.fileno(),
            lambda key: key != f"key{dropped}",
            None,
        )
        if len(payload) == 1:
            assert output is None
            return
        write_outputs([output])
    # Where the offsets leave the alignments open, the file is one that the options
    # read back write too; the output must be what they write.
    ptd = read_ptd(path)
    read_alignment, own = next(iter(ptd_segment_alignments(ptd).items()))
    assert _serialized(payload, own, read_alignment, None) == path.read_bytes()
    expected = _serialized(payload, own, read_alignment, dropped)
    assert (directory / "out.ptd").read_bytes() == expected
