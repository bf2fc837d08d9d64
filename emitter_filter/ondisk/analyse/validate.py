"""`validate_file`: what ExecuTorch's runtime checks when it loads a program and each method,
checked on the file, torch-free.

A file is *valid* when the runtime (ExecuTorch 1.5's, as its pip wheels build it) loads
the program and every method of it, leaving out what depends on how the runtime was
built: the operators and delegate backends it needs are listed (`Validity.operators`,
`Validity.backends`), not checked. Each check names the runtime's function it mirrors
(`runtime/executor/...`); `docs/valid.md` lists them. The program's checks are here, each
method's in `method_checks`, the data maps' keys in `data_maps`.

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

from emitter_filter.errors import InvalidOutputError, ProgramFormatError, PteFormatError
from emitter_filter.ondisk.analyse.data_maps import DataMaps, read_data_files
from emitter_filter.ondisk.analyse.method_checks import MethodChecks
from emitter_filter.ondisk.analyse.named_sizes import undersized_named_data
from emitter_filter.ondisk.analyse.problems import Problems
from emitter_filter.ondisk.read.byte_source import ByteSource
from emitter_filter.ondisk.read.file_headers import FLAT_TENSOR_IDENTIFIER, PROGRAM_IDENTIFIER
from emitter_filter.ondisk.read.file_model import PteFile
from emitter_filter.ondisk.read.read_pte import read_pte_program
from emitter_filter.ondisk.read.readers import xnnpack_graphs
from emitter_filter.program.fbs_schemas import PROGRAM
from emitter_filter.program.flatbuffer_tables import FlatbufferError, Table
from emitter_filter.program.flatbuffer_verifier import verify_flatbuffer
from emitter_filter.program.generated_fields import vector_ints

__all__ = [
    "Validity",
    "validate_file",
    "validate_bytes",
    "validate_outputs",
    "CONSTANT_BUFFER_PATH",
    "UNREADABLE",
    "check_inputs",
]

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


def _validate(source: str | bytes, data_files: Sequence[str | os.PathLike]) -> Validity:
    try:
        read = read_pte_program(source)
    except (ProgramFormatError, FlatbufferError) as error:
        return Validity((str(error),), (), (), (), (str(error),))
    problems, unreadable = Problems(), Problems()
    ptds = read_data_files(data_files, problems, unreadable)
    program, pte = read.program, read.pte
    operators: set[str] = set()
    backends: set[str] = set()
    data = DataMaps(pte, ptds, data_files)
    refused = verify_flatbuffer(PROGRAM, read.program_data)
    if refused is not None:
        # program.cpp: Program::load's VerifyProgramBuffer (InternalConsistency, the
        # pybindings' default verification): a union member of another type than its
        # `val_type` (a Tensor read as an Int) mostly shows as a misaligned field.
        problems.add(f"program flatbuffer: {refused} (the flatbuffers Verifier refuses it)")
    try:
        _check_program(program, pte, problems)
        for number, plan in enumerate(program.executionPlan or ()):
            MethodChecks(number, plan, program, pte, data, problems).check(operators, backends)
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


def _check_program(program: Table, pte: PteFile, problems: Problems) -> None:
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
