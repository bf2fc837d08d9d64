"""Fields of the flatbuffers object API's model as plain Python values.

The tables `flatbuffer_tables` decodes, like the object API generated from ExecuTorch's
schemas (`emitter_filter._program_fbs`), give strings as bytes and absent vectors as None
(vectors as lists, or numpy arrays from the generated code). These helpers import neither,
so a module that only reads such fields stays below them in the import graph.
"""

from __future__ import annotations

__all__ = ["table_text", "vector_ints"]


def table_text(value: bytes | str | None) -> str | None:
    """A generated string field as text (the object API gives bytes)."""
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def vector_ints(vector) -> list[int]:
    """A generated vector field as a list; the object API leaves absent vectors None."""
    return [] if vector is None else [int(i) for i in vector]
