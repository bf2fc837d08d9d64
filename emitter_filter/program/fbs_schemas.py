"""The tables of ExecuTorch's flatbuffer schemas that `flatbuffer_tables` reads, in their words.

Each table is its fields in declaration order, as the `.fbs` file declares them,
so a field's vtable slot is its position (a union takes two: its type, then its
value). Types are spelled as in the `.fbs` files: a scalar (`int`, `uint64`,
`bool`, an enum's underlying type), `string`, `[T]`, or another table's or a
union's name. A field typed `None` is one nobody here reads: it keeps its slot
and is skipped.

- `PROGRAM`: schema/program.fbs and scalar_type.fbs (the `.pte` program), every field;
- `FLAT_TENSOR`: extension/flat_tensor/serialize/flat_tensor.fbs (the `.ptd` file), every field;
- `XNNPACK`: backends/xnnpack/serialization/schema.fbs, only `XNNGraph.constant_data`
  (the named-data keys a blob reads);
- `XNNPACK_VALUES`: the same schema, only `XNNGraph.xvalues` (each tensor value's datatype,
  dims, constant and per-channel-group scales) and `constant_data`: the type each key is
  read as (`xnnpack_constant_types`, which the proof asks of every blob it compares);
- `VULKAN`: backends/vulkan/serialization/schema.fbs, only `VkGraph.values` (each
  `VkTensor`'s datatype, dims and constant) and `VkGraph.constants` (their bytes or keys);
  `VULKAN_KEYS` only `VkGraph.constants` (every command reads a blob's keys; only
  `explain` needs the tensors).

The generated object API (`emitter_filter._program_fbs`) is generated from the
same files (but Vulkan's, which is only read); `tests/test_flatbuffer_tables.py` checks
every table here against it, and `tests/test_delegates_vulkan.py` Vulkan's against the
graph ExecuTorch's own `flatc` decodes.
"""

from __future__ import annotations

from emitter_filter.program.flatbuffer_tables import Schema

__all__ = ["PROGRAM", "FLAT_TENSOR", "XNNPACK", "XNNPACK_VALUES", "VULKAN", "VULKAN_KEYS"]

PROGRAM = Schema(
    "executorch_flatbuffer",
    root="Program",
    tables={
        "ContainerMetadata": (("encoded_inp_str", "string"), ("encoded_out_str", "string")),
        "Null": (),
        "AllocationDetails": (
            ("memory_id", "uint"),
            ("memory_offset_low", "uint"),
            ("memory_offset_high", "uint"),
        ),
        "ExtraTensorInfo": (
            ("mutable_data_segments_idx", "uint64"),
            ("fully_qualified_name", "string"),
            ("location", "byte"),  # TensorDataLocation
            ("device_type", "byte"),  # DeviceType = CPU (0)
            ("device_index", "byte"),
        ),
        "Tensor": (
            ("scalar_type", "byte"),  # ScalarType
            ("storage_offset", "int"),
            ("sizes", "[int]"),
            ("dim_order", "[ubyte]"),
            ("requires_grad", "bool"),
            ("data_buffer_idx", "uint"),
            ("allocation_info", "AllocationDetails"),
            ("layout", "byte"),
            ("shape_dynamism", "byte"),  # TensorShapeDynamism
            ("extra_tensor_info", "ExtraTensorInfo"),
        ),
        "Int": (("int_val", "long"),),
        "Bool": (("bool_val", "bool"),),
        "Double": (("double_val", "double"),),
        "String": (("string_val", "string"),),
        "IntList": (("items", "[long]"),),
        "DoubleList": (("items", "[double]"),),
        "BoolList": (("items", "[bool]"),),
        "TensorList": (("items", "[int]"),),
        "OptionalTensorList": (("items", "[int]"),),
        "EValue": (("val", "KernelTypes"),),
        "Operator": (("name", "string"), ("overload", "string")),
        "KernelCall": (("op_index", "int"), ("args", "[int]")),
        "DelegateCall": (("delegate_index", "int"), ("args", "[int]")),
        "MoveCall": (("move_from", "int"), ("move_to", "int")),
        "JumpFalseCall": (("cond_value_index", "int"), ("destination_instruction", "int")),
        "FreeCall": (("value_index", "int"),),
        "Instruction": (("instr_args", "InstructionArguments"),),
        "Frame": (
            ("filename", "string"),
            ("lineno", "int"),
            ("name", "string"),
            ("context", "string"),
        ),
        "FrameList": (("items", "[Frame]"),),
        "BackendDelegateDataReference": (("location", "byte"), ("index", "uint")),
        "CompileSpec": (("key", "string"), ("value", "[ubyte]")),
        "BackendDelegate": (
            ("id", "string"),
            ("processed", "BackendDelegateDataReference"),
            ("compile_specs", "[CompileSpec]"),
        ),
        "Chain": (
            ("inputs", "[int]"),
            ("outputs", "[int]"),
            ("instructions", "[Instruction]"),
            ("stacktrace", "[FrameList]"),
        ),
        "ExecutionPlan": (
            ("name", "string"),
            ("container_meta_type", "ContainerMetadata"),
            ("values", "[EValue]"),
            ("inputs", "[int]"),
            ("outputs", "[int]"),
            ("chains", "[Chain]"),
            ("operators", "[Operator]"),
            ("delegates", "[BackendDelegate]"),
            ("non_const_buffer_sizes", "[int64]"),
            ("non_const_buffer_device", "[NonConstBufferDevice]"),
        ),
        "NonConstBufferDevice": (
            ("buffer_idx", "int"),
            ("device_type", "byte"),
            ("device_index", "byte"),
        ),
        "Buffer": (("storage", "[ubyte]"),),
        "BackendDelegateInlineData": (("data", "[ubyte]"),),
        "DataSegment": (("offset", "uint64"), ("size", "uint64")),
        "SubsegmentOffsets": (("segment_index", "uint"), ("offsets", "[uint64]")),
        "NamedData": (("key", "string"), ("segment_index", "uint32")),
        "Program": (
            ("version", "uint"),
            ("execution_plan", "[ExecutionPlan]"),
            ("constant_buffer", "[Buffer]"),
            ("backend_delegate_data", "[BackendDelegateInlineData]"),
            ("segments", "[DataSegment]"),
            ("constant_segment", "SubsegmentOffsets"),
            ("mutable_data_segments", "[SubsegmentOffsets]"),
            ("named_data", "[NamedData]"),
        ),
    },
    unions={
        "KernelTypes": (
            "Null",
            "Int",
            "Bool",
            "Double",
            "Tensor",
            "String",
            "IntList",
            "DoubleList",
            "BoolList",
            "TensorList",
            "OptionalTensorList",
        ),
        "InstructionArguments": (
            "KernelCall",
            "DelegateCall",
            "MoveCall",
            "JumpFalseCall",
            "FreeCall",
        ),
    },
)

FLAT_TENSOR = Schema(
    "flat_tensor_flatbuffer",
    root="FlatTensor",
    tables={
        "TensorLayout": (
            ("scalar_type", "byte"),  # executorch_flatbuffer.ScalarType
            ("sizes", "[int32]"),
            ("dim_order", "[uint8]"),
        ),
        "DataSegment": (("offset", "uint64"), ("size", "uint64")),
        "NamedData": (
            ("key", "string"),
            ("segment_index", "uint32"),
            ("tensor_layout", "TensorLayout"),
        ),
        "FlatTensor": (
            ("version", "uint32"),
            ("segments", "[DataSegment]"),
            ("named_data", "[NamedData]"),
        ),
    },
)

XNNPACK = Schema(
    "fb_xnnpack",
    root="XNNGraph",
    tables={
        "ConstantDataOffset": (("offset", "uint64"), ("size", "uint64"), ("named_key", "string")),
        "XNNGraph": (
            ("version", None),
            ("xnodes", None),
            ("xvalues", None),
            ("num_externs", None),
            ("input_ids", None),
            ("output_ids", None),
            ("constant_buffer", None),  # deprecated: keeps its slot
            ("mem_buffer_sizes", None),  # deprecated: keeps its slot
            ("constant_data", "[ConstantDataOffset]"),
        ),
    },
)

XNNPACK_VALUES = Schema(
    "fb_xnnpack",
    root="XNNGraph",
    tables={
        "ConstantDataOffset": (("offset", None), ("size", None), ("named_key", "string")),
        "XNNTensorValue": (
            ("datatype", "short"),  # XNNDatatype
            ("num_dims", None),
            ("dims", "[uint]"),
            ("constant_buffer_idx", "uint"),
            ("external_id", None),
            ("flags", None),
            ("id_out", None),
        ),
        # Members of `union XNNQuantParams` but the last: read by their type alone.
        **{name: () for name in ("PerChannelQuant", "PerTensorQuant", "PerTokenDynamicQuant")},
        "PerChannelGroupQuant": (
            ("scale", None),
            ("channel_dim", None),
            ("group_size", None),
            ("scale_bf16", None),  # deprecated: keeps its slot
            ("scale_buffer_idx", "uint"),
            ("num_scales", None),
        ),
        "XNNQuantizedTensorValue": (
            ("tensor_value", "XNNTensorValue"),
            ("quant_params", "XNNQuantParams"),
        ),
        "XValue": (("xvalue_union", "XValueUnion"),),
        "XNNGraph": (
            ("version", None),
            ("xnodes", None),
            ("xvalues", "[XValue]"),
            ("num_externs", None),
            ("input_ids", None),
            ("output_ids", None),
            ("constant_buffer", None),
            ("mem_buffer_sizes", None),
            ("constant_data", "[ConstantDataOffset]"),
        ),
    },
    unions={
        "XValueUnion": ("XNNTensorValue", "XNNQuantizedTensorValue"),
        "XNNQuantParams": (
            "PerChannelQuant",
            "PerTensorQuant",
            "PerTokenDynamicQuant",
            "PerChannelGroupQuant",
        ),
    },
)

# Members of `union GraphTypes` nobody here reads are tables without fields: their
# vtables are read, their fields skipped.
_VK_UNREAD = ("Null", "Int", "Double", "Bool", "IntList", "DoubleList", "BoolList")

VULKAN = Schema(
    "vkgraph",
    root="VkGraph",
    tables={
        **{name: () for name in (*_VK_UNREAD, "ValueList", "String", "SymInt")},
        "VkTensor": (
            ("datatype", "byte"),  # VkDataType
            ("dims", "[uint]"),
            ("constant_id", "int"),  # index into VkGraph.constants; negative: none
            ("mem_obj_id", None),
            ("storage_type", None),
            ("memory_layout", None),
            ("staging_datatype", None),
        ),
        "VkValue": (("value", "GraphTypes"),),
        "VkBytes": (("offset", "ulong"), ("length", "ulong"), ("named_key", "string")),
        "VkGraph": (
            ("version", None),
            ("chain", None),
            ("values", "[VkValue]"),
            ("input_ids", None),
            ("output_ids", None),
            ("constants", "[VkBytes]"),
            ("shaders", None),
            ("storage_type_override", None),
            ("memory_layout_override", None),
        ),
    },
    unions={
        "GraphTypes": (
            "Null",
            "Int",
            "Double",
            "Bool",
            "VkTensor",
            "IntList",
            "DoubleList",
            "BoolList",
            "ValueList",
            "String",
            "SymInt",
        ),
    },
)

VULKAN_KEYS = Schema(
    "vkgraph",
    root="VkGraph",
    tables={
        "VkBytes": VULKAN.tables["VkBytes"],
        "VkGraph": tuple((f, None if f == "values" else k) for f, k in VULKAN.tables["VkGraph"]),
    },
)
