"""`validate_file`: what ExecuTorch's runtime checks when it loads a program and each method,
checked on the file, torch-free.

A file is *valid* when the runtime (ExecuTorch 1.5's, as its pip wheels build it) loads
the program and every method of it, leaving out what depends on how the runtime was
built: the operators and delegate backends it needs are listed (`Validity.operators`,
`Validity.backends`), not checked. Each check names the runtime's function it mirrors
(`runtime/executor/...`); `docs/valid.md` lists them.

The file is read once, by the readers every tool uses (`read_pte_program`,
`read_ptd_flat_tensor`), which already refuse offsets outside the file, segment
indices past `segments`, `data_buffer_idx` past its data space and a `.ptd` that does
not match the program's shapes: their error is then the one problem. The checks here
are those the readers do not make.

External tensors and named-data keys: the runtime refuses a method whose external
tensor (or XNNPACK constant) resolves in no data map it was given. Without data files
nothing can be known of them: the keys are listed in `Validity.missing_data` and are no
problem (`audit --require-data` makes them a gate); with data files, a key in none of
them is a problem, as the runtime refuses that method with those files.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

from emitter_filter._program_fbs.executorch_flatbuffer.DataLocation import DataLocation
from emitter_filter._program_fbs.executorch_flatbuffer.InstructionArguments import (
    InstructionArguments,
)
from emitter_filter._program_fbs.executorch_flatbuffer.KernelTypes import KernelTypes
from emitter_filter._program_fbs.executorch_flatbuffer.TensorDataLocation import (
    TensorDataLocation,
)
from emitter_filter._program_fbs.executorch_flatbuffer.TensorShapeDynamism import (
    TensorShapeDynamism,
)
from emitter_filter.delegates import XNNPACK_BACKEND_ID
from emitter_filter.errors import InvalidOutputError, ProgramFormatError, PteFormatError
from emitter_filter.ondisk.analyse.named_sizes import undersized_named_data
from emitter_filter.ondisk.read.byte_source import ByteSource
from emitter_filter.ondisk.read.file_headers import FLAT_TENSOR_IDENTIFIER, PROGRAM_IDENTIFIER
from emitter_filter.ondisk.read.file_model import PtdFile, PteFile
from emitter_filter.ondisk.read.read_ptd import read_ptd_flat_tensor
from emitter_filter.ondisk.read.read_pte import read_pte_program, tensor_nbytes
from emitter_filter.ondisk.read.readers import xnnpack_graphs
from emitter_filter.program.fbs_schemas import PROGRAM
from emitter_filter.program.flatbuffer_tables import FlatbufferError, Table
from emitter_filter.program.generated_fields import table_text, vector_ints
from emitter_filter.program.reachability import DataSpace
from emitter_filter.program.scalar_types import SCALAR_TYPE_NAMES

__all__ = [
    "Validity",
    "validate_file",
    "validate_bytes",
    "validate_outputs",
    "CONSTANT_BUFFER_PATH",
    "UNREADABLE",
    "check_inputs",
]

# runtime/core/portable_type/scalar_type.h: the ScalarTypes the portable runtime knows
# (Byte 0 .. UInt64 29, complex and bits types included); scalar_type_util.h: isValid.
_SCALAR_TYPES = range(30)
# runtime/core/exec_aten/util/tensor_dimension_limit.h: kTensorDimensionLimit.
_TENSOR_DIMENSION_LIMIT = 16
# method.cpp: Method::resolve_operator's kTempBufferSizeForName ("name.overload" and its NUL).
_OPERATOR_NAME_LIMIT = 100
#: The status of a file whose every problem is this project's reader's (`Validity.unreadable`).
UNREADABLE = "emitter-filter cannot read it"
#: Why the constant_buffer path is refused, in the runtime's words (program.cpp:
#: Program::load); the writers repair it (`check_inputs`).
CONSTANT_BUFFER_PATH = (
    "relies on the constant_buffer path, which ExecuTorch's runtime refuses "
    "(built with ET_ENABLE_DEPRECATED_CONSTANT_BUFFER=0, as its pip wheels are); "
    "emitter-filter prune rewrites it to the constant segment"
)


@dataclass(frozen=True)
class Validity:
    """What `validate_file` found.

    Attributes:
        problems: Why the runtime would refuse the program or one of its methods, each
            one line naming the plan and the index; empty for a valid file.
        operators: The operators the file's methods call (`name.overload`), sorted.
        backends: The delegate backend ids its methods need, sorted.
        missing_data: External-tensor and named-data keys found in none of the data
            files given (nor in the `.pte`'s own named data), sorted.
        unreadable: The problems that are this project's reader's, not the runtime's:
            it refuses what the runtime may load (an offset outside a segment no method
            reads, overlapping objects), so these say the file cannot be read here, not
            that it is invalid (`docs/valid.md`). Also in `problems`.
    """

    problems: tuple[str, ...]
    operators: tuple[str, ...]
    backends: tuple[str, ...]
    missing_data: tuple[str, ...]
    unreadable: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        return not self.problems

    @property
    def status(self) -> str:
        """`valid`, or `invalid: ` with the first problem the runtime has (and how many more),
        in one line; `emitter-filter cannot read it: ` where every problem is the reader's."""
        if self.valid:
            return "valid"
        refused = [p for p in self.problems if p not in self.unreadable]
        word = "invalid" if refused else UNREADABLE
        more = len(self.problems) - 1
        return f"{word}: {(refused or self.problems)[0]}" + (f" (and {more} more)" if more else "")

    def missing_line(self) -> str:
        """The `--require-data` gate's line: the keys no data file holds."""
        keys = ", ".join(repr(k) for k in self.missing_data)
        return f"external data in none of the data files given or beside it: {keys}"

    def to_json(self) -> dict:
        """The form `audit --json` prints."""
        return {
            "valid": self.valid,
            "problems": list(self.problems),
            "operators": list(self.operators),
            "backends": list(self.backends),
            "missing_data": list(self.missing_data),
            "unreadable": list(self.unreadable),
        }


def validate_file(pte: str | os.PathLike, data_files: Sequence[str | os.PathLike] = ()) -> Validity:
    """Checks a `.pte` file (with the `.ptd` files it loads with) as ExecuTorch's runtime
    does when it loads the program and each of its methods. Nothing is modified.

    Args:
        pte: The program file.
        data_files: The `.ptd` files the runtime would be given (its data maps).

    Returns:
        The problems found (a file that cannot be read as a program: the reader's
        error), and what the file needs of the runtime's build and data.

    Raises:
        OSError: A file cannot be read.
    """
    return _validate(os.fspath(pte), data_files)


def validate_bytes(pte: bytes, data_files: Sequence[str | os.PathLike] = ()) -> Validity:
    """`validate_file` of a program's bytes."""
    return _validate(pte, data_files)


def validate_outputs(written: Sequence[tuple[str, str]]) -> None:
    """Refuses a writer's outputs if a program among them would not load in ExecuTorch's
    runtime: the check `output.write_outputs` makes of what every writer wrote, before
    anything replaces anything.

    Each program (a file with the program identifier) is validated with every `.ptd`
    written with it. Keys of a program's external tensors found in none of them are
    a problem only if some `.ptd` was written (as `validate_file` has it).

    Args:
        written: (file as written, its target) of each output. Not modified.

    Raises:
        InvalidOutputError: The first invalid program, named by its target, and its problem.
    """
    kinds = {}
    for temp, _ in written:
        with open(temp, "rb") as file:
            kinds[temp] = file.read(8)[4:8]
    data = [temp for temp, _ in written if kinds[temp] == FLAT_TENSOR_IDENTIFIER]
    for temp, final in written:
        if kinds[temp] != PROGRAM_IDENTIFIER:
            continue
        validity = validate_file(temp, data)
        if not validity.valid:
            status = validity.status
            for other, target in written:
                status = status.replace(other, target)
            raise InvalidOutputError(f"{final}: not written: {status}")


class _Problems:
    """The problems of one file, in the order found, each once."""

    def __init__(self) -> None:
        self.lines: dict[str, None] = {}

    def add(self, line: str) -> None:
        self.lines.setdefault(line, None)


def _validate(source: str | bytes, data_files: Sequence[str | os.PathLike]) -> Validity:
    try:
        read = read_pte_program(source)
    except (ProgramFormatError, FlatbufferError) as error:
        return Validity((str(error),), (), (), (), (str(error),))
    problems, unreadable = _Problems(), _Problems()
    ptds = _read_data_files(data_files, problems, unreadable)
    program, pte = read.program, read.pte
    operators: set[str] = set()
    backends: set[str] = set()
    data = _DataMaps(pte, ptds, data_files)
    refused = PROGRAM.verify(read.program_data)
    if refused is not None:
        # program.cpp: Program::load's VerifyProgramBuffer (InternalConsistency, the
        # pybindings' default verification): a union member of another type than its
        # `val_type` (a Tensor read as an Int) mostly shows as a misaligned field.
        problems.add(f"program flatbuffer: {refused} (the flatbuffers Verifier refuses it)")
    try:
        _check_program(program, pte, problems)
        for number, plan in enumerate(program.executionPlan or ()):
            _Method(number, plan, program, pte, data, problems).check(operators, backends)
        with ByteSource(source) as opened:
            held = {e.key: e.nbytes for e in pte.named_data}
            for ptd, _ in ptds:
                for key, entry in ptd.named_data.items():
                    held.setdefault(key, entry.nbytes)
            graphs = xnnpack_graphs(pte, program, read.program_data, opened)
            for line in undersized_named_data((graph for _, graph in graphs), held):
                problems.add(line)
    except (ProgramFormatError, FlatbufferError) as error:
        problems.add(str(error))  # A table the reader decoded lazily, corrupt.
        unreadable.add(str(error))
    return Validity(
        tuple(problems.lines),
        tuple(sorted(operators)),
        tuple(sorted(backends)),
        tuple(sorted(data.missing)),
        tuple(unreadable.lines),
    )


def _read_data_files(
    data_files: Sequence[str | os.PathLike], problems: _Problems, unreadable: _Problems
) -> list[tuple[PtdFile, Table]]:
    """Each `.ptd` the reader accepts; a problem for each it or the runtime refuses.

    flat_tensor_data_map.cpp: FlatTensorDataMap::load refuses a FlatTensor without
    `named_data` or `segments`.
    """
    ptds = []
    for path in data_files:
        try:
            ptd, table = read_ptd_flat_tensor(path)
        except (ProgramFormatError, FlatbufferError) as error:
            problems.add(str(error))
            unreadable.add(str(error))
            continue
        if table.namedData is None or table.segments is None:
            field = "named_data" if table.namedData is None else "segments"
            problems.add(f"{ptd.path}: FlatTensor has no {field}: the runtime refuses the file")
            continue
        ptds.append((ptd, table))
    return ptds


def _check_program(program: Table, pte: PteFile, problems: _Problems) -> None:
    """What `Program::load` checks (program.cpp) beyond the reader's bounds."""
    if program.executionPlan is None:
        # program_validation.cpp: validate_program.
        problems.add("Program.execution_plan is absent")
    constant_segment = program.constantSegment
    offsets = vector_ints(constant_segment.offsets) if constant_segment is not None else []
    constant_buffer = program.constantBuffer
    if not offsets:
        # program.cpp: Program::load takes the constant_buffer path when
        # constant_segment.offsets is absent or empty, whatever constant_buffer holds.
        problems.add(CONSTANT_BUFFER_PATH)
    elif len(offsets) > 1 and constant_buffer:
        problems.add(
            f"constant_buffer has {len(constant_buffer)} entries and constant_segment.offsets "
            f"{len(offsets)}: only one may be used (the runtime refuses the program)"
        )
    if program.namedData is not None and program.segments is None:
        # pte_data_map.cpp: PteDataMap::create.
        problems.add("Program.named_data without Program.segments")
    if pte.segment_base_offset == 0 and pte.mutable_segment is not None:
        # program.cpp: Program::load_mutable_subsegment_into refuses a program without
        # an extended header ("No segments in program").
        problems.add("mutable_data_segments in a file without an extended header")


class _DataMaps:
    """The keys the runtime's data maps hold: the `.pte`'s named data, then the `.ptd` files'.

    method.cpp: Method::init merges the program's named data (PteDataMap) with the
    external data map (MergedDataMap); external tensors resolve in the latter only.
    """

    def __init__(
        self,
        pte: PteFile,
        ptds: Sequence[tuple[PtdFile, Table]],
        data_files: Sequence[str | os.PathLike],
    ) -> None:
        self.given = bool(data_files)
        self.pte_keys = {entry.key for entry in pte.named_data}
        # key -> (scalar_type, sizes, dim_order) of its tensor_layout, None without one.
        self.layouts: dict[str, tuple[int, list[int], list[int]] | None] = {}
        for _, table in ptds:
            for entry in table.namedData:
                layout = entry.tensorLayout
                self.layouts.setdefault(
                    table_text(entry.key) or "",
                    None
                    if layout is None
                    else (
                        layout.scalarType,
                        vector_ints(layout.sizes),
                        vector_ints(layout.dimOrder),
                    ),
                )
        # key -> bytes from its data's start to the end of its file: a planned (mutable)
        # external tensor is read whole from there, whatever its segment's size
        # (flat_tensor_data_map.cpp: FlatTensorDataMap::load_data_into).
        self.room: dict[str, int] = {}
        for ptd, _ in ptds:
            for key, entry in ptd.named_data.items():
                self.room.setdefault(key, ptd.file_bytes - entry.offset)
        self.names = ", ".join(os.fspath(p) for p in data_files)
        self.missing: set[str] = set()

    def external(self, key: str, where: str, problems: _Problems) -> tuple | None:
        """The layout of an external tensor's key; a problem or a missing key if none has it."""
        if key in self.layouts:
            layout = self.layouts[key]
            if layout is None:
                problems.add(
                    f"{where}: external tensor {key!r} has no tensor_layout in {self.names}"
                )
            return layout
        self.missing.add(key)
        if self.given:
            problems.add(f"{where}: external tensor {key!r} is in none of {self.names}")
        return None

    def named(self, key: str, where: str, problems: _Problems) -> None:
        """A delegate's named-data key: in the `.pte` or a `.ptd`, else missing."""
        if key in self.pte_keys or key in self.layouts:
            return
        self.missing.add(key)
        if self.given:
            problems.add(f"{where}: named data {key!r} is in neither the .pte nor {self.names}")


class _Method:
    """What `Program::load_method` checks of one plan (method.cpp, tensor_parser*.cpp)."""

    def __init__(
        self,
        number: int,
        plan: Table,
        program: Table,
        pte: PteFile,
        data: _DataMaps,
        problems: _Problems,
    ) -> None:
        self.plan, self.program, self.pte, self.data, self.problems = (
            plan,
            program,
            pte,
            data,
            problems,
        )
        name = table_text(plan.name)
        self.where = f"plan {name!r}" if name is not None else f"plan {number}"
        self.values = plan.values or []
        self.buffer_sizes = vector_ints(plan.nonConstBufferSizes)

    def add(self, message: str) -> None:
        self.problems.add(f"{self.where}: {message}")

    def check(self, operators: set[str], backends: set[str]) -> None:
        self._check_meta()
        dynamic_inputs = {
            i
            for i in vector_ints(self.plan.inputs)
            if 0 <= i < len(self.values)
            and (tensor := self._tensor(i)) is not None
            and tensor.shapeDynamism != TensorShapeDynamism.STATIC
        }
        for index, evalue in enumerate(self.values):
            self._check_value(index, evalue, index in dynamic_inputs)
        self._check_delegates(backends)
        self._check_chains()
        for number, operator in enumerate(self.plan.operators or ()):
            name = self._operator_name(number, operator)
            if name is not None:
                operators.add(name)

    def _tensor(self, index: int) -> Table | None:
        evalue = self.values[index]
        return evalue.val if evalue.valType == KernelTypes.Tensor else None

    def _check_meta(self) -> None:
        # program.cpp: Program::method_meta; program_validation.cpp: validate_program.
        plan = self.plan
        for field, value in (
            ("name", plan.name),
            ("values", plan.values),
            ("inputs", plan.inputs),
            ("outputs", plan.outputs),
            ("non_const_buffer_sizes", plan.nonConstBufferSizes),
            ("delegates", plan.delegates),
        ):
            if value is None:
                self.add(f"ExecutionPlan.{field} is absent")
        for field in ("inputs", "outputs"):
            for index in vector_ints(getattr(plan, field)):
                self._check_index(index, f"{field} entry")
        if not _utf8(plan.name):
            # The Python bindings (Program.method_names) cannot name such a method.
            self.add("name is not UTF-8")

    def _check_index(self, index: int, what: str) -> bool:
        if not 0 <= index < len(self.values):
            self.add(f"{what} {index} outside values (len {len(self.values)})")
            return False
        return True

    def _check_value(self, index: int, evalue: Table, dynamic_input: bool) -> None:
        """method.cpp: Method::parse_values; program_validation.cpp: validate_program."""
        kind, val = evalue.valType, evalue.val
        if val is None and kind != KernelTypes.Null:
            self.add(f"value {index}: null value")
        elif kind == KernelTypes.Tensor:
            self._check_tensor(index, val, dynamic_input)
        elif kind in (KernelTypes.IntList, KernelTypes.TensorList, KernelTypes.OptionalTensorList):
            if val.items is None:
                self.add(f"value {index}: list without items")
            for item in vector_ints(val.items):
                if item == -1 and kind == KernelTypes.OptionalTensorList:
                    continue
                if not self._check_index(item, f"value {index}: list item"):
                    continue
                if kind != KernelTypes.IntList and self._tensor(item) is None:
                    self.add(f"value {index}: list item {item} is not a Tensor")
        elif kind in (KernelTypes.DoubleList, KernelTypes.BoolList) and val.items is None:
            self.add(f"value {index}: list without items")
        elif kind == KernelTypes.String and val.stringVal is None:
            self.add(f"value {index}: String without string_val")
        elif kind > KernelTypes.OptionalTensorList:
            self.add(f"value {index}: unknown KernelTypes value {kind}")

    def _check_tensor(self, index: int, tensor: Table, dynamic_input: bool) -> None:
        where = f"value {index}"
        sizes = tensor.sizes
        # program_validation.cpp: validate_tensor (skipped for dynamic inputs).
        if not dynamic_input:
            if sizes is None:
                self.add(f"{where}: Tensor without sizes")
            elif any(size < 0 for size in sizes):
                self.add(f"{where}: negative size in sizes {list(sizes)}")
            if tensor.scalarType not in _SCALAR_TYPES:
                self.add(f"{where}: invalid scalar_type {tensor.scalarType}")
        # tensor_parser_portable.cpp: parseTensor.
        if tensor.storageOffset != 0:
            self.add(f"{where}: storage_offset {tensor.storageOffset} (only 0 is supported)")
        if tensor.shapeDynamism == TensorShapeDynamism.DYNAMIC_UNBOUND:
            self.add(f"{where}: DYNAMIC_UNBOUND shape (not supported)")
        rank = len(sizes or ())
        if rank > _TENSOR_DIMENSION_LIMIT:
            self.add(f"{where}: rank {rank} > {_TENSOR_DIMENSION_LIMIT}")
        if tensor.dimOrder is None or len(tensor.dimOrder) != rank:
            got = (
                "no dim_order"
                if tensor.dimOrder is None
                else f"dim_order of {len(tensor.dimOrder)}"
            )
            self.add(f"{where}: {got} for {rank} sizes")
        elif sorted(tensor.dimOrder) != list(range(rank)):
            # dim_order_util.h: dim_order_to_stride validates the permutation.
            self.add(
                f"{where}: dim_order {list(tensor.dimOrder)} is no permutation of 0..{rank - 1}"
            )
        if sizes is None or any(size < 0 for size in sizes):
            return
        nbytes = tensor_nbytes(tensor, where) or 0
        info = tensor.extraTensorInfo
        planned = tensor.allocationInfo
        if info is not None and info.location == TensorDataLocation.EXTERNAL:
            self._check_external(where, tensor, info)
            key = table_text(info.fullyQualifiedName)
            room = self.data.room.get(key or "")
            if planned is not None and room is not None and nbytes > room:
                self.add(
                    f"{where}: mutable external tensor {key!r} reads {nbytes:,} B from its "
                    f".ptd, which holds {room:,} B from where its data starts"
                )
        elif tensor.dataBufferIdx > 0:
            self._check_stored(where, tensor, nbytes, planned is not None)
        if planned is not None:
            self._check_planned(where, planned, nbytes)

    def _check_external(self, where: str, tensor: Table, info: Table) -> None:
        """tensor_parser_exec_aten.cpp: getTensorDataPtr, validateTensorLayout;
        method.cpp: Method::parse_external_constants."""
        key = table_text(info.fullyQualifiedName)
        if key is None:
            self.add(f"{where}: external tensor without fully_qualified_name")
            return
        layout = self.data.external(key, f"{self.where} {where}", self.problems)
        if layout is None:
            return
        scalar_type, sizes, dim_order = layout
        mine = (tensor.scalarType, vector_ints(tensor.sizes), vector_ints(tensor.dimOrder))
        if mine != (scalar_type, sizes, dim_order):
            self.add(
                f"{where}: external tensor {key!r} is {_layout_text(*mine)}, its data "
                f"{_layout_text(scalar_type, sizes, dim_order)} (the runtime refuses the method)"
            )

    def _check_stored(self, where: str, tensor: Table, nbytes: int, mutable: bool) -> None:
        """Each tensor's bytes within its entry's segment (the reader checks the first user's):
        program.cpp: get_constant_buffer_data, load_mutable_subsegment_into."""
        space = DataSpace.MUTABLE if mutable else DataSpace.CONSTANT
        entry = self.pte.entries[space].get(tensor.dataBufferIdx)
        segment_index = self.pte.mutable_segment if mutable else self.pte.constant_segment
        if entry is None or segment_index is None:
            return  # The reader refused it already, or it is the constant_buffer path.
        segment = self.pte.segments[segment_index]
        if entry.offset + nbytes > segment.offset + segment.size:
            self.add(
                f"{where}: {nbytes} bytes at {space.value} entry {tensor.dataBufferIdx} overrun "
                f"segment {segment_index} (size {segment.size})"
            )

    def _check_planned(self, where: str, planned: Table, nbytes: int) -> None:
        """tensor_parser_exec_aten.cpp: getMemPlannedPtr; hierarchical_allocator.h:
        get_offset_address, over the buffers `non_const_buffer_sizes[1:]` plans."""
        buffers = self.buffer_sizes[1:]
        memory_id = planned.memoryId - 1
        offset = planned.memoryOffsetLow | (planned.memoryOffsetHigh << 32)
        if not 0 <= memory_id < len(buffers):
            self.add(
                f"{where}: memory_id {planned.memoryId} names no planned buffer "
                f"(non_const_buffer_sizes has {len(self.buffer_sizes)} entries)"
            )
        elif offset + nbytes > buffers[memory_id]:
            self.add(
                f"{where}: {nbytes} bytes at offset {offset} overrun planned buffer "
                f"{planned.memoryId} ({buffers[memory_id]} bytes)"
            )

    def _check_delegates(self, backends: set[str]) -> None:
        """method.cpp: BackendDelegate::Init, GetProcessedData; the XNNPACK backend's init
        reads each constant by key from the named data map it is given."""
        blobs = {(d.location, d.index): d for d in self.pte.delegates}
        for number, delegate in enumerate(self.plan.delegates or ()):
            where = f"delegate {number}"
            backend = table_text(delegate.id)
            if backend is None:
                self.add(f"{where}: no backend id")
            else:
                backends.add(backend)
            location = delegate.processed.location
            if location == DataLocation.SEGMENT and self.pte.segment_base_offset == 0:
                self.add(
                    f"{where}: data in segment {delegate.processed.index} of a file "
                    "without an extended header"
                )
            kind = "segment" if location == DataLocation.SEGMENT else "inline"
            blob = blobs.get((kind, delegate.processed.index))
            if backend == XNNPACK_BACKEND_ID and blob is not None and blob.named_keys:
                for key in sorted(blob.named_keys):
                    self.data.named(key, f"{self.where} {where} ({backend})", self.problems)

    def _check_chains(self) -> None:
        """method.cpp: Method::init, gen_instruction_arguments, resolve_operator;
        Method::execute_instruction for a delegate call's index."""
        chains = self.plan.chains
        if not chains:
            self.add("no chains")
            return
        operators = len(self.plan.operators or ())
        delegates = len(self.plan.delegates or ())
        for number, chain in enumerate(chains):
            if chain.instructions is None:
                self.add(f"chain {number}: no instructions")
                continue
            for position, instruction in enumerate(chain.instructions):
                where = f"chain {number} instruction {position}"
                kind, args = instruction.instrArgsType, instruction.instrArgs
                if args is None:
                    self.add(f"{where}: no arguments")
                    continue
                if kind in (InstructionArguments.KernelCall, InstructionArguments.DelegateCall):
                    if args.args is None:
                        self.add(f"{where}: call without args")
                    indices = vector_ints(args.args)
                    if (
                        kind == InstructionArguments.KernelCall
                        and not 0 <= args.opIndex < operators
                    ):
                        self.add(f"{where}: op_index {args.opIndex} >= len(operators) {operators}")
                    if kind == InstructionArguments.DelegateCall and not (
                        0 <= args.delegateIndex < delegates
                    ):
                        self.add(
                            f"{where}: delegate_index {args.delegateIndex} >= "
                            f"len(delegates) {delegates}"
                        )
                elif kind == InstructionArguments.MoveCall:
                    indices = [args.moveFrom, args.moveTo]
                elif kind == InstructionArguments.JumpFalseCall:
                    indices = [args.condValueIndex]
                elif kind == InstructionArguments.FreeCall:
                    indices = [args.valueIndex]
                else:
                    self.add(f"{where}: invalid instruction type {kind}")
                    continue
                for index in indices:
                    self._check_index(index, f"{where}: value index")

    def _operator_name(self, number: int, operator: Table) -> str | None:
        """method.cpp: populate_operator_name."""
        name, overload = table_text(operator.name), table_text(operator.overload)
        if name is None:
            self.add(f"operator {number}: no name")
            return None
        if not _utf8(operator.name) or not _utf8(operator.overload):
            # The Python bindings decode each kernel name (UnicodeDecodeError in pybind11).
            self.add(f"operator {number}: name {name!r} is not UTF-8")
        full = f"{name}.{overload}" if overload else name
        if len(full) >= _OPERATOR_NAME_LIMIT:
            self.add(
                f"operator {number}: name {full!r} is {len(full)} characters, the runtime "
                f"takes {_OPERATOR_NAME_LIMIT - 1}"
            )
        return full


def _utf8(raw: bytes | str | None) -> bool:
    """Whether a string field decodes as UTF-8 (absent counts as decoding)."""
    if isinstance(raw, bytes):
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return False
    return True


def _layout_text(scalar_type: int, sizes: Sequence[int], dim_order: Sequence[int]) -> str:
    name = SCALAR_TYPE_NAMES.get(scalar_type, f"scalar_type {scalar_type}")
    return f"{name} {list(sizes)} dim_order {list(dim_order)}"


def check_inputs(inputs: Sequence[tuple[str | os.PathLike, Sequence[str | os.PathLike]]]) -> None:
    """Refuses the first input `validate_file` calls invalid, in the line `audit` prints for
    it: what every writer and `verify` do before anything is opened for writing or run.

    A writer reads only the fields it needs (a name by its length, where the flatbuffers
    Verifier wants a NUL after it) and would write them again well-formed, as another
    operator; a runtime crashes on some such files. What a writer repairs is not refused:
    a program on the `constant_buffer` path is rewritten onto the constant segment.
    Nothing is modified.

    Args:
        inputs: (program, the `.ptd` files it is read with) of each input, as the command
            reads them (`data_files.data_files_for`).

    Raises:
        PteFormatError: An input is invalid (`FILE: invalid: PROBLEM`) or this project's
            reader refuses it (its own error, with its offset): the line `audit` prints
            for it.
        OSError: A file cannot be read.
    """
    for pte, data in inputs:
        validity = validate_file(pte, data)
        problems = tuple(p for p in validity.problems if p != CONSTANT_BUFFER_PATH)
        if problems and all(p in validity.unreadable for p in problems):
            read_pte_program(pte, data)  # The reader's own error: the line `audit` prints.
        if problems:
            raise PteFormatError(os.fspath(pte), replace(validity, problems=problems).status)
