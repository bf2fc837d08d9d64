"""The names of methods: the flags that name them, and the training methods that follow them.

`merge` and `split` take a method's new name from a flag (`merge --method
NEW=FILE:METHOD`, `--prefix PREFIX=FILE`, `--drop FILE:METHOD`; `split --method
NEW=NAME`). Each flag is parsed here, and each new name checked: no control character,
and no training method's prefix. ExecuTorch's training export adds, per method M,
methods named `__et_training_*_M` that the runtime's TrainingModule finds by M's name:
such a method follows M (`training_owner`), and is renamed with it (`followed_name`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from emitter_filter.errors import MethodSetError
from emitter_filter.program.generated_fields import table_text

if TYPE_CHECKING:
    from emitter_filter.ondisk.read.read_pte import PteProgram

__all__ = [
    "TRAINING_PREFIX",
    "check_new_name",
    "followed_name",
    "parse_drop",
    "parse_method",
    "parse_prefix",
    "plan_names",
    "training_owner",
]

# ExecuTorch's training export adds, per method M, methods named `__et_training_*_M`
# (`gradients_index`, `parameters_index`, `fqn`) that the runtime's TrainingModule
# finds by M's name.
TRAINING_PREFIX = "__et_training_"


def parse_method(spec: str) -> tuple[str, str, str]:
    """`NEW=FILE:METHOD` as (new name, file, method); a `MethodSetError` if malformed."""
    new, equals, source = spec.partition("=")
    path, colon, method = source.rpartition(":")
    if not (equals and colon and new and path and method):
        raise MethodSetError(
            f"--method {spec!r}: expected NEW=FILE:METHOD, e.g. decode=decode.pte:forward"
        )
    try:
        new.encode("utf-8")  # a flatbuffer string; bytes that are not text came from argv
    except UnicodeEncodeError:
        raise MethodSetError(f"--method {spec!r}: the name {new!r} is not UTF-8 text") from None
    check_new_name(f"--method {spec!r}", new)
    return new, path, method


def check_new_name(flag: str, name: str) -> None:
    """Refuses a name no method of ExecuTorch's should be given: one with a control
    character (a newline, from a script's quoting), or a training method's prefix, which
    the runtime's TrainingModule reads as another method's gradients or parameters."""
    control = next((c for c in name if ord(c) < 0x20 or ord(c) == 0x7F), None)
    if control is not None:
        raise MethodSetError(f"{flag}: the name {name!r} has a control character {control!r}")
    if name.startswith(TRAINING_PREFIX):
        raise MethodSetError(
            f"{flag}: the name {name!r} starts with {TRAINING_PREFIX!r}, which ExecuTorch's "
            "training methods have (they follow their method's name on their own)"
        )


def parse_prefix(spec: str) -> tuple[str, str]:
    """`PREFIX=FILE` as (prefix, file)."""
    prefix, equals, path = spec.partition("=")
    if not (equals and prefix and path):
        raise MethodSetError(f"--prefix {spec!r}: expected PREFIX=FILE, e.g. ft_=ft/model.pte")
    check_new_name(f"--prefix {spec!r}", prefix)
    return prefix, path


def parse_drop(spec: str) -> tuple[str, str]:
    """`FILE:METHOD` as (file, method)."""
    path, colon, method = spec.rpartition(":")
    if not (colon and path and method):
        raise MethodSetError(
            f"--drop {spec!r}: expected FILE:METHOD, e.g. decode.pte:enable_dynamic_shape"
        )
    return path, method


def plan_names(read: PteProgram) -> list[str]:
    """Each method's name in the file, in plan order."""
    return [table_text(plan.name) or "" for plan in read.program.executionPlan or ()]


def training_owner(name: str, methods: Sequence[str]) -> str | None:
    """The method a training method follows (the longest name it ends with), if any."""
    if not name.startswith(TRAINING_PREFIX):
        return None
    owners = [m for m in methods if not m.startswith(TRAINING_PREFIX) and name.endswith("_" + m)]
    return max(owners, key=len, default=None)


def followed_name(name: str, owner: str, new: str) -> str:
    """The name of training method `name` once `owner`, the method it follows, is `new`."""
    return name[: -len(owner)] + new
