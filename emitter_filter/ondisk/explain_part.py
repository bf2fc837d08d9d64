"""One part of an explained file: bytes of one file attributed to one thing.

`explain`'s unit: every byte of a `.pte` and its `.ptd` files belongs to exactly one
`Part`. Here apart from `explanation` (the parts of a program together) and `explain`
(the attribution), so that `method_memory`, which reads parts, imports no command.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from emitter_filter.ondisk.analyse.explain_terms import GROUPINGS

if TYPE_CHECKING:
    # A type only: the readers' module sits high above a part (it reads delegates).
    from emitter_filter.ondisk.read.readers import Reader

__all__ = ["Part"]


@dataclass(frozen=True)
class Part:
    """Bytes of one file attributed to one thing.

    Attributes:
        file: The file's name, as `read_pte` gives it.
        offset: Where its first byte is. `program` bytes are not contiguous (the
            header and inline delegate data lie inside): there, the first one's.
        nbytes: Its size.
        storage: One of `STORAGES`.
        index: The entry's index in its space (`constant[i]`), the segment index
            (`named_data`, `delegate`, `segments`, `external`), the inline blob's
            index (`delegate_inline`); None for the rest.
        tag: The `.ptd`'s name without extension, for its parts; the plan's name
            for `values`, `instructions` and `operators`.
        status: One of `STATUSES`.
        dtype, shape: Of the first tensor value that refers to it, if any (a live
            one first); for XNNPACK's named data, the datatype and dims XNNPACK
            reads it as.
        layouts: Every (dtype, shape) a tensor value reads it as, that one first:
            the emitter stores equal bytes once for values of different shapes.
        names: The FQNs of the tensors that refer to it (with `names`, also the
            state tensors with its shape and bytes), the named-data keys, or the
            delegate's backend.
        readers: What reads it (`readers.Reader`).
        copies: The other places holding the same bytes (duplicated), or the
            other references to this range (shared).
    """

    file: str
    offset: int
    nbytes: int
    storage: str
    index: int | None = None
    tag: str | None = None
    status: str = "live"
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    names: tuple[str, ...] = ()
    readers: tuple[Reader, ...] = ()
    copies: tuple[str, ...] = ()
    layouts: tuple[tuple[str, tuple[int, ...]], ...] = ()
    #: Of named data: the FQNs of the state `--names` finds stored in it (also in `names`).
    state_names: tuple[str, ...] = ()

    @property
    def end(self) -> int:
        return self.offset + self.nbytes

    @property
    def label(self) -> str:
        """`constant[3]`, `external:model[0]`, `program`: as `audit` names copies."""
        where = self.storage if self.tag is None else f"{self.storage}:{self.tag}"
        return where if self.index is None else f"{where}[{self.index}]"

    @property
    def methods(self) -> tuple[str, ...]:
        """The methods that read it (its readers' plans), or whose section of the program it
        is: in a merged file, what the methods share."""
        if self.storage in ("values", "instructions", "operators"):
            assert self.tag is not None, "a plan's section is tagged with the plan's name"
            return (self.tag,)
        return tuple(dict.fromkeys(r.plan for r in self.readers))

    def group(self, by: str) -> str:
        """The value of this part for `--by` (one of `GROUPINGS`)."""
        if by == "storage":
            return self.storage
        if by == "method":
            return ", ".join(self.methods) or f"({self.storage})"
        if by == "status":
            return self.status
        if by == "dtype":
            return self.dtype or "-"
        if by == "reader":
            return self.readers[0].op if self.readers else f"({self.storage})"
        if by == "module":
            # Tensors' FQNs only: named-data keys and backends are no module paths, but the
            # state `--names` finds in a delegate's named data is.
            tensor = self.storage in ("constant", "mutable", "external")
            fqn = next(iter(self.state_names or (self.names if tensor else ())), None)
            if fqn is None:
                return f"({self.storage})"
            return fqn.rsplit(".", 1)[0] if "." in fqn else "(top level)"
        raise ValueError(f"unknown grouping {by!r}; expected one of {', '.join(GROUPINGS)}")

    def to_json(self) -> dict:
        return {
            "file": self.file,
            "offset": self.offset,
            "bytes": self.nbytes,
            "storage": self.storage,
            "index": self.index,
            "tag": self.tag,
            "label": self.label,
            "status": self.status,
            "dtype": self.dtype,
            "shape": None if self.shape is None else list(self.shape),
            "layouts": [{"dtype": dtype, "shape": list(shape)} for dtype, shape in self.layouts],
            "names": list(self.names),
            "readers": [r.describe() for r in self.readers],
            "methods": list(self.methods),
            "copies": list(self.copies),
        }
