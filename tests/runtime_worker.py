"""ExecuTorch's runtime in a long-lived child process: does this file load, and if not, why.

`RuntimeWorker().load_all([(pte, data_files), ...])` answers, for each file,
`Loaded` (the program and every one of its methods loaded) or `Refused` with the
runtime's reason. A malformed file may crash the runtime (a segfault, an abort,
a runaway allocation or loop): that is a refusal too, and the worker goes on.

Importing the runtime (`portable_lib`, which imports torch) takes seconds, so a
process per file would be far too slow, and so would restarting the worker after
each crash. The worker process is therefore a fork server: it imports the runtime
once, then forks a child that loads files until it crashes; the server reports
the crash and forks a fresh child, already warm. Load messages come from the
runtime's own log (`ET_LOG` on stderr), which the child captures per file.

Files load with `Verification.InternalConsistency` (the flatbuffer verifier too),
as `executorch.runtime.Runtime.load_program` and `_load_for_executorch` do by
default; the pybindings take at most one data file (`.ptd`).

    python -m tests.runtime_worker FILE.pte [DATA.ptd]    (one file, by hand)
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

#: Seconds one file may take to load before it counts as a hang (and the child is killed).
LOAD_TIMEOUT = 30
#: Seconds the server may take to import the runtime.
START_TIMEOUT = 300
#: Bytes of address space a child may add to what the server maps: a file asking the
#: runtime for more fails to load instead of taking the machine's memory.
EXTRA_ADDRESS_SPACE = 4 << 30

_ROOT = Path(__file__).resolve().parent.parent
#: An `ET_LOG` line: `[program.cpp:123] message` (this build), or with a level and time before.
_LOG_LINE = re.compile(r"(?:executorch:|\[)([\w.]+\.(?:cpp|h)):(\d+)\] (.*)$")


@dataclasses.dataclass(frozen=True)
class Loaded:
    methods: tuple[str, ...]
    #: With `run`: each method's outputs ([dtype, shape, hex] each), None where its inputs
    #: are not seeded; compared bit for bit.
    outputs: dict | None = dataclasses.field(default=None, compare=False)

    def __str__(self) -> str:
        return "loaded"


@dataclasses.dataclass(frozen=True)
class Refused:
    """The runtime refused the file: `reason` is its first error log line, or the crash."""

    reason: str
    log: tuple[str, ...] = ()
    crashed: bool = False

    def __str__(self) -> str:
        return f"refused: {self.reason}"


def _available() -> bool:
    import importlib.util

    return (
        importlib.util.find_spec("executorch") is not None
        and importlib.util.find_spec("executorch.extension.pybindings.portable_lib") is not None
    )


class RuntimeWorker:
    """The fork server and its current child; `close()` (or a `with` block) ends both."""

    def __init__(self, timeout: float = LOAD_TIMEOUT) -> None:
        self.timeout = timeout
        self.crashes = 0
        self._pending = b""
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.runtime_worker", "--serve"],
            cwd=_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        hello = self._read(START_TIMEOUT)
        if hello is None or "operators" not in hello:
            self.close()
            raise RuntimeError(f"the runtime worker did not start: {hello}")
        #: What this runtime build registers: a file needing anything else is refused
        #: for the build's sake, not the file's.
        self.operators = frozenset(hello["operators"])
        self.backends = frozenset(hello["backends"])
        self._child = self._read(START_TIMEOUT)["child"]

    def __enter__(self) -> RuntimeWorker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.stdin.close()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def load(self, pte: str | os.PathLike, data_files: Sequence[str | os.PathLike] = ()):
        return self.load_all([(pte, data_files)])[0]

    def load_all(
        self,
        files: Sequence[tuple[str | os.PathLike, Sequence[str | os.PathLike]]],
        run: bool = False,
    ):
        """`Loaded` or `Refused` for each `(pte, data_files)`, in order; one round trip per
        batch, and one more after each crash. With `run`, each method is run too, on inputs
        seeded from its metadata (`Loaded.outputs`); an error running it is a refusal."""
        requests = [
            [os.fspath(p), [os.fspath(d) for d in data], *(["run"] if run else [])]
            for p, data in files
        ]
        results: list[Loaded | Refused] = []
        while len(results) < len(requests):
            batch = requests[len(results) :]
            self._send({"batch": batch})
            while True:
                message = self._read(self.timeout)
                if message is None:  # the child hangs on the file: kill it, the server says so
                    os.kill(self._child, signal.SIGKILL)
                    message = self._read(START_TIMEOUT)
                    if message is None or "crash" not in message:
                        raise RuntimeError(f"the runtime worker stopped answering: {message}")
                    message["crash"] = f"no answer in {self.timeout:g} s"
                if "crash" in message:
                    self.crashes += 1
                    results.append(
                        Refused(
                            f"the runtime crashed: {message['crash']}",
                            tuple(message.get("log", ())),
                            crashed=True,
                        )
                    )
                    self._child = self._read(START_TIMEOUT)["child"]
                    break
                if "done" in message:
                    break
                if message.get("loaded"):
                    results.append(Loaded(tuple(message["methods"]), message.get("outputs")))
                else:
                    results.append(Refused(message["reason"], tuple(message["log"])))
        return results

    def _send(self, message: dict) -> None:
        self._process.stdin.write(json.dumps(message).encode() + b"\n")
        self._process.stdin.flush()

    def _read(self, timeout: float) -> dict | None:
        """The next message, or None after `timeout` seconds without one."""
        deadline = time.monotonic() + timeout
        fd = self._process.stdout.fileno()
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise RuntimeError(f"the runtime worker ended (exit {self._process.wait()})")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return json.loads(line)


# The server and its children.


#: The answers' pipe: the worker's stdout as it started. Its fd 1 is the log, so that
#: whatever the runtime or torch prints cannot garble an answer.
_answers = None


def _write(message: dict) -> None:
    _answers.write(json.dumps(message) + "\n")
    _answers.flush()


def _log_lines(log_fd: int) -> list[str]:
    os.lseek(log_fd, 0, os.SEEK_SET)
    text = b""
    while chunk := os.read(log_fd, 1 << 16):
        text += chunk
    return text.decode("utf-8", "replace").splitlines()


def _errors(lines: list[str]) -> list[str]:
    """The runtime's log lines, as `file.cpp:line: message`."""
    found = []
    for line in lines:
        match = _LOG_LINE.search(line)
        if match:
            found.append(f"{match[1]}:{match[2]}: {match[3]}")
    return found


def _load(runtime, pte: str, data_files: list[str]) -> dict:
    if len(data_files) > 1:
        return {"loaded": False, "reason": "the pybindings take one data file", "log": []}
    data = Path(pte).read_bytes()  # held until the methods are gone (the runtime keeps no copy)
    program = runtime._load_program_from_buffer(
        data,
        program_verification=runtime.Verification.InternalConsistency,
        data_path=data_files[0] if data_files else None,
    )
    methods = [program.get_method_name(i) for i in range(program.num_methods())]
    loaded = [program.load_method(name) for name in methods]
    del loaded, program
    return {"loaded": True, "methods": methods}


def _tensor_inputs(torch, meta, method: str) -> tuple | None:
    """Seeded inputs for each of a method's inputs from its metadata (the same for the same
    metadata), or None where one is not a tensor."""
    generator = torch.Generator().manual_seed(0)
    values = []
    for index in range(meta.num_inputs()):
        try:
            tensor = meta.input_tensor_meta(index)
        except IndexError:
            return None
        dtype = _TORCH_DTYPES.get(int(tensor.dtype()))
        if dtype is None:
            return None
        sizes = tuple(tensor.sizes())
        if dtype.is_floating_point:
            values.append(torch.randn(sizes, generator=generator).to(dtype))
        elif dtype == torch.bool:
            values.append(torch.randint(0, 2, sizes, generator=generator).bool())
        else:
            values.append(torch.randint(0, 4, sizes, generator=generator).to(dtype))
    return tuple(values)


#: torch's dtype of each `ScalarType` an input is seeded in.
_TORCH_DTYPES: dict = {}


def _encoded(torch, value) -> list:
    """An output as [kind, shape, hex of its bytes]: compared bit for bit."""
    if isinstance(value, torch.Tensor):
        value = value.detach().contiguous()
        raw = value.view(torch.uint8) if value.element_size() == 1 else value
        data = raw.flatten().view(torch.uint8).numpy().tobytes() if value.numel() else b""
        return [str(value.dtype), list(value.shape), data.hex()]
    return [type(value).__name__, [], repr(value)]


def _run(runtime, pte: str, data_files: list[str]) -> dict:
    """Loads the file, then runs each method (a program loaded for it alone) on inputs seeded
    from its metadata; the outputs by method (None: an input that is not seeded)."""
    import torch

    if len(data_files) > 1:
        return {"loaded": False, "reason": "the pybindings take one data file", "log": []}
    answer = _load(runtime, pte, data_files)
    data = Path(pte).read_bytes()  # held until the module is gone
    ptd = Path(data_files[0]).read_bytes() if data_files else None
    outputs: dict = {}
    for method in answer["methods"]:
        module = runtime._load_for_executorch_from_buffer(data, ptd)
        inputs = _tensor_inputs(torch, module.method_meta(method), method)
        if inputs is not None:
            outputs[method] = [_encoded(torch, v) for v in module.run_method(method, inputs)]
        else:
            outputs[method] = None
        del module
    answer["outputs"] = outputs
    return answer


def _child(runtime, log_fd: int) -> None:
    """Loads the files of each batch until stdin ends; a crash ends the process."""
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    for line in sys.stdin:
        for pte, data_files, *run in json.loads(line)["batch"]:
            os.ftruncate(log_fd, 0)
            os.lseek(log_fd, 0, os.SEEK_SET)
            try:
                answer = (_run if run else _load)(runtime, pte, data_files)
            except Exception as error:  # noqa: BLE001 - every refusal is an answer
                log = _log_lines(log_fd)
                errors = _errors(log)
                reason = errors[0] if errors else f"{type(error).__name__}: {error}"
                answer = {"loaded": False, "reason": reason, "log": errors + [str(error)]}
            _write(answer)
        _write({"done": True})
    os._exit(0)


def _limit_memory() -> None:
    import resource

    with open("/proc/self/statm") as statm:
        mapped = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    limit = mapped + EXTRA_ADDRESS_SPACE
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def serve() -> None:
    """Imports the runtime, says what it registers, then forks children until stdin ends."""
    import warnings

    global _answers
    warnings.simplefilter("ignore")
    _answers = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # torch's and the runtime's start-up chatter
    os.dup2(devnull, 2)
    import torch
    from executorch.extension.pybindings import portable_lib as runtime

    try:  # The quantized kernels XNNPACK's and the quantizer's programs call.
        import executorch.kernels.quantized  # noqa: F401
    except ImportError:
        pass
    from emitter_filter.program.scalar_types import SCALAR_TYPE_NAMES

    by_name = {
        "FLOAT": torch.float32,
        "DOUBLE": torch.float64,
        "HALF": torch.float16,
        "BFLOAT16": torch.bfloat16,
        "LONG": torch.int64,
        "INT": torch.int32,
        "SHORT": torch.int16,
        "CHAR": torch.int8,
        "BYTE": torch.uint8,
        "BOOL": torch.bool,
    }
    _TORCH_DTYPES.update(
        {number: by_name[name] for number, name in SCALAR_TYPE_NAMES.items() if name in by_name}
    )

    _write(
        {
            "operators": sorted(runtime._get_operator_names()),
            "backends": sorted(runtime._get_registered_backend_names()),
        }
    )
    log_fd, log_path = tempfile.mkstemp(prefix="ef-runtime-log-")
    os.unlink(log_path)
    while True:
        pid = os.fork()
        if pid == 0:
            try:
                _limit_memory()
                _child(runtime, log_fd)
            finally:
                os._exit(70)
        _write({"child": pid})
        _, status = os.waitpid(pid, 0)
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            return
        if os.WIFSIGNALED(status):
            how = signal.Signals(os.WTERMSIG(status)).name
        else:
            how = f"exit {os.WEXITSTATUS(status)}"
        _write({"crash": how, "log": _errors(_log_lines(log_fd))})


def main(argv: Sequence[str]) -> int:
    if argv[:1] == ["--serve"]:
        serve()
        return 0
    started = time.perf_counter()
    with RuntimeWorker() as worker:
        outcome = worker.load(argv[0], argv[1:])
    print(outcome, f"({time.perf_counter() - started:.1f} s)")
    for line in getattr(outcome, "log", ()):
        print("  ", line)
    return 0 if isinstance(outcome, Loaded) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
