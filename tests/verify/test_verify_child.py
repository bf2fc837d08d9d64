"""The runtime in a child process (`verify.child`): a runtime that crashes or hangs is a
`RuntimeFailure` in one line, the child started again for the next call; and what the
runtime's import registers and says (`runtimes.find_runtime`)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from emitter_filter.errors import VerifyError
from emitter_filter.verify import child
from emitter_filter.verify.runtimes import InputSpec, RuntimeFailure, _NumpyRuntime

pytestmark = pytest.mark.filetools
needs_runtime = pytest.mark.skipif(
    not child.runtime_importable(), reason="needs a runtime's module to be found"
)

# A child that answers the handshake as a runtime, then does WHAT on its first call.
_FAKE = """
import os, signal, sys, time
from multiprocessing.connection import Connection
read = Connection(int(sys.argv[-2]), writable=False)
write = Connection(int(sys.argv[-1]), readable=False)
write.send(("ok", ("a fake runtime", "", True, None)))
read.recv()
{what}
"""


class _Fake(child.ChildRuntime):
    what = ""

    def _command(self) -> list[str]:
        return [sys.executable, "-c", textwrap.dedent(_FAKE.format(what=self.what))]


@needs_runtime
@pytest.mark.parametrize(
    "what, said",
    [
        ("os.kill(os.getpid(), signal.SIGSEGV)", "the runtime crashed (SIGSEGV) running a.pte"),
        ("os.abort()", "the runtime crashed (SIGABRT) running a.pte"),
        ("sys.exit(3)", "the runtime exited with 3 running a.pte"),
        ("time.sleep(60)", "the runtime did not answer in 1 s running a.pte: stopped"),
    ],
    ids=["sigsegv", "sigabrt", "exit", "hang"],
)
def test_a_runtime_that_dies_or_hangs_is_a_refusal_in_one_line(what, said):
    fake = type("Fake", (_Fake,), {"what": what})(timeout=1)
    try:
        with pytest.raises(RuntimeFailure) as refused:
            fake.run_methods("a.pte", None, [("forward", [])])
        assert str(refused.value) == said
        assert fake._process is None  # Stopped; the next call starts another child.
    finally:
        fake.close()


def test_without_either_runtime_the_child_is_not_started(monkeypatch):
    for name in ("executorch.extension.pybindings.portable_lib", "executorch_numpy_runtime"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(VerifyError, match="no runtime to verify in"):
        child.ChildRuntime()


def test_a_training_programs_string_outputs_are_refused_in_one_line_by_the_numpy_runtime():
    """executorch-numpy-runtime returns tensors, ints, floats and bools: a training
    program's `__et_training_fqn_*` methods return strings. Said from the file's
    metadata, before it runs."""

    class Module:
        ExecuTorchError = RuntimeError

    runtime = _NumpyRuntime(Module)
    runtime.check_outputs(
        "xor.pte", "forward", [InputSpec("FLOAT", (1,)), InputSpec(None, (), "Int")]
    )
    with pytest.raises(VerifyError) as refused:
        runtime.check_outputs(
            "xor.pte", "__et_training_fqn_forward", [InputSpec(None, (), "String")]
        )
    line = str(refused.value)
    assert "\n" not in line
    assert line.startswith(
        "xor.pte method '__et_training_fqn_forward' returns a String, which "
        "executorch-numpy-runtime cannot return"
    )


@pytest.mark.slow
def test_the_pybindings_import_says_so_and_registers_the_llm_custom_ops():
    """export_llama's programs call llama::custom_sdpa.out and llama::update_cache.out,
    registered by importing executorch.extension.llm.custom_ops.custom_ops; and the
    seconds the import takes are announced first (on a terminal, by the CLI)."""
    pytest.importorskip("executorch.extension.pybindings.portable_lib")
    script = textwrap.dedent(
        """
        import sys
        from emitter_filter.verify.runtimes import find_runtime
        said = []
        find_runtime(said.append)
        import executorch.extension.pybindings.portable_lib as lib
        names = set(lib._get_operator_names())
        print(said)
        print("llama::custom_sdpa.out" in names, "llama::update_cache.out" in names)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    said, registered = result.stdout.splitlines()[-2:]
    assert "loading ExecuTorch's runtime" in said
    assert registered == "True True"


@pytest.mark.slow
@needs_runtime
def test_verify_on_a_terminal_says_it_loads_the_runtime_before_the_seconds_it_takes(
    built, tmp_path, capsys, monkeypatch
):
    """Not seconds of silence, then "in 0.01 s": a line first, and the time reported is
    the whole verification's, the runtime's import included."""
    from emitter_filter import cli

    monkeypatch.setattr(child, "_SHARED", [])  # A runtime not imported yet.
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    pte = built["plain"].pte
    try:
        code = cli.main(["verify", str(pte), str(pte), "--json"])
        out, err = capsys.readouterr()
    finally:
        for started in child._SHARED:
            started.close()
    import json

    assert code == 0, err
    assert err.startswith("emitter-filter: loading ExecuTorch's runtime"), err
    assert json.loads(out)["ok"]
