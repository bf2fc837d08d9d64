"""AOTInductor's Metal blobs: the keys of the compiled library and its weights, one a line.

`AotiBackend.preprocess` (backends/aoti/aoti_backend.py), which `MetalBackend` uses,
stores the compiled `.so` and the weights blob as named data under content-hash keys
(`<sha256>_so_blob`, `<hash>_weights_blob`) and, since "the runtime cannot recompute
these hash keys", gives the delegate the two keys as its processed bytes, one a line.

`CudaBackend` writes other bytes (`ETCUDAFQN3` + each weight's key, from
`cuda_weight_collector.py`), and may keep a weights blob those bytes do not name: it
stays opaque until its runtime's loader is read.
"""

from __future__ import annotations

from emitter_filter.delegates.blob_format import BlobFormat
from emitter_filter.errors import ProgramFormatError

__all__ = ["METAL_BACKEND_ID", "METAL_FORMAT", "aoti_keys"]

#: `BackendDelegate.id` of Metal delegates: `backends/apple/metal/metal_backend.py:MetalBackend`.
METAL_BACKEND_ID = "MetalBackend"


def _whole_blob(head: bytes, blob_size: int) -> tuple[int, int]:
    """The blob is its two keys (~150 bytes): read whole."""
    return 0, blob_size


def aoti_keys(graph: bytes) -> tuple[str, ...]:
    """The shared library's key, then the weights blob's.

    Raises:
        ProgramFormatError: Not two UTF-8 lines, each a key.
    """
    try:
        lines = graph.decode("utf-8").split("\n")
    except UnicodeDecodeError as e:
        raise ProgramFormatError(f"AOTI blob: not UTF-8 text: {e}") from e
    if len(lines) != 2 or not all(lines):
        raise ProgramFormatError(f"AOTI blob: {len(lines)} line(s), expected two keys")
    return tuple(lines)


METAL_FORMAT = BlobFormat(
    backend_id=METAL_BACKEND_ID,
    name="Metal",
    head_size=0,
    graph_span=_whole_blob,
    keys=aoti_keys,
)
