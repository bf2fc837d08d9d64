"""What `verify` knows of a program before a runtime loads it, read from the file alone
(its program flatbuffer, torch-free, as every on-disk tool reads it): each method's input
and output metadata, the planned arenas the runtime allocates for it, and the external
data keys no `.ptd` given holds.

Read first, so that a pair of methods whose signatures differ (exit 1), a program whose
`.ptd` is missing or that needs more memory than there is (exit 2) is answered in one
line before anything loads; and so that each program loads in the runtime once, to run
(`compare.py`), not once more for its metadata.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from emitter_filter._program_fbs.executorch_flatbuffer.KernelTypes import KernelTypes
from emitter_filter.errors import ProgramFormatError, VerifyError
from emitter_filter.program.flatbuffer_tables import FlatbufferError
from emitter_filter.program.generated_fields import table_text, vector_ints
from emitter_filter.program.reachability import DataSpace
from emitter_filter.program.scalar_types import SCALAR_TYPE_NAMES
from emitter_filter.verify.runtimes import InputSpec

__all__ = [
    "DEFAULT_MEMORY_SHARE",
    "MethodPlan",
    "ProgramPlan",
    "read_plan",
    "available_memory",
    "memory_limit",
    "parse_size",
    "check_plan",
]

#: The share of the memory available when verify starts that it may plan to use, by default.
DEFAULT_MEMORY_SHARE = 0.75

_KINDS = {value: name for name, value in vars(KernelTypes).items() if not name.startswith("_")}


@dataclass(frozen=True)
class MethodPlan:
    """One method as its execution plan gives it."""

    name: str
    inputs: tuple[InputSpec, ...]
    outputs: tuple[InputSpec, ...]
    #: `non_const_buffer_sizes` summed: the arenas the runtime allocates to load it.
    arena_bytes: int


@dataclass(frozen=True)
class ProgramPlan:
    """A `.pte` (with its `.ptd` files) as read before it loads."""

    pte: str
    data: tuple[str, ...]
    methods: dict[str, MethodPlan]
    #: The program's and its `.ptd` files' bytes (the runtime maps them whole).
    file_bytes: int
    #: External-tensor and named-data keys in none of the `.ptd` files given.
    missing_data: tuple[str, ...]

    def memory_bytes(self) -> int:
        """What a load of it needs: its files, and every method's arenas."""
        return self.file_bytes + sum(m.arena_bytes for m in self.methods.values())

    def method(self, name: str) -> MethodPlan:
        found = self.methods.get(name)
        if found is None:
            raise VerifyError(
                f"{self.pte} has no method {name!r} (it has {', '.join(self.methods)})"
            )
        return found


def read_plan(pte: str, data: Sequence[str] = ()) -> ProgramPlan:
    """The methods of `pte` and what loading it needs, read from the file.

    Raises:
        VerifyError: The file is not a program emitter-filter can read.
    """
    from emitter_filter.ondisk.read.read_pte import read_pte_program

    try:
        read = read_pte_program(pte)
        missing = _missing_data(read.pte, data)
    except (ProgramFormatError, FlatbufferError) as error:
        raise VerifyError(str(error)) from None
    except OSError as error:
        raise VerifyError(f"{error.filename or pte}: {error.strerror or error}") from None
    methods = {}
    try:
        for number, plan in enumerate(read.program.executionPlan or ()):
            name = table_text(plan.name) or f"plan {number}"
            values = plan.values or []
            methods[name] = MethodPlan(
                name,
                tuple(_spec(values, i) for i in vector_ints(plan.inputs)),
                tuple(_spec(values, i) for i in vector_ints(plan.outputs)),
                sum(vector_ints(plan.nonConstBufferSizes)),
            )
    except (ProgramFormatError, FlatbufferError) as error:
        raise VerifyError(f"{pte}: {error}") from None
    data_bytes = sum(os.path.getsize(path) for path in data)
    return ProgramPlan(pte, tuple(data), methods, read.pte.file_bytes + data_bytes, missing)


def _missing_data(pte, data: Sequence[str]) -> tuple[str, ...]:
    """The keys the program's external tensors and XNNPACK constants read that neither
    its own named data nor a `.ptd` of `data` holds (the runtime: "Init failed", 0x20)."""
    from emitter_filter.ondisk.read.read_ptd import read_ptd

    wanted = {t.name for t in pte.tensors if t.ref.space is DataSpace.EXTERNAL and t.name}
    wanted.update(k for blob in pte.delegates for k in blob.named_keys or ())
    held = {entry.key for entry in pte.named_data}
    for path in data:
        held.update(read_ptd(path).named_data)
    return tuple(sorted(wanted - held))


def _spec(values, index: int) -> InputSpec:
    """A value's metadata as a runtime's method meta gives it: a tensor's `ScalarType`
    name and sizes, else the value's kind (`Int`, `Bool`, ...) with no dtype."""
    if not 0 <= index < len(values):
        return InputSpec(None, (), "absent")
    evalue = values[index]
    if evalue.valType == KernelTypes.Tensor and evalue.val is not None:
        tensor = evalue.val
        return InputSpec(
            SCALAR_TYPE_NAMES.get(tensor.scalarType, str(tensor.scalarType)),
            tuple(vector_ints(tensor.sizes)),
        )
    return InputSpec(None, (), _KINDS.get(evalue.valType, str(evalue.valType)))


def parse_size(text: str) -> int:
    """`--max-memory`'s value: bytes, or with a unit (K, M, G, T; KiB, MiB, GiB, TiB; B).

    Raises:
        ValueError: Not a size.
    """
    units = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    stripped = text.strip().upper().removesuffix("IB").removesuffix("B")
    number = stripped.rstrip("KMGT")
    unit = stripped[len(number) :]
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if unit not in units or not value >= 0 or value == float("inf"):
        raise ValueError(f"expected a size such as 4G, 512MiB or 1000000, got {text!r}")
    return int(value * units[unit])


def available_memory() -> int | None:
    """The memory the system can give without swapping (`MemAvailable`), or None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def memory_limit(given: int | None) -> int | None:
    """`--max-memory`'s bytes, or by default `DEFAULT_MEMORY_SHARE` of what is available
    (None where the system does not say)."""
    if given is not None:
        return given
    available = available_memory()
    return None if available is None else int(available * DEFAULT_MEMORY_SHARE)


def check_plan(plan: ProgramPlan, limit: int | None) -> None:
    """Refuses (`VerifyError`) a program whose `.ptd` is not given or that needs more
    memory than `limit`: neither can be a difference, and a runtime given either fails
    in its own words (0x20) or takes all memory."""
    if plan.missing_data:
        keys = ", ".join(repr(k) for k in plan.missing_data[:3])
        more = len(plan.missing_data) - 3
        keys += f" and {more} more" if more > 0 else ""
        given = f"none of {', '.join(plan.data)} holds" if plan.data else "no .ptd is given for"
        raise VerifyError(
            f"{plan.pte} reads external data that {given} ({keys}): its .ptd is missing; "
            f"give it with --data {plan.pte}=FILE.ptd"
        )
    need = plan.memory_bytes()
    if limit is not None and need > limit:
        raise VerifyError(
            f"{plan.pte} needs {_mib(need)} to load in a runtime ({_mib(plan.file_bytes)} of "
            f"files, {_mib(need - plan.file_bytes)} of planned arenas), more than the "
            f"{_mib(limit)} verify may use (--max-memory; by default "
            f"{DEFAULT_MEMORY_SHARE:.0%} of the memory available)"
        )


def _mib(size: int) -> str:
    return f"{size:,} B" if size < 1 << 20 else f"{size / (1 << 20):,.1f} MiB"
