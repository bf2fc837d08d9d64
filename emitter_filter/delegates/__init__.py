"""Which named-data keys and constants a delegate's processed blob reads, backend by backend.

Every backend's `init` gets the program's merged `NamedDataMap`, and may look up any
key in it. Where a backend's blob says which keys it reads (and as what dtype and
shape), its module reads them: `xnnpack`, `vulkan`, `coreml` (a multifunction
program's reference), `aoti` (Metal's two keys). Every other backend's blob is opaque: it may read any key.
`blob_format.BlobFormat` is what each answers; `blob_format(backend_id)` finds it.

These modules read bytes only (no `executorch.exir`, whose import takes seconds),
so the in-memory hook and the file side share them.
"""

from __future__ import annotations

from emitter_filter.delegates.aoti import METAL_BACKEND_ID, METAL_FORMAT
from emitter_filter.delegates.blob_format import BlobConstant, BlobFormat, ConstantTypes
from emitter_filter.delegates.coreml import COREML_BACKEND_ID, COREML_FORMAT
from emitter_filter.delegates.vulkan import VULKAN_BACKEND_ID, VULKAN_FORMAT
from emitter_filter.delegates.xnnpack import (
    XNN_HEADER_SIZE,
    XNNPACK_BACKEND_ID,
    XNNPACK_FORMAT,
    xnnpack_constant_types,
    xnnpack_flatbuffer_span,
    xnnpack_named_keys,
    xnnpack_node_keys,
)

__all__ = [
    "BlobConstant",
    "BlobFormat",
    "ConstantTypes",
    "COREML_BACKEND_ID",
    "METAL_BACKEND_ID",
    "VULKAN_BACKEND_ID",
    "XNNPACK_BACKEND_ID",
    "XNN_HEADER_SIZE",
    "blob_format",
    "delegate_named_keys",
    "xnnpack_constant_types",
    "xnnpack_flatbuffer_span",
    "xnnpack_named_keys",
    "xnnpack_node_keys",
]

_FORMATS = {
    f.backend_id: f
    for f in (
        XNNPACK_FORMAT,
        VULKAN_FORMAT,
        COREML_FORMAT,
        METAL_FORMAT,
    )
}


def blob_format(backend_id: str) -> BlobFormat | None:
    """How `backend_id`'s blobs are read; None for a backend whose blobs are opaque."""
    return _FORMATS.get(backend_id)


def delegate_named_keys(backend_id: str, processed: bytes) -> tuple[str, ...] | None:
    """The named-data keys a delegate reads, or None when its blob is opaque.

    Args:
        backend_id: `BackendDelegate.id`.
        processed: The delegate's processed bytes. Not modified.

    Raises:
        ProgramFormatError: A readable backend's blob is malformed.
    """
    found = blob_format(backend_id)
    return None if found is None else found.named_keys(processed)
