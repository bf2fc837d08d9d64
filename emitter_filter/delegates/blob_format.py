"""The questions every backend's blob answers: its graph's span, its keys, its constants.

A backend whose processed bytes can be read gets one `BlobFormat`; its module says
how (`xnnpack`, `vulkan`, `coreml`). Callers ask `delegates.blob_format(backend_id)`
and never a backend by name, so a new backend is one module and one registry line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["BlobConstant", "BlobFormat", "ConstantTypes"]

#: Each named-data key's (dtype, dims) as the backend reads it.
ConstantTypes = dict[str, tuple[str, tuple[int, ...] | None]]


@dataclass(frozen=True)
class BlobConstant:
    """One constant tensor a delegate's graph reads.

    Attributes:
        tensor_id: The backend's own id of the tensor (its index in the graph's values).
        dtype: The `ScalarType` name its bytes are stored as (`FLOAT`, `HALF`, ...).
        dims: Its shape as the backend reads it.
        key: The named-data key it is read by; None when its bytes are in the blob.
        offset: Where its bytes start inside the blob, when they are there.
        nbytes: How many bytes the graph says it stores.
    """

    tensor_id: int
    dtype: str
    dims: tuple[int, ...]
    key: str | None
    offset: int | None
    nbytes: int


def _no_constants(graph: bytes) -> tuple[BlobConstant, ...]:
    return ()


@dataclass(frozen=True)
class BlobFormat:
    """How one backend's processed bytes are read.

    Every callable takes `graph`: the blob's first `graph_span(...)` offset + size
    bytes (its header and graph, never the constant bytes after them), and raises
    `ProgramFormatError` on bytes its runtime would refuse.

    Attributes:
        backend_id: `BackendDelegate.id` (the preprocess class's name).
        name: The backend's name in messages.
        head_size: Bytes of a blob's head `graph_span` needs.
        graph_span: (head, blob size) -> (offset, size) of the graph inside the blob.
        constants: Each constant tensor the graph reads, with its key or its bytes.
        keys: The keys the blob reads, when they are not its constants' (Core ML's
            reference names the whole model); None for a blob of this backend that
            cannot be read (then it may read any key).
        types: Each key's (dtype, dims), when they are not its constants' (XNNPACK's
            blockwise scales are `("scales", None)`).
        method_bound: Why renaming the method that calls such a delegate breaks it,
            when it does (None: a rename or a move of its named data keeps it working).
    """

    backend_id: str
    name: str
    head_size: int
    graph_span: Callable[[bytes, int], tuple[int, int]]
    constants: Callable[[bytes], tuple[BlobConstant, ...]] = _no_constants
    keys: Callable[[bytes], tuple[str, ...] | None] | None = None
    types: Callable[[bytes], ConstantTypes] | None = None
    method_bound: Callable[[bytes], str | None] | None = None

    def read_graph(self, read: Callable[[int, int], bytes], blob_size: int) -> bytes:
        """A blob's head through its graph, never its constant bytes after.

        Args:
            read: `read(start, count)` of the blob's bytes.
            blob_size: The blob's size.

        Raises:
            ProgramFormatError: The blob's header points outside it.
        """
        offset, size = self.graph_span(read(0, min(self.head_size, blob_size)), blob_size)
        return read(0, offset + size)

    def named_keys(self, graph: bytes) -> tuple[str, ...] | None:
        """The named-data keys the blob reads, in order, without repeats; None: opaque."""
        if self.keys is not None:
            return self.keys(graph)
        return tuple(dict.fromkeys(c.key for c in self.constants(graph) if c.key is not None))

    def constant_types(self, graph: bytes) -> ConstantTypes:
        """Each named-data key's (dtype, dims) as the first tensor that reads it has them."""
        if self.types is not None:
            return self.types(graph)
        types: ConstantTypes = {}
        for constant in self.constants(graph):
            if constant.key is not None:
                types.setdefault(constant.key, (constant.dtype, constant.dims))
        return types

    def inline_constants(self, graph: bytes) -> tuple[BlobConstant, ...]:
        """The constants whose bytes are inside the blob (for explain), by offset."""
        inline = (c for c in self.constants(graph) if c.offset is not None and c.nbytes)
        return tuple(sorted(inline, key=lambda c: c.offset or 0))

    def rename_breaks(self, graph: bytes) -> str | None:
        """Why this blob stops working when its method is renamed; None if it does not."""
        return None if self.method_bound is None else self.method_bound(graph)
