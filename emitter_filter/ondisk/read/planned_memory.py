"""What a method plans in memory: the arenas `non_const_buffer_sizes` asks for.

    execution_plan[i].non_const_buffer_sizes = [0, 4096, 512]
                                                ^  ^     ^ memory id 2
                                                |  memory id 1
                                                reserved by ExecuTorch (always 0)

The memory planner writes, per method, the size of each arena a runtime must hand
the method before it loads (`MethodMeta::memory_planned_buffer_size(i)` reads
entry `i + 1`); a tensor's `allocation_info.memory_id` names its arena. The sum is
what the method needs in memory beyond its constants, its delegates' own
allocations and what a backend makes of its weights at load: `plan_memory` reads
the arenas only, and says nothing it cannot read from the file.
"""

from __future__ import annotations

from dataclasses import dataclass

from emitter_filter.program.flatbuffer_tables import Table
from emitter_filter.program.generated_fields import table_text, vector_ints

__all__ = ["PlannedMemory", "plan_memory"]


@dataclass(frozen=True)
class PlannedMemory:
    """One method's planned arenas.

    Attributes:
        method: The plan's name.
        arenas: `non_const_buffer_sizes` as the file holds it: index 0 is reserved.
    """

    method: str
    arenas: tuple[int, ...]

    @property
    def planned_bytes(self) -> int:
        """The sum of `non_const_buffer_sizes` (index 0 included: it is 0)."""
        return sum(self.arenas)

    @property
    def by_memory_id(self) -> dict[int, int]:
        """Bytes per memory id (1-based, as `allocation_info.memory_id` names them)."""
        return {memory_id: size for memory_id, size in enumerate(self.arenas) if memory_id}


def plan_memory(program: Table) -> tuple[PlannedMemory, ...]:
    """Each method's planned arenas, in `execution_plan` order.

    Args:
        program: The `Program` table (`read_pte_program`). Not modified.
    """
    return tuple(
        PlannedMemory(table_text(plan.name) or "", tuple(vector_ints(plan.nonConstBufferSizes)))
        for plan in program.executionPlan or ()
    )
