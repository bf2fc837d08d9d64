# Typed interface of the flatc-generated reader beside it (flatc --python, without
# --python-typing): what our code calls of it, for mypy. Written by hand; check it
# against the .py when regenerating (see emitter_filter/_program_fbs/__init__.py).
# A vector element accessor (`Xvalues(j)`) returns None only when the vector is
# absent, when its `...Length()` is 0, so it is typed without None; a table or
# union field accessor returns None when the field is absent.

from typing import Any

from emitter_filter._program_fbs.fb_xnnpack.XNNTensorValue import XNNTensorValue

class XNNQuantizedTensorValue:
    @classmethod
    def GetRootAs(cls, buf: bytes, offset: int = 0) -> XNNQuantizedTensorValue: ...
    def Init(self, buf: bytes, pos: int) -> None: ...
    def TensorValue(self) -> XNNTensorValue | None: ...
    def QuantParamsType(self) -> int: ...
    # A flatbuffers.table.Table (untyped package): its Bytes and Pos init the member.
    def QuantParams(self) -> Any | None: ...

# The module's builder functions (Start, Add..., End), not used by our code.
def __getattr__(name: str) -> Any: ...
