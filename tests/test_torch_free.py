"""What the torch-free install can and cannot do: file tools yes, the hook with one clear line.

Runs in both installs (`pytest -m filetools`); where executorch is installed, its
absence is simulated by hiding its distribution from `importlib.metadata`.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from emitter_filter import _upstream, cli
from tests.files import GOLDEN, saved

pytestmark = pytest.mark.filetools

INSTALL_HINT = _upstream.install_hint()

# Makes `importlib.metadata` report no executorch, as in a venv without it.
HIDE_EXECUTORCH = textwrap.dedent(
    """
    import importlib.metadata
    _version = importlib.metadata.version
    def version(name):
        if name == "executorch":
            raise importlib.metadata.PackageNotFoundError(name)
        return _version(name)
    importlib.metadata.version = version
    """
)


def test_the_install_hint_from_a_checkout_is_the_readmes_command_with_its_constraints(tmp_path):
    # emitter_filter is on no package index: `pip install 'emitter_filter[executorch]'` finds
    # nothing, and an unconstrained torch is the multi-GB CUDA build.
    checkout = Path(_upstream.__file__).resolve().parents[1]
    hint = _upstream.install_hint()
    constraints = checkout / "constraints" / f"executorch-{_upstream.TESTED_EXECUTORCH[-1]}.txt"
    assert constraints.is_file()
    assert f"pip install -e '{checkout}[executorch]' -c {constraints}" in hint, hint
    assert "CPU" in hint and "\n" not in hint
    assert "pip install 'emitter_filter[executorch]'" not in hint


def test_the_install_hint_outside_a_checkout_installs_executorch_itself(monkeypatch, tmp_path):
    monkeypatch.setattr(_upstream, "__file__", str(tmp_path / "site" / "emitter_filter" / "x.py"))
    hint = _upstream.install_hint()
    assert f"pip install 'executorch{_upstream.SUPPORTED_EXECUTORCH}'" in hint, hint
    assert "emitter_filter[" not in hint and "CPU" in hint


@pytest.mark.parametrize("command", [[], ["audit"], ["prune"], ["run"]])
def test_help_works(command, capsys):
    assert cli.main([*command, "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: emitter-filter")


def test_run_without_executorch_fails_with_one_line_saying_what_to_install(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(_upstream, "installed_executorch_version", lambda: None)
    script = tmp_path / "export.py"
    script.write_text("raise SystemExit('the script must not run')\n")
    assert cli.main(["run", str(script)]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and INSTALL_HINT in err, err


def test_the_config_without_executorch_is_an_error_saying_what_to_install():
    code = HIDE_EXECUTORCH + textwrap.dedent(
        """
        import emitter_filter
        try:
            emitter_filter.ExecutorchBackendConfig
        except emitter_filter.UnsupportedExecutorchError as error:
            print(error)
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert INSTALL_HINT in result.stdout


def test_audit_prune_merge_and_split_import_neither_torch_nor_executorch(tmp_path):
    pte, ptds = saved(GOLDEN / "external" / "dirty")
    code = textwrap.dedent(
        f"""
        import sys
        from emitter_filter import cli
        assert cli.main(["audit", {str(pte)!r}, "--data", {str(ptds[0])!r}]) == 0
        assert cli.main(["prune", {str(pte)!r}, "-o", {str(tmp_path / "out.pte")!r},
                         "--data", {str(ptds[0])!r}, "--ptd-out", {str(tmp_path)!r}]) == 0
        plain = {str(GOLDEN / "plain" / "dirty" / "model.pte")!r}
        assert cli.main(["merge", plain, plain, "-o", {str(tmp_path / "m.pte")!r},
                         "--method", "b=#2:forward"]) == 0
        assert cli.main(["split", {str(tmp_path / "m.pte")!r}, "--method", "b",
                         "-o", {str(tmp_path / "s.pte")!r}]) == 0
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "executorch"))
        assert not loaded, loaded
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / ptds[0].name).exists()


def test_the_regression_assertion_works_on_files(tmp_path):
    from emitter_filter.testing import assert_no_dead_constants

    clean, _ = saved(GOLDEN / "plain" / "pruned")
    dirty, _ = saved(GOLDEN / "plain" / "dirty")
    assert assert_no_dead_constants(clean).dead_bytes == 0
    with pytest.raises(AssertionError, match=r"148 dead constant bytes > 0 allowed"):
        assert_no_dead_constants(dirty)
    assert assert_no_dead_constants(dirty.read_bytes(), max_dead_bytes=148).dead_bytes == 148


# Makes torch and executorch unimportable, as in the torch-free install.
HIDE_TORCH = textwrap.dedent(
    """
    import sys
    sys.modules["torch"] = None
    sys.modules["executorch"] = None
    """
)


@pytest.mark.parametrize(
    "command",
    [
        ["audit", "{pte}", "--names", "{pt2}"],
        ["explain", "{pte}", "--names", "{pt2}"],
        ["explain", "{pte}", "--names", "{pt2}", "--node-data", "{out}"],
        ["prune", "{pte}", "-o", "{out}", "--names", "{pt2}"],
        ["diff", "{pte}", "{pte}", "--new-names", "{pt2}"],
        ["diff", "{pte}", "{pte}", "--old-names", "{pt2}"],
    ],
    ids=["audit", "explain", "explain-node-data", "prune", "diff-new", "diff-old"],
)
def test_a_names_file_without_torch_is_one_line_naming_the_install_and_exit_2(command, tmp_path):
    pte, _ = saved(GOLDEN / "plain" / "dirty")
    pt2 = tmp_path / "model.pt2"
    pt2.write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip archive
    out = tmp_path / "out"
    argv = [a.format(pte=pte, pt2=pt2, out=out) for a in command]
    code = HIDE_TORCH + f"from emitter_filter import cli\nraise SystemExit(cli.main({argv!r}))\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "needs torch" in result.stderr and INSTALL_HINT in result.stderr, result.stderr
    assert str(pt2) in result.stderr
    assert not out.exists() and not list(tmp_path.glob(".out*"))
