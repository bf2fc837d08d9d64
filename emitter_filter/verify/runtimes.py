"""The runtimes `--verify` loads programs in: ExecuTorch's pybindings, else
executorch-numpy-runtime, else a one-line error naming both.

Both are imported here and only when asked for (`find_runtime`), so that the rest of
the package runs without them. `run_methods` loads a program by path, with at most one
`.ptd` (both runtimes' Python APIs take one), runs each method asked for once in that
load (a stateful method starts from the file's state; each method of a load has its own
planned memory), and releases the load before it returns. Loading by path also leaves no
buffer for the caller to keep alive.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from emitter_filter.errors import VerifyError

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
    or `dtype` None for a value that is not a tensor (an int, a bool: `kind` names it)."""

    dtype: str | None
    shape: tuple[int, ...] = ()
    #: What the value is where it is not a tensor: its `KernelTypes` name (`Int`, `Bool`).
    kind: str = ""


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
    #: The kinds of non-tensor output it returns (`KernelTypes` names), None for any.
    returns: frozenset[str] | None = None

    def check_outputs(self, pte: str, method: str, outputs: Sequence[InputSpec]) -> None:
        """Refuses (`VerifyError`, one line) a method with an output the runtime cannot
        return: told from the file, before it runs."""
        if self.returns is None:
            return
        kinds = sorted({o.kind for o in outputs if o.dtype is None} - self.returns)
        if kinds:
            raise VerifyError(
                f"{pte} method {method!r} returns a {' and a '.join(kinds)}, which "
                f"{self.name} cannot return (only tensors, ints, floats and bools: a "
                "training program's methods return strings); verify it where executorch "
                "is installed"
            )

    def check_data(self, pte: str, data: str | None) -> None:
        """Refuses a `.ptd` the runtime cannot load (`VerifyError`)."""

    def run_methods(
        self, pte: str, data: str | None, calls: Sequence[tuple[str, Sequence | None]]
    ) -> list:
        """One load of `pte`, each (method, inputs) of `calls` loaded and run once on its
        inputs (only loaded where they are None), in order: per call, its outputs as numpy
        arrays (None where only loaded) or the `RuntimeFailure` of that method. The load
        is released before this returns.

        Raises:
            RuntimeFailure: The program does not load.
        """
        loaded = self._call(self._load, pte, data)
        try:
            results: list = []
            for method, inputs in calls:
                try:
                    results.append(self._call(self._run_loaded, loaded, method, inputs))
                except RuntimeFailure as failure:
                    results.append(failure)
            return results
        finally:
            del loaded

    def _call(self, function, *args):
        log: list[str] = []
        try:
            with _captured_stderr(log):
                return function(*args)
        except MemoryError:
            # std::bad_alloc: an arena or buffer larger than the memory there is.
            raise RuntimeFailure("out of memory (std::bad_alloc)") from None
        except self.errors as error:
            raise RuntimeFailure(_reason(error, log)) from error
        finally:
            for line in log:
                logger.debug("runtime: %s", line)

    def _load(self, pte: str, data: str | None):
        raise NotImplementedError

    def _run_loaded(self, loaded, method: str, inputs: Sequence | None):
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

    def _load(self, pte: str, data: str | None):
        return self._lib._load_for_executorch(pte, data)

    def _run_loaded(self, loaded, method: str, inputs: Sequence | None):
        loaded.method_meta(method)  # A method the load refused raises here.
        if inputs is None:
            return None
        return [self._array(v) for v in loaded.run_method(method, self._values(inputs))]

    def _values(self, inputs: Sequence) -> tuple:
        torch = self._torch
        values = []
        for spec, array in inputs:
            if spec.dtype is None:
                values.append(array.item())
            elif spec.dtype == "BFLOAT16":
                values.append(torch.from_numpy(array.copy()).to(torch.bfloat16))
            else:
                values.append(torch.from_numpy(array.copy()))
        return tuple(values)

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
    returns = frozenset({"Int", "Double", "Bool"})
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

    def _load(self, pte: str, data: str | None):
        return self._program(pte, data)

    def _run_loaded(self, loaded, method: str, inputs: Sequence | None):
        import numpy as np

        loaded_method = loaded.load_method(method)
        if inputs is None:
            return None
        arrays = [_bfloat16_bits(a) if spec.dtype == "BFLOAT16" else a for spec, a in inputs]
        # A constant method (get_max_seq_len) returns a Python scalar, not an array.
        return [np.asarray(v) for v in loaded_method(arrays)]


#: The module whose import is the pybindings' (seconds: torch and ExecuTorch's kernels).
_PYBINDINGS = "executorch.extension.pybindings.portable_lib"


def find_runtime(announce=None) -> _Runtime:
    """ExecuTorch's pybindings when they import, else executorch-numpy-runtime.

    Args:
        announce: Called with a line before an import that takes seconds (the CLI
            prints it on a terminal), or None.

    Raises:
        VerifyError: Neither imports.
    """
    log: list[str] = []
    if announce is not None and _PYBINDINGS not in sys.modules:
        announce("loading ExecuTorch's runtime (torch and its kernels: seconds) ...")
    try:
        # What torch and its extensions print as they import is theirs, not a diagnostic
        # of ours: to the debug log, so that a refusal stays one line.
        with _captured_stderr(log):
            import executorch.extension.pybindings.portable_lib as portable_lib
            import torch

            # Libraries of kernels of their own: without them a quantized program's
            # methods, or export_llama's (llama::custom_sdpa.out, llama::update_cache.out),
            # miss operators ("OperatorMissing", 0x14).
            for library in ("executorch.kernels.quantized", _CUSTOM_OPS):
                with contextlib.suppress(ImportError, OSError, RuntimeError):
                    importlib.import_module(library)
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


#: Registers ExecuTorch's LLM operators with the pybindings as it imports (the package
#: `executorch.extension.llm.custom_ops` alone registers none).
_CUSTOM_OPS = "executorch.extension.llm.custom_ops.custom_ops"
