"""Flatbuffers read into plain objects, with `struct` alone: the one reading of every schema.

The generated object API (`emitter_filter._program_fbs`) unpacks a table through
one accessor call per field, each several Python calls deep; a program of a few
thousand values took 0.2 s, most of every command's time, and importing it
imports the `flatbuffers` package, which imports numpy (80 ms before any work).
Here a table is decoded from its vtable in one pass per table, from a
description of its schema (`fbs_schemas`), into objects with the object API's
attribute names and values: camelCase fields, strings as `bytes`, vectors as
lists, an absent table, string or vector None, a union as its `...Type` number
and its table. So code written for the object API reads these unchanged, and
`to_object_api` turns them into the generated classes where a program is
packed again (`ProgramT.Pack` is what ExecuTorch's serializer calls).

Every offset is checked against the buffer: a corrupt flatbuffer raises
`FlatbufferError`, never reads outside it, and a vector's length is checked
before its elements are read.
"""

from __future__ import annotations

import importlib
import struct
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

__all__ = ["FlatbufferError", "Schema", "Table", "attribute_name", "to_object_api"]

_U16 = struct.Struct("<H").unpack_from
_U32 = struct.Struct("<I").unpack_from
_I32 = struct.Struct("<i").unpack_from

# Scalar type names of the .fbs language (and their aliases) as struct codes.
_SCALARS = {
    "bool": "?",
    "byte": "b",
    "ubyte": "B",
    "int8": "b",
    "uint8": "B",
    "short": "h",
    "ushort": "H",
    "int16": "h",
    "uint16": "H",
    "int": "i",
    "uint": "I",
    "int32": "i",
    "uint32": "I",
    "long": "q",
    "ulong": "Q",
    "int64": "q",
    "uint64": "Q",
    "float": "f",
    "double": "d",
    "float32": "f",
    "float64": "d",
}


class FlatbufferError(ValueError):
    """A flatbuffer whose offsets point outside it, or whose vectors do not fit in it."""


def attribute_name(field: str) -> str:
    """The object API's attribute for a schema field: `move_from` -> `moveFrom`."""
    first, *rest = field.split("_")
    return first + "".join(word.title() for word in rest)


class Table:
    """A decoded table: its fields as attributes named as the object API names them.

    `_pos` is where the table starts in the buffer it was read from (None for a
    table built in code), for a rewrite that writes a number in place.
    """

    __slots__ = ("_pos",)
    #: The schema's table name, and the attribute names in slot order.
    _table: str = ""
    _namespace: str = ""
    _attributes: tuple[str, ...] = ()
    _defaults: tuple = ()

    def __init__(self, **fields):
        self._pos = None
        for attribute, default in zip(self._attributes, self._defaults, strict=True):
            setattr(self, attribute, default)
        for attribute, value in fields.items():
            if attribute not in self._attributes:
                raise TypeError(f"{self._table} has no field {attribute!r}")
            setattr(self, attribute, value)

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and all(
            getattr(self, a) == getattr(other, a) for a in self._attributes
        )

    # Mutable, like the object API's classes; None is how Python spells unhashable,
    # which typeshed's `object.__hash__` does not allow for.
    __hash__ = None  # type: ignore[assignment]

    if TYPE_CHECKING:
        # The fields are the schema's, made at import by `Schema` (`fbs_schemas`), so
        # the type checker sees any attribute of a decoded table as a field of unknown
        # type, read or set. Only for the checker: at run time a missing field is an
        # AttributeError, as the slots make it.
        def __getattr__(self, name: str) -> Any: ...
        def __setattr__(self, name: str, value: Any) -> None: ...

    def __repr__(self) -> str:
        fields = ", ".join(f"{a}={getattr(self, a)!r}" for a in self._attributes)
        return f"{self._table}({fields})"


# Readers of n vtable entries, and n zeros for the slots a vtable does not reach, by n:
# the format is parsed once, not on each of a program's ~20,000 tables.
_ENTRIES = [struct.Struct(f"<{n}H").unpack_from for n in range(256)]
_ZEROS = [(0,) * n for n in range(256)]


def _vtable(buffer: bytes, pos: int, slots: int) -> tuple[int, ...]:
    """A table's first `slots` field offsets from its vtable, 0 for each one not stored."""
    vtable = pos - _I32(buffer, pos)[0]
    if vtable < 0:
        raise FlatbufferError(f"table at {pos}: vtable at {vtable}, before the buffer")
    size = _U16(buffer, vtable)[0]
    if size < 4 or vtable + size > len(buffer):
        raise FlatbufferError(f"table at {pos}: vtable of {size} bytes at {vtable}")
    stored = size // 2 - 2
    if stored >= slots:
        return _ENTRIES[slots](buffer, vtable + 4)
    return _ENTRIES[stored](buffer, vtable + 4) + _ZEROS[slots - stored]


def _length(buffer: bytes, at: int, item_size: int, what: str) -> int:
    """The element count of the vector (or string) at `at`, checked to fit in `buffer`."""
    count = _U32(buffer, at)[0]
    if at + 4 + count * item_size > len(buffer):
        raise FlatbufferError(f"{what} at {at}: {count} elements overrun the buffer")
    return count


def _string(buffer: bytes, at: int) -> bytes:
    at += _U32(buffer, at)[0]
    count = _length(buffer, at, 1, "string")
    return buffer[at + 4 : at + 4 + count]


def _scalar_vector(code: str):
    """read(buffer, at) of a vector of `code` scalars whose offset is stored at `at`."""
    size = struct.calcsize(code)
    if code == "B":

        def read_bytes(buffer: bytes, at: int) -> list:
            at += _U32(buffer, at)[0]
            count = _length(buffer, at, 1, "vector")
            return list(buffer[at + 4 : at + 4 + count])

        return read_bytes

    def read(buffer: bytes, at: int) -> list:
        at += _U32(buffer, at)[0]
        count = _length(buffer, at, size, "vector")
        return list(struct.unpack_from(f"<{count}{code}", buffer, at + 4))

    return read


def _tables(decode, buffer: bytes, at: int) -> list:
    """The vector of tables whose offset is stored at `at`, each read by `decode`."""
    at += _U32(buffer, at)[0]
    count = _length(buffer, at, 4, "vector")
    offsets = struct.unpack_from(f"<{count}I", buffer, at + 4)
    return [decode(buffer, at + 4 + 4 * i + offset) for i, offset in enumerate(offsets)]


def _union(decoders: tuple, kind: int, buffer: bytes, at: int):
    """The union member of type `kind` whose offset is stored at `at`; None for an unknown type."""
    decode = decoders[kind] if 0 < kind < len(decoders) else None
    return None if decode is None else decode(buffer, at + _U32(buffer, at)[0])


class Schema:
    """One `.fbs` schema's tables, as `Table` classes that decode themselves.

    Args:
        namespace: The schema's namespace: the package of its generated object API.
        root: The root table.
        tables: Each table's (field name, type) pairs in declaration order (`fbs_schemas`).
        unions: Each union's member tables in declaration order (type 1 is the first).
    """

    def __init__(
        self,
        namespace: str,
        root: str,
        tables: Mapping[str, Sequence[tuple[str, str | None]]],
        unions: Mapping[str, Sequence[str]] = {},  # noqa: B006 - never modified
    ):
        self.namespace = namespace
        self.root = root
        self.unions = {name: tuple(members) for name, members in unions.items()}
        self.tables = {name: tuple(fields) for name, fields in tables.items()}
        self.classes: dict[str, type[Table]] = {}
        for name, fields in self.tables.items():
            attributes, defaults = [], []
            for field, kind in fields:
                if kind in self.unions:
                    attributes.append(attribute_name(field) + "Type")
                    defaults.append(0)
                if kind is not None:
                    attributes.append(attribute_name(field))
                    defaults.append(_default(kind))
            self.classes[name] = type(
                name,
                (Table,),
                {
                    "__slots__": tuple(attributes),
                    "__doc__": f"`{namespace}.{name}` of the schema, decoded.",
                    "_table": name,
                    "_namespace": namespace,
                    "_attributes": tuple(attributes),
                    "_defaults": tuple(defaults),
                },
            )
        self._decoders = self._compile()
        # `field_at`'s slots, found once (a proof asks it of every segment).
        self._slot_of: dict[tuple[str, str], int] = {}

    def __getattr__(self, name: str) -> type[Table]:
        try:
            return self.__dict__["classes"][name]
        except KeyError:
            raise AttributeError(name) from None

    def _slots(self, table: str) -> int:
        return sum(2 if kind in self.unions else 1 for _, kind in self.tables[table])

    def slot(self, table: str, field: str) -> int:
        """The vtable slot of `table.field` (a union's value: the slot after its type)."""
        found = self._slot_of.get((table, field))
        if found is not None:
            return found
        slot = 0
        for name, kind in self.tables[table]:
            if kind in self.unions:
                slot += 1
            if name == field:
                self._slot_of[table, field] = slot
                return slot
            slot += 1
        raise KeyError(f"{table}.{field}")

    def _compile(self) -> dict:
        """One decode function per table, `decode_<Table>(buffer, pos)`, with its fields
        unrolled: a loop over field descriptions cost twice as much per field (a
        program of 5,000 values: 31 ms against 21), the way `dataclasses` and
        `namedtuple` write their methods for speed."""
        names = {
            "_vtable": _vtable,
            "_string": _string,
            "_tables": _tables,
            "_union": _union,
            "_U32": _U32,
            **{f"_new_{t}": cls.__new__ for t, cls in self.classes.items()},
            **{f"_class_{t}": cls for t, cls in self.classes.items()},
        }
        for table in self.tables:
            exec(self._source(table, names), names)  # noqa: S102 - our own source, above
        for union, members in self.unions.items():
            names[f"_members_{union}"] = (None, *(names[f"decode_{m}"] for m in members))
        return {table: names[f"decode_{table}"] for table in self.tables}

    def _source(self, table: str, names: dict) -> str:
        lines = [
            f"def decode_{table}(buffer, pos):",
            f"    vtable = _vtable(buffer, pos, {self._slots(table)})",
            f"    table = _new_{table}(_class_{table})",
            "    table._pos = pos",
        ]
        slot = 0
        for field, kind in self.tables[table]:
            attribute = attribute_name(field)
            if kind in self.unions:
                lines += self._field(slot, attribute + "Type", self._value("ubyte", names), 0)
                slot += 1
                value = f"_union(_members_{kind}, table.{attribute}Type, buffer, {{at}})"
                lines += self._field(slot, attribute, value, None)
            elif kind is not None:
                lines += self._field(slot, attribute, self._value(kind, names), _default(kind))
            slot += 1
        lines.append("    return table")
        return "\n".join(lines)

    @staticmethod
    def _field(slot: int, attribute: str, value: str, default) -> list[str]:
        """Sets `attribute` from `slot`: `value` (`{at}`: where the field is) or `default`."""
        return [
            f"    at = vtable[{slot}]",
            f"    table.{attribute} = {value.format(at='pos + at')} if at else {default!r}",
        ]

    def _value(self, kind: str, names: dict) -> str:
        """The expression that reads a field of type `kind` stored at `{at}`."""
        if kind in _SCALARS:
            names.setdefault(f"_scalar_{kind}", struct.Struct("<" + _SCALARS[kind]).unpack_from)
            return f"_scalar_{kind}(buffer, {{at}})[0]"
        if kind == "string":
            return "_string(buffer, {at})"
        if kind.startswith("["):
            item = kind[1:-1]
            if item in _SCALARS:
                names.setdefault(f"_vector_{item}", _scalar_vector(_SCALARS[item]))
                return f"_vector_{item}(buffer, {{at}})"
            return f"_tables(decode_{item}, buffer, {{at}})"
        return f"decode_{kind}(buffer, {{at}} + _U32(buffer, {{at}})[0])"

    def read(self, buffer: bytes, offset: int = 0) -> Table:
        """The root table of the flatbuffer at `offset` of `buffer`.

        Raises:
            FlatbufferError: An offset or a length points outside `buffer`.
        """
        try:
            root = offset + _U32(buffer, offset)[0]
            return self._decoders[self.root](buffer, root)
        except struct.error as error:
            raise FlatbufferError(f"offset outside the buffer: {error}") from error

    def field_at(self, buffer: bytes, table: Table, field: str) -> int | None:
        """Where `table`'s scalar `field` is stored in `buffer`; None if it is not (a default)."""
        slot = self.slot(table._table, field)
        offset = _vtable(buffer, table._pos, slot + 1)[slot]
        return table._pos + offset if offset else None

    def fields_at(
        self, buffer: bytes, tables: Sequence[Table], fields: Sequence[str]
    ) -> list[tuple[int | None, ...]]:
        """`field_at` of each of `fields` of each of `tables` (all of one table type), each
        vtable read once: the tables a builder wrote alike share one."""
        if not tables:
            return []
        slots = [self.slot(tables[0]._table, field) for field in fields]
        count = max(slots) + 1
        vtables: dict[int, tuple[int, ...]] = {}
        found = []
        for table in tables:
            pos = table._pos
            at = pos - _I32(buffer, pos)[0]
            offsets = vtables.get(at)
            if offsets is None:
                offsets = vtables[at] = _vtable(buffer, pos, count)
            found.append(tuple(pos + offsets[s] if offsets[s] else None for s in slots))
        return found

    def vector_at(self, buffer: bytes, table: Table, field: str) -> int | None:
        """Where the first element of `table`'s vector `field` is; None if it is absent."""
        at = self.field_at(buffer, table, field)
        return None if at is None else at + _U32(buffer, at)[0] + 4


def _default(kind: str):
    if kind in _SCALARS:
        return False if kind == "bool" else 0.0 if _SCALARS[kind] in "fd" else 0
    return None


def to_object_api(value):
    """`value` with every decoded `Table` in it replaced by the generated object API's class
    (`ProgramT`, ...), to be packed; anything else (numbers, bytes, objects of the
    object API) is kept. Imports the generated modules, so only a rewrite pays for them."""
    if isinstance(value, Table):
        module = importlib.import_module(
            f"emitter_filter._program_fbs.{value._namespace}.{value._table}"
        )
        result = getattr(module, value._table + "T")()
        for attribute in value._attributes:
            setattr(result, attribute, to_object_api(getattr(value, attribute)))
        return result
    if isinstance(value, list):
        if not value or isinstance(value[0], (int, float)):
            return value
        converted = [to_object_api(item) for item in value]
        return value if all(a is b for a, b in zip(converted, value, strict=True)) else converted
    if hasattr(value, "Pack") and hasattr(value, "__dict__"):
        # An object API table built in code may hold decoded tables: those are replaced.
        for attribute, item in vars(value).items():
            converted = to_object_api(item)
            if converted is not item:
                setattr(value, attribute, converted)
    return value
