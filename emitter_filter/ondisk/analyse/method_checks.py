"""What ExecuTorch's runtime checks of each method when it loads it (`Program::load_method`):
the plan's fields, its values and tensors, its delegates, chains and operators.

`validate` runs one `MethodChecks` per execution plan. Each check names the runtime's
function it mirrors (method.cpp, tensor_parser*.cpp, program_validation.cpp).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

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
from emitter_filter.ondisk.read.file_model import PteFile
from emitter_filter.program.flatbuffer_tables import Table
from emitter_filter.program.generated_fields import table_text, vector_ints
from emitter_filter.program.reachability import DataSpace
from emitter_filter.program.scalar_types import SCALAR_TYPE_NAMES, tensor_nbytes

if TYPE_CHECKING:
    from emitter_filter.ondisk.analyse.data_maps import DataMaps
    from emitter_filter.ondisk.analyse.problems import Problems

__all__ = ["MethodChecks"]

# runtime/core/portable_type/scalar_type.h: the ScalarTypes the portable runtime knows
# (Byte 0 .. UInt64 29, complex and bits types included); scalar_type_util.h: isValid.
_SCALAR_TYPES = range(30)
# runtime/core/exec_aten/util/tensor_dimension_limit.h: kTensorDimensionLimit.
_TENSOR_DIMENSION_LIMIT = 16
# method.cpp: Method::resolve_operator's kTempBufferSizeForName ("name.overload" and its NUL).
_OPERATOR_NAME_LIMIT = 100


class MethodChecks:
    """What `Program::load_method` checks of one plan (method.cpp, tensor_parser*.cpp)."""

    def __init__(
        self,
        number: int,
        plan: Table,
        program: Table,
        pte: PteFile,
        data: DataMaps,
        problems: Problems,
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
