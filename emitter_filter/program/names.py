"""What a data entry is called, and what `audit` and a prune say of an entry that goes.

Shared by both sides: the in-process prune names what it drops after the model's state
(`state_names`), the file tools after the program's own names or `--names`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ConstantName", "DroppedConstant", "TENSOR_SPACES"]

#: The spaces that hold tensor data; a tensor there with a name is readable by name.
TENSOR_SPACES = ("constant", "mutable", "external")


@dataclass(frozen=True)
class ConstantName:
    """One name a data entry is known by.

    Attributes:
        name: The fully qualified name of the model state (`bn.num_batches_tracked`),
            or the key of named data.
        kind: "parameter", "buffer", "constant" (a lifted tensor constant),
            "mutable_buffer" (a mutable buffer's initial state), "named_data", or
            None where only the name is known (an external constant's name, read
            from a file without `--names`).
        plan: The method whose graph gives the name; None where unknown.
    """

    name: str
    kind: str | None
    plan: str | None


@dataclass(frozen=True)
class DroppedConstant:
    """One data entry that was not written, or (in `audit`) that no program can reach.

    `plan`, `value_index`, `dtype` and `shape` describe the first dead value that
    referred to it (all None for an entry no value referred to); `name` is its
    `fully_qualified_name` where the program carries one (external constants,
    named buffers), or the key of named data. `names` are every name the entry is
    known by: the state it was built from (in process, from the manager's
    `ExportedProgram`s; on disk, from `--names`), several where the emitter stored
    identical tensors once, else the name the program carries. Indices are those
    before pruning: a file's own indices on disk.
    """

    space: str
    index: int
    nbytes: int
    plan: str | None
    value_index: int | None
    dtype: str | None
    shape: tuple[int, ...] | None
    name: str | None
    names: tuple[ConstantName, ...] = ()

    @property
    def readable_by_name(self) -> bool:
        """Whether a runtime could read it by name before: `Method.get_attribute(name)`.

        True for a tensor the program names (external constants, named mutable
        buffers); named data is looked up by delegates, not by the attribute API.
        """
        return self.name is not None and self.space in TENSOR_SPACES

    def to_json(self) -> dict:
        """The entry as `audit --json` lists it under "dead" (`prune --json`, "dropped")."""
        return {
            "space": self.space,
            "index": self.index,
            "bytes": self.nbytes,
            "plan": self.plan,
            "value_index": self.value_index,
            "dtype": self.dtype,
            "shape": None if self.shape is None else list(self.shape),
            "name": self.name,
            "names": [{"name": n.name, "kind": n.kind, "plan": n.plan} for n in self.names],
            "readable_by_name": self.readable_by_name,
        }

    def label(self) -> str:
        """Its names joined by " = ", else `space[index]`."""
        names = dict.fromkeys(n.name for n in self.names) or ([self.name] if self.name else [])
        return " = ".join(names) if names else f"{self.space}[{self.index}]"

    def describe(self) -> str:
        """`label (kind, bytes[, was readable by name])`, as the summary lists it."""
        kind = next((n.kind for n in self.names if n.kind), None)
        details = [*([kind] if kind else []), f"{self.nbytes:,} B"]
        if self.readable_by_name:
            details.append("was readable by name")
        return f"{self.label()} ({', '.join(details)})"
