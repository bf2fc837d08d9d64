"""Vulkan's blobs: a `VH00` header, a `VkGraph` flatbuffer (`VK00`), then constant bytes.

Mirrors `VulkanDelegateHeader` and `serialize_vulkan_graph` in
backends/vulkan/serialization/vulkan_graph_serialize.py (and the runtime's
VulkanDelegateHeader.cpp), little-endian, each part padded to 16 bytes: 4 zero
bytes, magic `VH00`, u16 header length (30), u32 flatbuffer offset, u32
flatbuffer size, u32 constant-bytes offset, u64 constant-bytes size.

A weight the graph reads is a `VkTensor` whose `constant_id` indexes
`VkGraph.constants`; that `VkBytes` either names a key of the named data
(`named_key`, offset UINT64_MAX: every parameter since executorch 1.0, keyed by the
sha256 of its bytes as `vulkan_graph_builder.py` writes it) or points into the
blob's constant bytes (`offset`, `length`). The constant bytes are converted to the
tensor's `datatype` before they are stored, so the datatype is the stored one.
"""

from __future__ import annotations

import struct

from emitter_filter.delegates.blob_format import BlobConstant, BlobFormat
from emitter_filter.errors import ProgramFormatError
from emitter_filter.program.fbs_schemas import VULKAN, VULKAN_KEYS
from emitter_filter.program.flatbuffer_tables import FlatbufferError

__all__ = [
    "VULKAN_BACKEND_ID",
    "VULKAN_FORMAT",
    "vulkan_constants",
    "vulkan_graph_span",
    "vulkan_named_keys",
]

#: `BackendDelegate.id` of Vulkan delegates: the name of
#: `backends/vulkan/vulkan_preprocess.py:VulkanBackend`.
VULKAN_BACKEND_ID = "VulkanBackend"

_VK_HEADER = struct.Struct("<4s4sHIIIQ")
_VK_HEADER_MAGIC = b"VH00"
_VK_FLATBUFFER_ID = b"VK00"
# `VkBytes.offset` of a constant stored as named data.
_NAMED = (1 << 64) - 1
# VkDataType (schema.fbs) as the `ScalarType` whose elements it stores.
_SCALAR_TYPES = {
    0: "BOOL",
    1: "BYTE",
    2: "CHAR",
    3: "INT",
    4: "HALF",
    5: "FLOAT",
    6: "DOUBLE",
    7: "LONG",
}
# `GraphTypes` member number of `VkTensor` (the union's fifth member).
_VK_TENSOR = VULKAN.unions["GraphTypes"].index("VkTensor") + 1


def vulkan_graph_span(head: bytes, blob_size: int) -> tuple[int, int]:
    """(offset, size) of the `VkGraph` flatbuffer inside a Vulkan blob.

    Args:
        head: The blob's first `_VK_HEADER.size` bytes (fewer if it is shorter).
        blob_size: The blob's size.

    Raises:
        ProgramFormatError: No `VH00` header (the runtime refuses a blob without
            one), or its flatbuffer lies outside the blob.
    """
    if len(head) < _VK_HEADER.size or head[4:8] != _VK_HEADER_MAGIC:
        raise ProgramFormatError(f"Vulkan blob without its {_VK_HEADER_MAGIC!r} header")
    _, _, _, offset, size, _, _ = _VK_HEADER.unpack_from(head)
    if offset + size > blob_size:
        raise ProgramFormatError(
            f"Vulkan flatbuffer offset {offset} + size {size} > blob size {blob_size}"
        )
    return offset, size


def _constant_bytes_offset(graph: bytes) -> int:
    """Where the blob's constant bytes start (the header's `bytes_offset`)."""
    return _VK_HEADER.unpack_from(graph)[5]


def _read(schema, graph: bytes):
    """The blob's `VkGraph`, decoded with `schema`, its header and identifier checked."""
    offset, size = vulkan_graph_span(graph[: _VK_HEADER.size], len(graph))
    if size < 8 or graph[offset + 4 : offset + 8] != _VK_FLATBUFFER_ID:
        raise ProgramFormatError(
            f"Vulkan flatbuffer identifier {graph[offset + 4 : offset + 8]!r} "
            f"is not {_VK_FLATBUFFER_ID!r}"
        )
    try:
        return schema.read(graph[: offset + size], offset)
    except FlatbufferError as e:
        raise ProgramFormatError(f"malformed Vulkan flatbuffer: {e}") from e


def vulkan_named_keys(graph: bytes) -> tuple[str, ...]:
    """The keys of the blob's `constants`, in order, without repeats: those its tensors
    read by `constant_id` (a constant no tensor reads is kept: the runtime loads
    every entry of `constants` it is asked for, and a blob's own list is its word)."""
    root = _read(VULKAN_KEYS, graph)
    keys = (e.namedKey.decode("utf-8", "replace") for e in root.constants or () if e.namedKey)
    return tuple(dict.fromkeys(keys))


def vulkan_constants(graph: bytes) -> tuple[BlobConstant, ...]:
    """Each constant tensor a Vulkan graph reads, in `VkGraph.values` order.

    Args:
        graph: The blob's bytes, or at least its header and flatbuffer. Not modified.

    Raises:
        ProgramFormatError: The blob is not a Vulkan graph the runtime would load.
    """
    root = _read(VULKAN, graph)
    constants = root.constants or []
    base = _constant_bytes_offset(graph)
    found = []
    for value_id, value in enumerate(root.values or ()):
        tensor = value.value
        if value.valueType != _VK_TENSOR or tensor is None or tensor.constantId < 0:
            continue
        if tensor.constantId >= len(constants):
            raise ProgramFormatError(
                f"Vulkan value {value_id}: constant_id {tensor.constantId} "
                f">= len(constants) {len(constants)}"
            )
        entry = constants[tensor.constantId]
        key = entry.namedKey.decode("utf-8", "replace") if entry.namedKey else None
        found.append(
            BlobConstant(
                value_id,
                _SCALAR_TYPES.get(tensor.datatype, f"VkDataType({tensor.datatype})"),
                tuple(tensor.dims or ()),
                key,
                None if key is not None or entry.offset == _NAMED else base + entry.offset,
                entry.length,
            )
        )
    return tuple(found)


VULKAN_FORMAT = BlobFormat(
    backend_id=VULKAN_BACKEND_ID,
    name="Vulkan",
    head_size=_VK_HEADER.size,
    graph_span=vulkan_graph_span,
    constants=vulkan_constants,
    keys=vulkan_named_keys,
)
