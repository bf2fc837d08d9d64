"""The budget file's JSON Schema, and the check of a document against it.

A committed budget file is an input like any other: `read_budget` refuses
anything that does not follow `BUDGET_SCHEMA` with one line naming the first
place that does not, before any of it is used. The schema is published as
`docs/budget-schema.json` (a test keeps the two equal). The check reads the
subset of JSON Schema the schema uses (`type`, `properties`, `required`,
`additionalProperties`, `items`, `prefixItems`, `enum`, `const`, `minimum`,
`pattern`, `$ref` to `$defs`), so that the torch-free install needs no
`jsonschema` package.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["BUDGET_SCHEMA", "schema_error"]

_INDEX = {"type": ["integer", "null"], "minimum": 0}
_TEXT_OR_NULL = {"type": ["string", "null"]}

#: The JSON Schema of `emitter-filter-budget/1` (what `budget write` writes).
BUDGET_SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "emitter-filter-budget/1",
    "title": "emitter-filter budget file",
    "description": "What `emitter-filter budget write` records and `budget check` reads: "
    "each .pte file's size, its bytes per storage and its parts.",
    "type": "object",
    "required": ["schema", "files"],
    "properties": {
        "schema": {"const": "emitter-filter-budget/1"},
        "files": {
            "description": "Each file, keyed by its path as given to budget write.",
            "type": "object",
            "additionalProperties": {"$ref": "#/$defs/file"},
        },
    },
    "$defs": {
        "file": {
            "type": "object",
            "required": ["bytes", "parts"],
            "properties": {
                "bytes": {"type": "integer", "minimum": 0},
                "totals": {
                    "description": "Bytes per storage, and per status as status:NAME.",
                    "type": "object",
                    "additionalProperties": {"type": "integer", "minimum": 0},
                },
                "parts": {"type": "array", "items": {"$ref": "#/$defs/part"}},
                "methods": {
                    "description": "Each method's planned memory (non_const_buffer_sizes): "
                    "its sum, and bytes per memory id. Absent in budgets written before it "
                    "was recorded: then only bytes are checked.",
                    "type": "object",
                    "additionalProperties": {"$ref": "#/$defs/method"},
                },
            },
        },
        "method": {
            "type": "object",
            "required": ["planned_bytes"],
            "properties": {
                "planned_bytes": {"type": "integer", "minimum": 0},
                "memory_ids": {
                    "type": "object",
                    "additionalProperties": {"type": "integer", "minimum": 0},
                },
            },
        },
        "part": {
            "type": "object",
            "required": ["storage", "bytes"],
            "properties": {
                "storage": {"type": "string"},
                "index": _INDEX,
                "tag": _TEXT_OR_NULL,
                "bytes": {"type": "integer", "minimum": 0},
                "status": {"enum": ["live", "dead", "duplicated", "shared", "padding"]},
                "dtype": _TEXT_OR_NULL,
                "shape": {"type": ["array", "null"], "items": {"type": "integer", "minimum": 0}},
                "names": {"type": "array", "items": {"type": "string"}},
                "readers": {"type": "array", "items": {"$ref": "#/$defs/reader"}},
                "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
            },
        },
        "reader": {
            "description": "[plan, op, arg, ordinal, key]: a call that reads the part.",
            "type": "array",
            "prefixItems": [
                {"type": "string"},
                {"type": "string"},
                {"type": "integer"},
                {"type": "integer", "minimum": 0},
                _TEXT_OR_NULL,
            ],
            "minItems": 5,
            "items": False,
        },
    },
}

# JSON Schema's types, as Python reads JSON (a bool is not an integer there).
_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def schema_error(document: object, schema: Mapping = BUDGET_SCHEMA) -> str | None:
    """The first place where `document` does not follow `schema`, said in one line
    (`files['m.pte'].parts[3].bytes: expected integer, got 'x'`); None if it follows it.

    Walks with a worklist (a document nests as deep as its JSON does).
    """
    pending: list[tuple[object, Mapping, str]] = [(document, schema, "the document")]
    while pending:
        value, rule, where = pending.pop()
        if "$ref" in rule:
            rule = BUDGET_SCHEMA["$defs"][rule["$ref"].rsplit("/", 1)[1]]
        problem = _problem(value, rule)
        if problem is not None:
            return f"{where}: {problem}"
        pending.extend(reversed(list(_children(value, rule, where))))
    return None


def _problem(value: object, rule: Mapping) -> str | None:
    """What is wrong with `value` itself under `rule` (not its members)."""
    types = rule.get("type")
    if types is not None:
        types = [types] if isinstance(types, str) else types
        if not any(_TYPES[t](value) for t in types):
            return f"expected {' or '.join(types)}, got {_shown(value)}"
    if "const" in rule and value != rule["const"]:
        return f"expected {rule['const']!r}, got {_shown(value)}"
    if "enum" in rule and (not isinstance(value, str) or value not in rule["enum"]):
        return f"expected one of {', '.join(rule['enum'])}, got {_shown(value)}"
    if "minimum" in rule and _TYPES["number"](value) and not value >= rule["minimum"]:
        return f"expected {rule['minimum']} or more, got {_shown(value)}"
    if "pattern" in rule and isinstance(value, str) and not re.search(rule["pattern"], value):
        return f"expected text matching {rule['pattern']}, got {_shown(value)}"
    if isinstance(value, dict):
        missing = [key for key in rule.get("required", ()) if key not in value]
        if missing:
            return f"missing {', '.join(map(repr, missing))}"
    if isinstance(value, list):
        if len(value) < rule.get("minItems", 0):
            return f"expected {rule['minItems']} items, got {len(value)}"
        if rule.get("items") is False and len(value) > len(rule.get("prefixItems", ())):
            return f"expected {len(rule['prefixItems'])} items, got {len(value)}"
    return None


def _children(value: object, rule: Mapping, where: str):
    """(member, its rule, where it is) for each member of `value` that `rule` constrains."""
    if isinstance(value, dict):
        properties = rule.get("properties", {})
        extra = rule.get("additionalProperties")
        for key, member in value.items():
            member_rule = properties.get(key, extra)
            if isinstance(member_rule, Mapping):
                yield member, member_rule, f"{_member(where)}[{key!r}]"
    elif isinstance(value, list):
        prefix = rule.get("prefixItems", ())
        items = rule.get("items")
        for index, member in enumerate(value):
            member_rule = prefix[index] if index < len(prefix) else items
            if isinstance(member_rule, Mapping):
                yield member, member_rule, f"{_member(where)}[{index}]"


def _member(where: str) -> str:
    return "" if where == "the document" else where


def _shown(value: object) -> str:
    """`value` in a message: short, whatever its size or depth."""
    if isinstance(value, (dict, list)):
        return f"an {'object' if isinstance(value, dict) else 'array'} of {len(value)}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
