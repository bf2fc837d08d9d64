"""The data maps ExecuTorch's runtime is given: a program's named data and the `.ptd` files',
and the keys a method looks up in them (`validate`'s external tensors and named data).

flat_tensor_data_map.cpp: FlatTensorDataMap::load; method.cpp: Method::init merges the
program's named data (PteDataMap) with the external data map (MergedDataMap).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from emitter_filter.errors import ProgramFormatError
from emitter_filter.ondisk.read.file_model import PtdFile, PteFile
from emitter_filter.ondisk.read.read_ptd import read_ptd_flat_tensor
from emitter_filter.program.flatbuffer_tables import FlatbufferError, Table
from emitter_filter.program.generated_fields import table_text, vector_ints

if TYPE_CHECKING:
    from emitter_filter.ondisk.analyse.problems import Problems

__all__ = ["DataMaps", "read_data_files"]


def read_data_files(
    data_files: Sequence[str | os.PathLike], problems: Problems, unreadable: Problems
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


class DataMaps:
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

    def external(self, key: str, where: str, problems: Problems) -> tuple | None:
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

    def named(self, key: str, where: str, problems: Problems) -> None:
        """A delegate's named-data key: in the `.pte` or a `.ptd`, else missing."""
        if key in self.pte_keys or key in self.layouts:
            return
        self.missing.add(key)
        if self.given:
            problems.add(f"{where}: named data {key!r} is in neither the .pte nor {self.names}")
