"""Core ML's blobs: a multifunction program's `CMJR` reference, read; a whole model, not.

`CoreMLBackend.preprocess_multimethod` (backends/apple/coreml/compiler/
coreml_preprocess.py), asked to share weights between methods, stores each
partition's multifunction model once as named data (key `coreml_<uuid>`) and gives
every method's delegate the bytes `CMJR` + JSON `{"version": 1, "key": ...,
"functionName": <method>}`. The runtime loads the model by that key, and looks the
method's input and output names up in the model's metadata by the ExecuTorch method
name (`BackendInitContext::get_method_name`), so such a method cannot be renamed.

Any other Core ML blob is a flattened model directory (weights inside, no key): it
stays opaque, as Core ML's runtime is not here to say it reads no named data.
"""

from __future__ import annotations

import json

from emitter_filter.delegates.blob_format import BlobFormat
from emitter_filter.errors import ProgramFormatError

__all__ = ["COREML_BACKEND_ID", "COREML_FORMAT", "coreml_reference"]

#: `BackendDelegate.id` of Core ML delegates: the name of
#: `backends/apple/coreml/compiler/coreml_preprocess.py:CoreMLBackend`.
COREML_BACKEND_ID = "CoreMLBackend"

_MAGIC = b"CMJR"


def _whole_blob(head: bytes, blob_size: int) -> tuple[int, int]:
    """A reference is its whole blob (a few dozen bytes); a model directory is not read."""
    return (0, blob_size) if head[:4] == _MAGIC else (0, 0)


def coreml_reference(graph: bytes) -> dict[str, object] | None:
    """The JSON a `CMJR` blob holds; None for a model directory.

    Raises:
        ProgramFormatError: `CMJR` followed by no JSON object with a string `key`.
    """
    if graph[:4] != _MAGIC:
        return None
    try:
        reference = json.loads(graph[4:].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProgramFormatError(f"Core ML reference: not JSON: {e}") from e
    if not isinstance(reference, dict) or not isinstance(reference.get("key"), str):
        raise ProgramFormatError("Core ML reference: no string 'key'")
    return reference


def _keys(graph: bytes) -> tuple[str, ...] | None:
    reference = coreml_reference(graph)
    return None if reference is None else (str(reference["key"]),)


def _method_bound(graph: bytes) -> str | None:
    reference = coreml_reference(graph)
    if reference is None:
        return None
    return (
        f"Core ML looks function {reference.get('functionName')!r} of model "
        f"{reference['key']!r} up by the ExecuTorch method name"
    )


COREML_FORMAT = BlobFormat(
    backend_id=COREML_BACKEND_ID,
    name="Core ML",
    head_size=len(_MAGIC),
    graph_span=_whole_blob,
    keys=_keys,
    method_bound=_method_bound,
)
