"""The runtime in a child process: what a program does to the runtime (a SIGSEGV, a
SIGABRT, a `std::bad_alloc`, a loop that never ends) ends the child, not the command,
and reaches the user as one line.

One child per process (`shared_child`): it imports the runtime once (the seconds ExecuTorch's
pybindings take, which the command no longer spends itself) and answers every
`run_methods` of the check before writing and of the verification after; a child that
died is started again for the next call. The parent sends each call and waits for its
answer at most `timeout` seconds, then kills the child. Run as
`python -m emitter_filter.verify.child READ_FD WRITE_FD`.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from multiprocessing.connection import Connection

from emitter_filter.errors import VerifyError
from emitter_filter.verify.runtimes import _LOGGED, NO_RUNTIME, RuntimeFailure, _Runtime

__all__ = ["DEFAULT_TIMEOUT", "ChildRuntime", "runtime_importable", "shared_child"]

#: Seconds a load and run of one program's methods may take before the child is killed.
DEFAULT_TIMEOUT = 600.0


def runtime_importable() -> bool:
    """Whether either runtime's module is there to import (found, not imported)."""
    for name in ("executorch.extension.pybindings.portable_lib", "executorch_numpy_runtime"):
        try:
            if importlib.util.find_spec(name) is not None:
                return True
        except (ImportError, ValueError):
            continue
    return False


class ChildRuntime(_Runtime):
    """A `_Runtime` whose `run_methods` runs in a child process (`find_runtime`'s)."""

    def __init__(self, announce=None, timeout: float = DEFAULT_TIMEOUT) -> None:
        if not runtime_importable():
            raise VerifyError(NO_RUNTIME)
        self.timeout = timeout
        self._announce = announce
        self._process: subprocess.Popen | None = None
        self._connection: _Pipes | None = None
        self._log = tempfile.TemporaryFile()
        self._start()

    def _start(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        if self._announce is not None:
            self._announce("loading ExecuTorch's runtime (its import takes seconds) ...")
            self._announce = None
        child_reads, parent_writes = os.pipe()
        parent_reads, child_writes = os.pipe()
        package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package, env.get("PYTHONPATH", "")) if p)
        try:
            self._process = subprocess.Popen(
                [*self._command(), str(child_reads), str(child_writes)],
                pass_fds=(child_reads, child_writes),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=self._log,
                env=env,
            )
        finally:
            os.close(child_reads)
            os.close(child_writes)
        self._connection = _Pipes(parent_reads, parent_writes)
        kind, answer = self._receive("importing the runtime")
        if kind == "error":
            raise VerifyError(answer)
        self.name, self.limits, self.takes_data, self.returns = answer

    def _command(self) -> list[str]:
        """The child's command, to which the two pipes' descriptors are added."""
        return [sys.executable, "-m", "emitter_filter.verify.child"]

    def run_methods(self, pte, data, calls) -> list:
        if self._process is None or self._process.poll() is not None:
            self._start()
        assert self._connection is not None
        self._connection.send(("run_methods", pte, data, list(calls)))
        kind, answer = self._receive(f"running {pte}")
        if kind == "error":
            raise VerifyError(answer)
        if kind == "refused":
            raise RuntimeFailure(answer)
        return answer

    def check_data(self, pte: str, data: str | None) -> None:
        if data is not None and not self.takes_data:
            from emitter_filter.verify.runtimes import NO_DATA

            raise VerifyError(f"{pte} loads with {data}: {self.name} {NO_DATA}")

    def _receive(self, doing: str):
        """The child's answer; a child that died or hung as a `RuntimeFailure`."""
        assert self._connection is not None and self._process is not None
        answered = False
        try:
            if self._connection.poll(self.timeout):
                answered = True
                return self._connection.recv()
        except (EOFError, OSError):
            pass
        if answered:  # The pipe closed: the child is ending, if not ended yet.
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()
            self._process = None
            raise RuntimeFailure(
                f"the runtime did not answer in {self.timeout:g} s {doing}: stopped"
            )
        code = self._process.returncode
        self._process = None
        raise RuntimeFailure(f"the runtime {_death(code)} {doing}{self._last_logged()}")

    def _last_logged(self) -> str:
        self._log.seek(0)
        lines = self._log.read().decode("utf-8", "replace").splitlines()
        self._log.seek(0)
        self._log.truncate()
        logged = [m["text"].strip() for line in lines for m in [_LOGGED.search(line)] if m]
        return f" ({logged[-1]})" if logged else ""

    def close(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._process = None
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        self._log.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown: nothing to do
            pass


_SHARED: list[ChildRuntime] = []


def shared_child(announce=None) -> ChildRuntime:
    """The process's `ChildRuntime`, started on first use and kept for the next
    verification (a program that calls `cli.main` again, a test suite): the runtime's
    import is paid once per process, as it would be in it. Each call still loads its
    program afresh; a child that died is started again.

    Raises:
        VerifyError: Neither runtime is there to import.
    """
    if not runtime_importable():
        raise VerifyError(NO_RUNTIME)
    if not _SHARED:
        _SHARED.append(ChildRuntime(announce))
    return _SHARED[0]


def _death(code: int) -> str:
    if code < 0:
        try:
            return f"crashed ({signal.Signals(-code).name})"
        except ValueError:
            return f"crashed (signal {-code})"
    return f"exited with {code}"


class _Pipes:
    """Two one-way pipes as one connection (send on one, receive on the other)."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self._read = Connection(read_fd, writable=False)
        self._write = Connection(write_fd, readable=False)

    def send(self, message) -> None:
        self._write.send(message)

    def poll(self, timeout: float) -> bool:
        return self._read.poll(timeout)

    def recv(self):
        return self._read.recv()

    def close(self) -> None:
        self._read.close()
        self._write.close()


def _serve(read_fd: int, write_fd: int) -> None:
    from emitter_filter.verify.runtimes import find_runtime

    connection = _Pipes(read_fd, write_fd)
    try:
        runtime = find_runtime()
    except VerifyError as error:
        connection.send(("error", str(error)))
        return
    connection.send(("ok", (runtime.name, runtime.limits, runtime.takes_data, runtime.returns)))
    while True:
        try:
            message = connection.recv()
        except EOFError:
            return
        _, pte, data, calls = message
        answer: tuple[str, object]
        try:
            answer = ("ok", runtime.run_methods(pte, data, _calls(calls)))
        except RuntimeFailure as failure:
            answer = ("refused", str(failure))
        except VerifyError as error:
            answer = ("error", str(error))
        connection.send(answer)


def _calls(calls: Sequence) -> list:
    return [(method, inputs) for method, inputs in calls]


if __name__ == "__main__":
    _serve(int(sys.argv[1]), int(sys.argv[2]))
