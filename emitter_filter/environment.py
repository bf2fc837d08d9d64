"""The environment variables emitter_filter reads, and how a boolean one is parsed.

Shared by the start-up hook, the in-process hook and `emitter-filter env`, so each
variable is parsed one way wherever it is read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from emitter_filter.errors import EnvironmentVariableError

__all__ = ["ENV_PRUNE", "ENV_DEDUPE", "ENV_STRICT", "ENV_KEEP", "env_flag", "env_patterns"]

#: Set to 1 to prune every program a process serializes (read at start-up and at import).
ENV_PRUNE = "EMITTER_FILTER_PRUNE"
#: Set to 1 to deduplicate every program a process serializes, pruned or not (likewise).
ENV_DEDUPE = "EMITTER_FILTER_DEDUPE"
#: With EMITTER_FILTER_PRUNE=1: fnmatch patterns of FQNs to keep, separated by commas
#: (what `emitter-filter run --keep` and `keep_constants` take).
ENV_KEEP = "EMITTER_FILTER_KEEP"
#: Set to 1 to raise, not write unpruned, when a program cannot be proven safe to prune.
ENV_STRICT = "EMITTER_FILTER_STRICT"

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def env_flag(name: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether a boolean variable of ours is on; unset or empty means off.

    Raises:
        EnvironmentVariableError: the value is neither a true nor a false one.
    """
    raw = environ.get(name, "")
    value = raw.strip().lower()
    if value in _FALSE:
        return False
    if value in _TRUE:
        return True
    raise EnvironmentVariableError(
        f"{name}={raw!r}: expected 1 or 0 "
        f"(or {'/'.join(_TRUE[1:])} and {'/'.join(_FALSE[2:])}; unset or empty means 0)"
    )


def env_patterns(name: str, environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """A list variable of ours (`EMITTER_FILTER_KEEP`): its comma-separated items, blanks
    dropped; unset or empty means none."""
    return tuple(item.strip() for item in environ.get(name, "").split(",") if item.strip())
