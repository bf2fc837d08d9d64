"""The words `explain` describes parts in: storages, statuses, groupings, its JSON schema.

Apart from `explain` so that the command line can offer `--by`'s choices without
importing the attribution (every subcommand builds the whole parser).
"""

from __future__ import annotations

__all__ = ["JSON_SCHEMA", "STORAGES", "STATUSES", "GROUPINGS"]

#: The value of the "schema" key of `Explanation.to_json()`.
JSON_SCHEMA = "emitter-filter-explain/1"
#: Every `Part.storage`, in report order.
STORAGES = (
    "header",
    "program",
    "values",
    "instructions",
    "operators",
    "delegate_inline",
    "constant",
    "mutable",
    "external",
    "named_data",
    "delegate",
    "segments",
    "ptd_header",
    "padding",
)
#: Every `Part.status`.
STATUSES = ("live", "dead", "duplicated", "shared", "padding")
#: What `--by` groups parts by.
GROUPINGS = ("storage", "status", "dtype", "reader", "module", "method")
