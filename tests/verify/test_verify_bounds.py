"""`--verify` leaves nothing unproven, compares like with like and answers in one line:
outputs are verified as temporary files and renamed into place only if they compute what
their inputs compute; what the files say (signatures, a missing `.ptd`, the memory a load
needs) is answered before anything loads; a runtime that runs out of memory is one line.

Needs a runtime, as `test_verify_files.py` does; the cases that load a `.ptd` need
ExecuTorch's pybindings.
"""

from __future__ import annotations

import shutil

import pytest

from emitter_filter import cli
from emitter_filter.verify import compare
from tests.verify.test_verify_files import NEEDS, RUNTIME, TAKES_DATA

pytestmark = [pytest.mark.filetools, pytest.mark.skipif(RUNTIME is None, reason=NEEDS)]
needs_pybindings = pytest.mark.skipif(not TAKES_DATA, reason="loads a .ptd: needs pybindings")


@pytest.fixture
def files(built, tmp_path):
    for case in ("plain", "xnnpack", "external", "clean"):
        shutil.copyfile(built[case].pte, tmp_path / f"{case}.pte")
        for ptd in built[case].ptds:
            shutil.copyfile(ptd, tmp_path / f"{case}.ptd")
    return tmp_path


def _main(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def planted(monkeypatch):
    """Every output compared differs from its input's: what a wrong rewrite looks like."""

    def differs(pair, want, got):
        return compare.Difference(pair, 0, "planted difference")

    monkeypatch.setattr(compare, "_compare", differs)


def _commands(files):
    """Each writer with --verify, and the outputs it would write."""
    out = files / "out"
    out.mkdir()
    yield (
        ["prune", files / "plain.pte", "-o", out / "p.pte", "--verify"],
        [out / "p.pte"],
    )
    yield (
        ["prune", files / "xnnpack.pte", "-o", out / "d.pte", "--dedupe", "--verify"],
        [out / "d.pte"],
    )
    yield (
        ["merge", files / "plain.pte", files / "xnnpack.pte", "-o", out / "m.pte"]
        + ["--method=p=plain.pte:forward", "--method=x=xnnpack.pte:forward", "--verify"],
        [out / "m.pte"],
    )
    yield (
        ["split", files / "plain.pte", "--method", "forward", "-o", out / "s.pte", "--verify"],
        [out / "s.pte"],
    )
    if TAKES_DATA:
        yield (
            ["prune", files / "external.pte", "--data", files / "external.ptd"]
            + ["--ptd-out", out, "-o", out / "e.pte", "--verify"],
            [out / "e.pte", out / "external.ptd"],
        )
        yield (
            ["merge", files / "plain.pte", files / "external.pte", "-o", out / "me.pte"]
            + ["--method=p=plain.pte:forward", "--method=e=external.pte:forward"]
            + [f"--data=external.pte={files / 'external.ptd'}", "--ptd-out", out / "me.ptd"]
            + ["--verify"],
            [out / "me.pte", out / "me.ptd"],
        )
        yield (
            ["share", files / "plain.pte", files / "xnnpack.pte", "--out", out / "shared"]
            + ["--min-bytes", "0", "--verify"],
            [out / "shared" / "plain.pte", out / "shared" / "xnnpack.pte"],
        )


def test_a_difference_leaves_nothing_written(files, capsys, planted):
    for argv, outputs in _commands(files):
        code, out, err = _main(capsys, *argv)
        assert code == cli.EXIT_VERIFY_FAILED, (argv, err)
        assert err.count("\n") == 1 and "planted difference" in err, err
        assert "nothing was written" in err, err
        left = [o for o in outputs if o.exists()]
        assert left == [], (argv, left)
        # No temporary file either.
        assert sorted(p.name for p in (files / "out").rglob("*") if p.is_file()) == []


def _edited(source, target, old: bytes, new: bytes) -> None:
    data = source.read_bytes()
    assert data.count(old) == 1, old
    target.write_bytes(data.replace(old, new))


def test_an_input_that_does_not_run_is_refused_before_anything_is_written(files, capsys):
    """An input method the runtime cannot load (an operator its build lacks): exit 2, in
    one line, and nothing at -o."""
    _edited(files / "plain.pte", files / "missing.pte", b"aten::addmm", b"aten::addmx")
    code, _, err = _main(capsys, "prune", files / "missing.pte", "-o", files / "o.pte", "--verify")
    assert code == 2 and err.count("\n") == 1, err
    assert "missing.pte method 'forward' does not run in" in err, err
    assert not (files / "o.pte").exists()


def _huge_arena(files, size: int = 1 << 50):
    """plain.pte, its planned arena (non_const_buffer_sizes [0, 112]) `size` bytes."""
    import struct

    _edited(
        files / "plain.pte",
        files / "huge.pte",
        struct.pack("<Iqq", 2, 0, 112)[4:],
        struct.pack("<qq", 0, size),
    )
    return files / "huge.pte"


def test_a_program_past_the_memory_there_is_is_refused_before_it_loads(files, capsys):
    huge = _huge_arena(files)
    code, _, err = _main(capsys, "prune", huge, "-o", files / "o.pte", "--verify")
    assert code == 2 and err.count("\n") == 1, err
    assert "huge.pte needs 1,073,741,824.0 MiB to load" in err and "planned arenas" in err, err
    assert not (files / "o.pte").exists()


def test_an_arena_the_runtime_cannot_allocate_is_one_line(files, capsys):
    """Past the check (--max-memory above it), the runtime's own failure to allocate
    (std::bad_alloc, or an allocator that returns nothing) is one line, exit 2."""
    huge = _huge_arena(files)
    code, _, err = _main(capsys, "verify", huge, huge, "--max-memory", "100000T")
    assert code == 2 and err.count("\n") == 1, err
    assert "huge.pte" in err and "Traceback" not in err, err


def test_a_program_past_max_memory_is_refused_before_it_loads(files, capsys):
    code, _, err = _main(
        capsys,
        "prune",
        files / "plain.pte",
        "-o",
        files / "o.pte",
        "--verify",
        "--max-memory",
        "1K",
    )
    assert code == 2 and err.count("\n") == 1, err
    assert "plain.pte needs" in err and "more than the 1,024 B verify may use" in err, err
    assert not (files / "o.pte").exists()


def test_max_memory_takes_sizes_and_refuses_what_is_not_one(files, capsys):
    from emitter_filter.verify.plan import parse_size

    assert [parse_size(s) for s in ("1000", "4K", "512MiB", "1.5G", "2gb")] == [
        1000,
        4096,
        512 << 20,
        3 << 29,
        2 << 30,
    ]
    code, _, err = _main(
        capsys, "verify", files / "plain.pte", files / "plain.pte", "--max-memory", "lots"
    )
    assert code == 2 and "expected a size" in err, err


def test_methods_whose_outputs_differ_in_sizes_are_exit_1_before_anything_runs(
    files, capsys, monkeypatch
):
    """Same inputs, other outputs: told from the files, with no runtime loaded."""
    from emitter_filter.verify import plan, runtimes

    wider = plan.read_plan(str(files / "clean.pte"))
    method = wider.methods["forward"]
    changed = {
        "forward": plan.MethodPlan(
            "forward", method.inputs, (runtimes.InputSpec("FLOAT", (2, 5)),), method.arena_bytes
        )
    }
    real = plan.read_plan

    def read_plan(pte, data=()):
        found = real(pte, data)
        return (
            plan.ProgramPlan(pte, found.data, changed, found.file_bytes, ())
            if "new" in pte
            else found
        )

    monkeypatch.setattr(compare, "read_plan", read_plan)
    monkeypatch.setattr(compare, "find_runtime", lambda *a: pytest.fail("a runtime was loaded"))
    shutil.copyfile(files / "clean.pte", files / "new.pte")
    code, _, err = _main(capsys, "verify", files / "clean.pte", files / "new.pte")
    assert code == cli.EXIT_VERIFY_FAILED and err.count("\n") == 1, err
    assert "method 'forward'" in err and "outputs (FLOAT [2, 5]), the old method's" in err, err


@needs_pybindings
def test_merge_of_one_program_twice_verifies_each_with_its_own_ptd(files, capsys):
    """external.pte given twice, each with its own .ptd (c.ptd: other weights): each method
    of the merge is verified against its input with that input's .ptd, not one for both."""
    from emitter_filter.ondisk.read.read_ptd import read_ptd

    weight = read_ptd(files / "external.ptd").named_data["lin.weight"]
    data = bytearray((files / "external.ptd").read_bytes())
    data[weight.offset + 3] ^= 0x40
    (files / "c.ptd").write_bytes(bytes(data))
    code, out, err = _main(
        capsys,
        "merge",
        files / "external.pte",
        files / "external.pte",
        f"--data=#1={files / 'external.ptd'}",
        f"--data=#2={files / 'c.ptd'}",
        "--inline",
        "-o",
        files / "m.pte",
        "--method=a=#1:forward",
        "--method=b=#2:forward",
        "--verify",
    )
    assert code == 0 and "verified in" in out and "2 methods" in out, err
    # And verify's own #N= pairs OLD (#1) and NEW (#2) with their own .ptd.
    code, _, err = _main(
        capsys,
        "verify",
        files / "external.pte",
        files / "external.pte",
        f"--data=#1={files / 'external.ptd'}",
        f"--data=#2={files / 'c.ptd'}",
    )
    assert code == cli.EXIT_VERIFY_FAILED and "elements differ" in err, err


def test_a_constant_method_returning_a_scalar_is_compared(monkeypatch):
    """executorch-numpy-runtime returns a constant method's value (get_max_seq_len) as a
    Python int, not an array."""
    import numpy as np

    from emitter_filter.verify.runtimes import _NumpyRuntime

    class Method:
        def __call__(self, arrays):
            return [128]

    class Program:
        def load_method(self, name):
            return Method()

    class Runtime:
        @staticmethod
        def get():
            return Runtime()

        def load_program(self, pte):
            return Program()

    class Module:
        ExecuTorchError = RuntimeError

    Module.Runtime = Runtime  # type: ignore[attr-defined]
    runtime = _NumpyRuntime(Module)
    want, got = runtime.run_methods(
        "a.pte", None, [("get_max_seq_len", []), ("get_max_seq_len", [])]
    )
    assert isinstance(want[0], np.ndarray) and int(want[0]) == 128
    pair = compare.MethodPair(
        compare.Program("b.pte"), "get_max_seq_len", compare.Program("a.pte"), "get_max_seq_len"
    )
    assert compare._compare(pair, want, got) is None
