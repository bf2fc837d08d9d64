"""Which methods a rename would break: those whose delegate finds itself by the method's name.

A Core ML multifunction program's delegates hold a reference (`delegates.coreml`)
that the runtime resolves with the ExecuTorch method name, so `merge --prefix`,
`merge --method NEW=...` and `split --method NEW=...` of such a method refuse.
Any other delegate works under any name.
"""

from __future__ import annotations

from emitter_filter.errors import MethodSetError
from emitter_filter.ondisk.read.byte_source import ByteSource
from emitter_filter.ondisk.read.read_pte import PteProgram
from emitter_filter.ondisk.read.readers import delegate_graphs

__all__ = ["check_renames", "method_bound"]


def method_bound(path: str, read: PteProgram) -> dict[str, str]:
    """Each method of `read` a rename would break, with why (its first such delegate).

    Args:
        path: The `.pte` `read` was read from (for blobs in segments).
        read: What `read_pte_program` returned for it. Not modified.
    """
    bound: dict[str, str] = {}
    with ByteSource(path) as source:
        for blob, found, graph in delegate_graphs(
            read.pte, read.program, read.program_data, source
        ):
            why = found.rename_breaks(graph)
            if why is None:
                continue
            for user in blob.users:
                bound.setdefault(user.plan, f"{user.backend_id} delegate {user.index}: {why}")
    return bound


def check_renames(path: str, read: PteProgram, renamed: dict[str, str], flag: str) -> None:
    """Refuses, in one line, a rename (old name -> new) of a method bound to its name.

    Raises:
        MethodSetError: A method `renamed` gives a new name is bound to its old one.
    """
    moved = {old: new for old, new in renamed.items() if new != old}
    if not moved:
        return
    bound = method_bound(path, read)
    for old, new in moved.items():
        if old in bound:
            raise MethodSetError(
                f"{flag}: method {old!r} of {path} cannot be renamed {new!r}: {bound[old]}"
            )
