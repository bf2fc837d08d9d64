"""`--verify` and `emitter-filter verify` on the small programs of `tests.files`: every
output of prune, merge, split and share computes bit for bit what its input computes, and
a program with one weight byte flipped fails, naming its method.

Needs a runtime: ExecuTorch's pybindings (the full install), or executorch-numpy-runtime
(Python >= 3.12, no torch: CI's numpy-runtime venv, on the golden files); skipped without
either. The numpy runtime loads no .ptd: the cases with one then check its one-line refusal.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from emitter_filter import cli
from emitter_filter.errors import VerifyError
from emitter_filter.verify.runtimes import NO_RUNTIME, find_runtime


def _runtime_name() -> str | None:
    try:
        return find_runtime().name
    except VerifyError:
        return None


RUNTIME = _runtime_name()
TAKES_DATA = RUNTIME == "ExecuTorch's pybindings"
NEEDS = "needs ExecuTorch's pybindings or executorch-numpy-runtime (Python >= 3.12, no torch)"
pytestmark = [pytest.mark.filetools, pytest.mark.skipif(RUNTIME is None, reason=NEEDS)]


@pytest.fixture
def files(built, tmp_path):
    """Each case's program (and `.ptd`) under a name of its own: plain.pte, external.ptd..."""
    found = {}
    for case in ("plain", "xnnpack", "mutated", "external", "clean"):
        found[case] = tmp_path / f"{case}.pte"
        shutil.copyfile(built[case].pte, found[case])
        for ptd in built[case].ptds:
            shutil.copyfile(ptd, tmp_path / f"{case}.ptd")
    return tmp_path


def _main(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _verified(code, out, err, methods: int) -> None:
    assert (code, err) == (0, ""), err
    assert f"verified in {RUNTIME}: {methods} method" in out, out


@pytest.mark.parametrize("case", ["plain", "xnnpack", "mutated", "clean"])
def test_prune_verify_passes(case, files, capsys):
    result = _main(capsys, "prune", files / f"{case}.pte", "-o", files / "out.pte", "--verify")
    _verified(*result, methods=1)


def test_prune_dedupe_verify_passes(files, capsys):
    result = _main(
        capsys, "prune", files / "xnnpack.pte", "-o", files / "out.pte", "--dedupe", "--verify"
    )
    _verified(*result, methods=1)


def test_prune_verify_with_a_ptd(files, capsys):
    argv = [
        "prune",
        files / "external.pte",
        "--data",
        files / "external.ptd",
        "--ptd-out",
        files / "pruned",
        "-o",
        files / "out.pte",
        "--verify",
    ]
    code, out, err = _main(capsys, *argv)
    if TAKES_DATA:
        _verified(code, out, err, methods=1)
    else:
        # Refused before anything is written, in one line saying what the runtime lacks.
        assert code == 2 and err.count("\n") == 1, err
        assert "executorch-numpy-runtime loads no .ptd" in err
        assert not (files / "out.pte").exists()


def _merge(files, capsys, *extra):
    names = ("plain", "xnnpack", "mutated")
    renames = [f"--method={n}={n}.pte:forward" for n in names]
    return _main(
        capsys,
        "merge",
        *(files / f"{n}.pte" for n in names),
        "-o",
        files / "merged.pte",
        *renames,
        *extra,
    )


def test_merge_verify_passes_with_renamed_methods(files, capsys):
    _verified(*_merge(files, capsys, "--verify"), methods=3)


def test_split_verify_passes_on_each_method_of_a_merge(files, capsys):
    assert _merge(files, capsys)[0] == 0
    for method in ("plain", "xnnpack", "mutated"):
        result = _main(
            capsys,
            "split",
            files / "merged.pte",
            "--method",
            method,
            "-o",
            files / f"{method}.split.pte",
            "--verify",
        )
        _verified(*result, methods=1)


@pytest.mark.parametrize("mode", ["--inline", "--ptd-out"])
def test_merge_verify_with_a_ptd(mode, files, capsys):
    where = ["--inline"] if mode == "--inline" else ["--ptd-out", files / "merged.ptd"]
    code, out, err = _main(
        capsys,
        "merge",
        files / "plain.pte",
        files / "external.pte",
        "-o",
        files / "merged.pte",
        "--method=p=plain.pte:forward",
        "--method=e=external.pte:forward",
        f"--data=external.pte={files / 'external.ptd'}",
        *where,
        "--verify",
    )
    if TAKES_DATA:
        _verified(code, out, err, methods=2)
    else:
        assert code == 2 and "loads no .ptd" in err and not (files / "merged.pte").exists()


@pytest.mark.parametrize(
    "other", ["xnnpack", "external"], ids=["two_programs", "with_a_ptd_of_one_program"]
)
def test_share_verify_passes(other, files, capsys):
    code, out, err = _main(
        capsys,
        "share",
        files / "plain.pte",
        files / f"{other}.pte",
        "--out",
        files / "shared",
        "--min-bytes",
        "0",
        "--verify",
    )
    if TAKES_DATA:
        _verified(code, out, err, methods=2)
    else:
        # Each output loads with the shared .ptd: refused before anything is written.
        assert code == 2 and err.count("\n") == 1 and "loads no .ptd" in err, err
        assert not (files / "shared").exists()


def _flip_a_weight_byte(pte, out) -> None:
    """`pte` with one byte of its largest constant flipped: lin.weight, read by `forward`."""
    from emitter_filter.ondisk.read.read_pte import read_pte
    from emitter_filter.program.reachability import DataSpace

    entries = [e for i, e in read_pte(pte).entries[DataSpace.CONSTANT].items() if i]
    largest = max(entries, key=lambda e: e.nbytes)
    data = bytearray(pte.read_bytes())
    data[largest.offset + 3] ^= 0x40  # a float32's exponent: a difference no rounding hides
    out.write_bytes(bytes(data))


def test_verify_passes_on_a_program_and_its_prune(files, capsys):
    assert _main(capsys, "prune", files / "plain.pte", "-o", files / "out.pte")[0] == 0
    _verified(*_main(capsys, "verify", files / "plain.pte", files / "out.pte"), methods=1)


def test_verify_fails_on_a_flipped_weight_byte_naming_the_method_and_output(files, capsys):
    _flip_a_weight_byte(files / "clean.pte", files / "flipped.pte")
    code, out, err = _main(capsys, "verify", files / "clean.pte", files / "flipped.pte")
    assert code == cli.EXIT_VERIFY_FAILED and out == ""
    assert err.count("\n") == 1, err
    assert "method 'forward'" in err and "output 0:" in err and "elements differ" in err, err


def test_verify_json_says_where_it_differs(files, capsys):
    import json

    _flip_a_weight_byte(files / "clean.pte", files / "flipped.pte")
    code, out, _ = _main(capsys, "verify", files / "clean.pte", files / "flipped.pte", "--json")
    document = json.loads(out)
    assert code == 1 and not document["ok"] and document["verified"] == []
    assert (document["difference"]["new_method"], document["difference"]["output"]) == (
        "forward",
        0,
    )


def test_verify_pairs_renamed_methods(files, capsys):
    assert _merge(files, capsys)[0] == 0
    code, out, err = _main(capsys, "verify", files / "plain.pte", files / "merged.pte")
    assert code == 2 and "has no method" in err and "=OLD" in err, err
    assert (
        _main(capsys, "split", files / "merged.pte", "--method", "plain", "-o", files / "p.pte")[0]
        == 0
    )
    result = _main(
        capsys, "verify", files / "plain.pte", files / "p.pte", "--method", "plain=forward"
    )
    _verified(*result, methods=1)


def test_verify_with_a_ptd_beside_each_program(files, capsys):
    # external.pte reads external.ptd, the .ptd beside it with its stem.
    (files / "out").mkdir()
    assert (
        _main(
            capsys,
            "prune",
            files / "external.pte",
            "--data",
            files / "external.ptd",
            "--ptd-out",
            files / "out",
            "-o",
            files / "out" / "external.pte",
        )[0]
        == 0
    )
    code, out, err = _main(capsys, "verify", files / "external.pte", files / "out/external.pte")
    if TAKES_DATA:
        _verified(code, out, err, methods=1)
    else:
        assert code == 2 and err.count("\n") == 1 and "loads no .ptd" in err, err


def test_a_stateful_method_runs_on_a_fresh_load_each_time(files, capsys):
    """The mutated program's buffer adds its input each run. Merged twice, each method with
    its own buffer, both compared with the one input: a load kept from one pair to the next
    would run the input's method a second time, from a state the other method never saw."""
    from emitter_filter.verify.compare import MethodPair, Program, verify_pairs

    shutil.copyfile(files / "mutated.pte", files / "again.pte")
    assert (
        _main(
            capsys,
            "merge",
            files / "mutated.pte",
            files / "again.pte",
            "-o",
            files / "m.pte",
            "--method=a=mutated.pte:forward",
            "--method=b=again.pte:forward",
        )[0]
        == 0
    )
    old, new = Program(str(files / "mutated.pte")), Program(str(files / "m.pte"))
    report = verify_pairs(
        [MethodPair(new, "a", old, "forward"), MethodPair(new, "b", old, "forward")]
    )
    assert report.ok and len(report.verified) == 2, report.summary()


def test_inputs_from_an_npz_file(files, capsys):
    import numpy as np

    np.savez(files / "inputs.npz", **{"forward/0": np.ones((2, 4))})
    _flip_a_weight_byte(files / "clean.pte", files / "flipped.pte")
    code, out, err = _main(
        capsys, "verify", files / "clean.pte", files / "clean.pte", "--inputs", files / "inputs.npz"
    )
    assert code == 0 and "1 on --inputs" in out, err
    code, _, err = _main(
        capsys,
        "verify",
        files / "clean.pte",
        files / "flipped.pte",
        "--inputs",
        files / "inputs.npz",
    )
    assert code == 1 and "method 'forward'" in err


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({"decode/0": [1.0]}, "names method 'decode'"),
        ({"forward": [1.0]}, "name each array METHOD/INDEX"),
        ({"forward/1": [1.0]}, "takes 1 input(s)"),
        ({"forward/0": ["a"]}, "the method takes FLOAT"),
    ],
    ids=["unknown-method", "no-index", "wrong-index", "wrong-dtype"],
)
def test_inputs_that_do_not_fit_are_refused_in_one_line(arrays, message, files, capsys):
    import numpy as np

    np.savez(files / "inputs.npz", **{k: np.array(v) for k, v in arrays.items()})
    code, out, err = _main(
        capsys, "verify", files / "clean.pte", files / "clean.pte", "--inputs", files / "inputs.npz"
    )
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_inputs_without_verify_is_a_usage_error_and_nothing_is_written(files, capsys):
    code, _, err = _main(
        capsys, "prune", files / "plain.pte", "-o", files / "out.pte", "--inputs", files / "x.npz"
    )
    assert code == 2 and "--inputs is for --verify" in err
    assert not (files / "out.pte").exists()


def test_a_program_without_its_ptd_is_exit_2_naming_the_missing_ptd(files, capsys):
    """Not the runtime's "Init failed ... 0x20", read as a failed proof: the .ptd is missing,
    and that is known from the file before anything loads."""
    (files / "external.ptd").rename(files / "elsewhere.ptd")
    code, _, err = _main(capsys, "verify", files / "external.pte", files / "external.pte")
    assert code == 2 and err.count("\n") == 1, err
    assert "external.pte reads external data that no .ptd is given for" in err, err
    assert "its .ptd is missing; give it with --data" in err, err


def test_a_refusal_is_one_line_on_stderr_in_a_fresh_process(files):
    """What torch and its extensions print as they import is not the refusal's."""
    (files / "external.ptd").rename(files / "elsewhere.ptd")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "emitter_filter",
            "verify",
            files / "external.pte",
            files / "external.pte",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr


def test_without_a_runtime_verify_refuses_in_one_line_naming_both_and_writes_nothing(
    files, capsys, monkeypatch
):
    for name in ("executorch.extension.pybindings.portable_lib", "executorch_numpy_runtime"):
        monkeypatch.setitem(sys.modules, name, None)
    code, out, err = _main(
        capsys, "prune", files / "plain.pte", "-o", files / "out.pte", "--verify"
    )
    assert (code, out, err) == (2, "", f"emitter-filter: {NO_RUNTIME}\n")
    assert "pybindings" in NO_RUNTIME and "executorch-numpy-runtime" in NO_RUNTIME
    assert not (files / "out.pte").exists()
    code, out, err = _main(capsys, "verify", files / "plain.pte", files / "plain.pte")
    assert (code, err) == (2, f"emitter-filter: {NO_RUNTIME}\n")
    assert "--verify" not in NO_RUNTIME  # said by `verify` as by `--verify`
