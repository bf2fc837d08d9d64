"""The tables of ExecuTorch's native graph (`program.ptg` in a `.ptn`) that the reader needs.

In the words of backends/native/serialization/native_graph.fbs (ExecuTorch 1.5.1; keep in
sync): every table on the way from `Program` to the data keys a method reads, each with its
fields in declaration order so that a field's vtable slot is its position; fields typed
`None` are ones nobody here reads (they keep their slot). The keys a method reads are its
constants' `data_key`s and the `AffineGroup` scale and zero-point keys on any `TensorMeta`,
subgraphs (`GraphArg`) included, as upstream's `collect_data_keys` counts them.
"""

from __future__ import annotations

from emitter_filter.program.flatbuffer_tables import Schema

__all__ = ["NATIVE_GRAPH", "NATIVE_GRAPH_IDENTIFIER", "GRAPH_ARG"]

#: The file identifier of `program.ptg`.
NATIVE_GRAPH_IDENTIFIER = b"NPTG"

# ArgumentValue's members, in the .fbs order (type 1 is the first).
_ARGUMENT_VALUES = (
    "TensorArg",
    "NoneArg",
    "IntArg",
    "FloatArg",
    "BoolArg",
    "StringArg",
    "ScalarTypeArg",
    "IntListArg",
    "FloatListArg",
    "BoolListArg",
    "TensorListArg",
    "OptionalTensorListArg",
    "GraphArg",
)
#: `Argument.valueType` of a subgraph.
GRAPH_ARG = _ARGUMENT_VALUES.index("GraphArg") + 1

NATIVE_GRAPH = Schema(
    "native_backend",
    root="Program",
    tables={
        "AffineGroup": (
            ("scale_data_key", "string"),
            ("scale_dtype", None),
            ("quant_min", None),
            ("quant_max", None),
            ("group_size", None),
            ("zero_point_data_key", "string"),
            ("zero_point_dtype", None),
        ),
        "PackedQuant": (("codec", "string"),),
        "QuantSpec": (("scheme", "QuantScheme"),),
        "TensorMeta": (
            ("dtype", "byte"),
            ("sizes", None),
            ("dim_order", None),
            ("quant", "QuantSpec"),
        ),
        "TensorValue": (("name", "string"), ("meta", "TensorMeta")),
        # Every member but GraphArg is read as an empty table: its fields name values, not data.
        **{name: () for name in _ARGUMENT_VALUES if name != "GraphArg"},
        "GraphArg": (("name", "string"), ("graph", "Graph")),
        "Argument": (("value", "ArgumentValue"),),
        "NamedArgument": (("name", None), ("arg", "Argument"), ("mutated", None)),
        "Node": (
            ("name", "string"),
            ("op_kind", None),
            ("target", "string"),
            ("inputs", "[NamedArgument]"),
            ("outputs", None),
            ("metadata", None),
        ),
        "NamedTensorRef": (
            ("name", "string"),
            ("data_key", "string"),
            ("meta", "TensorMeta"),
            ("kind", "byte"),
            ("mutated", "bool"),
        ),
        "Graph": (
            ("nodes", "[Node]"),
            ("inputs", None),
            ("outputs", None),
            ("tensor_values", "[TensorValue]"),
        ),
        "Method": (
            ("name", "string"),
            ("graph", "Graph"),
            ("constants", "[NamedTensorRef]"),
            ("output_specs", None),
            ("mutable_buffers", None),
        ),
        "Program": (("version", "string"), ("methods", "[Method]")),
    },
    unions={
        "QuantScheme": ("AffineGroup", "PackedQuant"),
        "ArgumentValue": _ARGUMENT_VALUES,
    },
)
