"""The runtimes `--verify` loads programs in: ExecuTorch's pybindings, else
executorch-numpy-runtime, else a one-line error naming both.

Both are imported here and only when asked for (`find_runtime`), so that the rest of
the package runs without them. Every call loads the program afresh, by path, with at
most one `.ptd` (both runtimes' Python APIs take one): a method runs once per load, so
a stateful method (a KV cache, a mutated buffer) starts from the file's state, and no
method shares the arenas of another (`executorch.runtime.Runtime` gives a program's
methods one set). Loading by path also leaves no buffer for the caller to keep alive.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from emitter_filter.errors import VerifyError
from emitter_filter.scalar_types import SCALAR_TYPE_NAMES

__all__ = ["InputSpec", "RuntimeFailure", "find_runtime", "NO_RUNTIME", "NO_DATA"]

logger = logging.getLogger(__name__)

#: The error when neither runtime imports (`verify` and `--verify` alike).
NO_RUNTIME = (
    "no runtime to verify in: neither ExecuTorch's pybindings (pip install executorch) nor "
    "executorch-numpy-runtime (pip install executorch-numpy-runtime: Python >= 3.12, no "
    "torch) imports here"
)


#: Said where a program needs a `.ptd` and the runtime is executorch-numpy-runtime.
NO_DATA = "loads no .ptd (install executorch to verify it in ExecuTorch's pybindings)"


@dataclass(frozen=True)
class InputSpec:
    """One input of a method as its metadata gives it: the `ScalarType` name and sizes,
    or `dtype` None for a value that is not a tensor (an int, a bool)."""

    dtype: str | None
    shape: tuple[int, ...] = ()


class RuntimeFailure(Exception):
    """A runtime refused to load or run a method; the message is its reason, one line."""


@contextlib.contextmanager
def _captured_stderr(lines: list[str]) -> Iterator[None]:
    """Collects what the runtime logs into `lines`: the reason of a refusal is there
    (`external_data_map is null`), and the CLI keeps its own stderr to one line. The
    pybindings send their C++ log to `sys.stderr` (pybind11's stream redirect); the numpy
    runtime writes it to file descriptor 2."""
    sys.stderr.flush()
    saved_fd, saved_stream, stream = os.dup(2), sys.stderr, io.StringIO()
    with tempfile.TemporaryFile() as log:
        os.dup2(log.fileno(), 2)
        sys.stderr = stream
        try:
            yield
        finally:
            sys.stderr = saved_stream
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
            log.seek(0)
            lines.extend(log.read().decode("utf-8", "replace").splitlines())
            lines.extend(stream.getvalue().splitlines())


# A line the runtime's C++ logs: `E 00:00:00.30 executorch:method.cpp:353] TEXT` (the numpy
# runtime), `[method.cpp:353] TEXT` (the pybindings); `I ...` lines are information.
_LOGGED = re.compile(r"\.(?:cpp|h):\d+\] (?P<text>.+)$")


def _reason(error: BaseException, log: Sequence[str]) -> str:
    """The error in one line, with the last thing the runtime logged before it."""
    text = " ".join(str(error).split()) or type(error).__name__
    logged = [
        m["text"].strip()
        for line in log
        if not line.startswith(("I ", "D "))
        for m in [_LOGGED.search(line)]
        if m
    ]
    if logged:
        text += f" ({logged[-1]})"
    return text


class _Runtime:
    """What `verify` asks of a runtime; each adapter answers in its own API."""

    #: Named in the report and in every message.
    name: str
    #: What the runtime cannot load, said where a file fails in it (or "").
    limits = ""
    #: Whether it loads a program with a `.ptd`.
    takes_data = True
    #: The exceptions its calls raise for a program it refuses.
    errors: tuple[type[BaseException], ...] = ()

    def check_data(self, pte: str, data: str | None) -> None:
        """Refuses a `.ptd` the runtime cannot load (`VerifyError`)."""

    def method_names(self, pte: str) -> list[str]:
        """The program's methods, in plan order."""
        return self._call(self._method_names, pte)

    def input_specs(self, pte: str, data: str | None, method: str) -> list[InputSpec]:
        return self._call(self._input_specs, pte, data, method)

    def run(self, pte: str, data: str | None, method: str, inputs: Sequence) -> list:
        """`method` of a fresh load of `pte` on `inputs`, (`InputSpec`, numpy array) pairs
        as `inputs.py` builds them: its outputs as numpy arrays."""
        return self._call(self._run, pte, data, method, inputs)

    def _call(self, function, *args):
        log: list[str] = []
        try:
            with _captured_stderr(log):
                return function(*args)
        except self.errors as error:
            raise RuntimeFailure(_reason(error, log)) from error
        finally:
            for line in log:
                logger.debug("runtime: %s", line)

    def _method_names(self, pte: str) -> list[str]:
        raise NotImplementedError

    def _input_specs(self, pte: str, data: str | None, method: str) -> list[InputSpec]:
        raise NotImplementedError

    def _run(self, pte: str, data: str | None, method: str, inputs: Sequence) -> list:
        raise NotImplementedError


def _bfloat16_bits(array):
    """float32 values as bfloat16 bits (uint16), rounded to nearest even: how
    executorch-numpy-runtime takes a bfloat16 tensor."""
    import numpy as np

    bits = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


class _PyBindings(_Runtime):
    """`executorch.extension.pybindings.portable_lib`: a module per load (its methods keep
    their memory apart), outputs as torch tensors."""

    name = "ExecuTorch's pybindings"

    def __init__(self, lib, torch) -> None:
        self._lib, self._torch = lib, torch
        self.errors = (RuntimeError, ValueError, IndexError, TypeError)

    def _method_names(self, pte: str) -> list[str]:
        program = self._lib._load_program(pte)
        return [program.get_method_name(i) for i in range(program.num_methods())]

    def _input_specs(self, pte: str, data: str | None, method: str) -> list[InputSpec]:
        meta = self._lib._load_for_executorch(pte, data).method_meta(method)
        specs = []
        for index in range(meta.num_inputs()):
            try:
                tensor = meta.input_tensor_meta(index)
            except IndexError:  # "Cannot get input tensor meta": not a tensor
                specs.append(InputSpec(None))
                continue
            specs.append(
                InputSpec(
                    SCALAR_TYPE_NAMES.get(tensor.dtype(), str(tensor.dtype())),
                    tuple(tensor.sizes()),
                )
            )
        return specs

    def _run(self, pte: str, data: str | None, method: str, inputs: Sequence) -> list:
        torch = self._torch
        values = []
        for spec, array in inputs:
            if spec.dtype is None:
                values.append(array.item())
            elif spec.dtype == "BFLOAT16":
                values.append(torch.from_numpy(array.copy()).to(torch.bfloat16))
            else:
                values.append(torch.from_numpy(array.copy()))
        module = self._lib._load_for_executorch(pte, data)
        return [self._array(v) for v in module.run_method(method, tuple(values))]

    def _array(self, value):
        import numpy as np

        torch = self._torch
        if not isinstance(value, torch.Tensor):
            return np.asarray(value)
        value = value.detach().contiguous()
        try:
            return value.numpy()
        except TypeError:  # bfloat16, float8: compared as their bits
            width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
            return value.view(width[value.element_size()]).numpy()


class _NumpyRuntime(_Runtime):
    """`executorch_numpy_runtime`: ExecuTorch 1.3.1's core with its CPU kernels and
    XNNPACK, numpy arrays in and out, no torch."""

    name = "executorch-numpy-runtime"
    takes_data = False
    limits = (
        "executorch-numpy-runtime runs CPU kernels and XNNPACK; it loads no .ptd and "
        "no custom op (install executorch for its pybindings)"
    )

    def __init__(self, module) -> None:
        self._en = module
        self.errors = (module.ExecuTorchError,)

    def check_data(self, pte: str, data: str | None) -> None:
        if data is not None:
            raise VerifyError(f"{pte} loads with {data}: {self.name} {NO_DATA}")

    def _program(self, pte: str, data: str | None):
        self.check_data(pte, data)
        return self._en.Runtime.get().load_program(pte)

    def _method_names(self, pte: str) -> list[str]:
        return list(self._program(pte, None).method_names)

    def _input_specs(self, pte: str, data: str | None, method: str) -> list[InputSpec]:
        meta = self._program(pte, data).load_method(method).metadata
        return [
            InputSpec(
                SCALAR_TYPE_NAMES.get(i["scalar_type"], str(i["scalar_type"])), tuple(i["shape"])
            )
            if "scalar_type" in i
            else InputSpec(None)
            for i in meta["inputs"]
        ]

    def _run(self, pte: str, data: str | None, method: str, inputs: Sequence) -> list:
        arrays = [_bfloat16_bits(a) if spec.dtype == "BFLOAT16" else a for spec, a in inputs]
        return list(self._program(pte, data).load_method(method)(arrays))


def find_runtime() -> _Runtime:
    """ExecuTorch's pybindings when they import, else executorch-numpy-runtime.

    Raises:
        VerifyError: Neither imports.
    """
    log: list[str] = []
    try:
        # What torch and its extensions print as they import is theirs, not a diagnostic
        # of ours: to the debug log, so that a refusal stays one line.
        with _captured_stderr(log):
            import executorch.extension.pybindings.portable_lib as portable_lib
            import torch

            # The quantized kernels are a library of their own: without them a quantized
            # program's methods miss operators ("OperatorMissing", 0x14).
            with contextlib.suppress(ImportError):
                import executorch.kernels.quantized  # noqa: F401
    except ImportError as error:
        logger.debug("ExecuTorch's pybindings do not import: %s", error)
    else:
        return _PyBindings(portable_lib, torch)
    finally:
        for line in log:
            logger.debug("importing ExecuTorch's pybindings: %s", line)
    try:
        import executorch_numpy_runtime
    except ImportError as error:
        logger.debug("executorch-numpy-runtime does not import: %s", error)
        raise VerifyError(NO_RUNTIME) from None
    return _NumpyRuntime(executorch_numpy_runtime)
