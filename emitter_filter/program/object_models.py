"""The two object models of ExecuTorch's program schema, described once for shared code.

In process, a program is `exir.schema`'s dataclasses (snake_case fields, union
members told apart by class); on disk, the flatbuffers object API's model, which
`flatbuffer_tables` decodes into and the generated `emitter_filter._program_fbs`
packs (camelCase fields, union members told apart by a `...Type` enum, strings
as bytes, absent vectors as None). Both spell the same
schema, so code that walks a program (`plan_indices`) takes an `ObjectModel` and
reads every field through it by its schema name. Neither model is imported here:
the in-process side stays free of it on disk, and the reverse.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from emitter_filter._program_fbs.executorch_flatbuffer.InstructionArguments import (
    InstructionArguments,
)
from emitter_filter._program_fbs.executorch_flatbuffer.KernelTypes import KernelTypes
from emitter_filter.program.flatbuffer_tables import attribute_name
from emitter_filter.program.generated_fields import table_text, vector_ints

__all__ = ["ObjectModel", "EXIR_SCHEMA", "GENERATED"]


def _names(enum) -> dict[int, str]:
    return {value: name for name, value in vars(enum).items() if not name.startswith("_")}


@dataclass(frozen=True)
class ObjectModel:
    """How one object model spells the schema.

    Attributes:
        field: Its attribute name for a schema field name (`move_from`).
        instruction: (kind, arguments) of an `Instruction`, the kind by its schema
            name (`KernelCall`); the arguments may be None in a corrupt file.
        value: (kind, table) of an `EValue`, the kind by its schema name
            (`Tensor`; `NONE` for an absent union).
        text: A string field as `str` (or None).
        ints: A vector of integers as a list (absent: empty).
    """

    # The objects are either model's (`Any`): neither is imported here, and the
    # decoded tables' fields are typed by their schema only at run time.
    field: Callable[[str], str]
    instruction: Callable[[Any], tuple[str, Any]]
    value: Callable[[Any], tuple[str, Any]]
    text: Callable[[Any], str | None]
    ints: Callable[[Any], list[int]]


_INSTRUCTION_KINDS = _names(InstructionArguments)
_VALUE_KINDS = _names(KernelTypes)

#: `exir.schema` (the emitter's output, in process).
EXIR_SCHEMA = ObjectModel(
    field=lambda name: name,
    instruction=lambda i: (type(i.instr_args).__name__, i.instr_args),
    value=lambda v: (type(v.val).__name__, v.val),
    text=lambda s: s,
    ints=lambda v: [] if v is None else v,
)

#: The flatbuffers object API's model of program.fbs (a file, on disk).
GENERATED = ObjectModel(
    field=functools.cache(attribute_name),
    instruction=lambda i: (
        _INSTRUCTION_KINDS.get(i.instrArgsType, str(i.instrArgsType)),
        i.instrArgs,
    ),
    value=lambda v: (_VALUE_KINDS.get(v.valType, str(v.valType)), v.val),
    text=table_text,
    ints=vector_ints,
)
