"""Which named-data keys the delegates of a program can reach, wherever the keys are stored.

Roots (the only place they are named): every entry of every plan's `delegates`,
called or not, because the runtime initialises each one at `Method::init` and
hands it the merged named-data map (`up:runtime/executor/method.cpp`). The
emitter adds an entry only for a call it emits, so a removed call leaves none.

Each key of the store (the `.pte`'s named data and every `.ptd`'s) is

- live: some root's blob names it (`delegates.delegate_named_keys`: XNNPACK, Vulkan,
  a Core ML reference, Metal);
- dead: no root names it and every root's keys can be enumerated
  (every delegate's blob is read, or there are none);
- kept because unprovable: no enumerable root names it, but some root is of
  another backend, whose opaque blob may look up any key; or some root names a
  key the store does not hold (a key changed, or its data in a `.ptd` not given):
  a blob no key names may be the one it meant, and the runtime refuses the method
  either way, so nothing is dropped from a program that cannot load as it is.

The in-process prune (`inprocess.named_data`) and the file analysis
(`ondisk`) both call `classify_named_keys`, so they agree on every key.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["DelegateRef", "NamedDataUse", "classify_named_keys"]


@dataclass(frozen=True)
class DelegateRef:
    """One entry of an execution plan's `delegates`."""

    plan: str
    index: int
    backend_id: str


@dataclass(frozen=True)
class NamedDataUse:
    """The result of `find_named_data_use`. Keys are listed in store order.

    Attributes:
        live: Keys of the store that some delegate names.
        dead: Keys no delegate can reach; empty whenever `opaque_delegates` or
            `missing` is not.
        kept_unprovable: Keys no XNNPACK delegate names, kept for `opaque_delegates`
            or because some key is `missing`.
        missing: Keys an XNNPACK delegate names that the store does not hold
            (the runtime must find them elsewhere, or fail at load).
        opaque_delegates: Delegates whose keys cannot be enumerated.
    """

    live: tuple[str, ...]
    dead: tuple[str, ...]
    kept_unprovable: tuple[str, ...]
    missing: tuple[str, ...]
    opaque_delegates: tuple[DelegateRef, ...]


def classify_named_keys(
    delegate_keys: Sequence[tuple[DelegateRef, Sequence[str] | None]],
    store_keys: Iterable[str],
) -> NamedDataUse:
    """Applies the rules of the module docstring to keys, wherever they are stored.

    Args:
        delegate_keys: Every root delegate, in plan order, with the keys its blob
            names, or None when its backend's blob is opaque.
        store_keys: Every key of the named data, in store order.
    """
    named: dict[str, None] = {}
    opaque: list[DelegateRef] = []
    for ref, keys in delegate_keys:
        if keys is None:
            opaque.append(ref)
        else:
            named.update(dict.fromkeys(keys))
    live: dict[str, None] = {}
    unnamed: dict[str, None] = {}
    for key in store_keys:
        (live if key in named else unnamed)[key] = None
    unnamed_keys = tuple(key for key in unnamed if key not in live)
    missing = tuple(key for key in named if key not in live)
    unprovable = bool(opaque or missing)
    return NamedDataUse(
        live=tuple(live),
        dead=() if unprovable else unnamed_keys,
        kept_unprovable=unnamed_keys if unprovable else (),
        missing=missing,
        opaque_delegates=tuple(opaque),
    )
