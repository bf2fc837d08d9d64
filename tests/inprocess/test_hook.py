"""The hook and the ways to turn it on: config, `pruning()`, the environment, `run`."""

from __future__ import annotations

import copy
import logging
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from executorch.exir import ExecutorchBackendConfig as UpstreamConfig
from executorch.exir.program import _program as upstream_program

import emitter_filter
from emitter_filter import _upstream
from emitter_filter._upstream import check_executorch_version, emitter_output_of
from emitter_filter.errors import InvariantError, ProgramFormatError, UnsupportedExecutorchError
from emitter_filter.inprocess import hook
from emitter_filter.inprocess.prune_emitted import prune_emitter_output
from tests.builders import CASES

CASE = next(c for c in CASES if c.name == "unused_buffer_portable")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def expected():
    """The bytes ExecuTorch writes with the dead buffer, and without it at the source."""
    return {"dirty": CASE.build(dead=True).buffer, "clean": CASE.build(dead=False).buffer}


def test_pruning_block_prunes_with_an_upstream_config(expected):
    with emitter_filter.pruning():
        manager = CASE.build(dead=True, config=UpstreamConfig())
    assert manager.buffer == expected["clean"]
    assert emitter_filter.report(manager).dropped


def test_outside_a_pruning_block_nothing_is_pruned(expected):
    with emitter_filter.pruning():
        pass
    manager = CASE.build(dead=True, config=UpstreamConfig())
    assert manager.buffer == expected["dirty"]
    with pytest.raises(LookupError, match="without pruning"):
        emitter_filter.report(manager)


def test_each_prune_logs_one_info_line(caplog):
    with caplog.at_level(logging.INFO, logger="emitter_filter"):
        CASE.build(dead=True, config=emitter_filter.ExecutorchBackendConfig(prune_constants=True))
    lines = [
        r
        for r in caplog.records
        if r.name.startswith("emitter_filter") and r.levelno == logging.INFO
    ]
    assert len(lines) == 1
    assert "dropped 1 constants (16,384 B)" in lines[0].getMessage()


def test_install_is_idempotent_and_uninstall_restores_executorch(expected):
    hook.install()
    wrapped = upstream_program.serialize_for_executorch
    hook.install()
    assert upstream_program.serialize_for_executorch is wrapped
    original = wrapped.__emitter_filter_original__
    original_emit = upstream_program.emit_program.__emitter_filter_original__
    hook.uninstall()
    try:
        assert upstream_program.serialize_for_executorch is original
        assert upstream_program.emit_program is original_emit
        assert not hook.installed()
        assert CASE.build(dead=True, config=UpstreamConfig()).buffer == expected["dirty"]
        # Asking for pruning puts the hook back: never a silent no-op.
        config = emitter_filter.ExecutorchBackendConfig(prune_constants=True)
        assert hook.installed()
        assert CASE.build(dead=True, config=config).buffer == expected["clean"]
    finally:
        hook.install()


def test_setting_prune_constants_after_construction_installs_the_hook(expected):
    hook.uninstall()
    try:
        config = emitter_filter.ExecutorchBackendConfig()
        assert not hook.installed()
        config.prune_constants = True
        assert CASE.build(dead=True, config=config).buffer == expected["clean"]
    finally:
        hook.install()


def test_threads_with_and_without_pruning_each_get_their_own_result(expected):
    # Upstream's to_executorch passes are not thread-safe (torch.fx's preserve_node_meta
    # flips process-wide flags), so threads run only the part the hook owns: the wrapped
    # serialize_for_executorch, each on its own copy of the same emitted program.
    manager = CASE.build(dead=True)
    emitter_outputs = [copy.deepcopy(emitter_output_of(manager)) for _ in range(6)]
    serializer = manager._data_serializer
    hook.install()
    serialize = upstream_program.serialize_for_executorch
    results: dict[int, bytes] = {}
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            if index % 3 == 0:
                with emitter_filter.pruning():
                    pte, _ = serialize(emitter_outputs[index], UpstreamConfig(), serializer, None)
            elif index % 3 == 1:
                config = emitter_filter.ExecutorchBackendConfig(prune_constants=True)
                pte, _ = serialize(emitter_outputs[index], config, serializer, None)
            else:
                pte, _ = serialize(emitter_outputs[index], UpstreamConfig(), serializer, None)
            results[index] = bytes(pte)
        except BaseException as error:  # reported by the main thread below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(emitter_outputs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert len(results) == len(emitter_outputs)
    for index, buffer in results.items():
        assert buffer == (expected["dirty"] if index % 3 == 2 else expected["clean"]), index


def test_a_bad_program_raises_a_clear_error_and_is_left_as_it_was():
    manager = CASE.build(dead=True)
    emitter_output = copy.deepcopy(emitter_output_of(manager))
    chain = emitter_output.program.execution_plan[0].chains[0]
    chain.instructions[0].instr_args.args[0] = 999
    before = copy.deepcopy(emitter_output)
    with pytest.raises(ProgramFormatError, match="plan 'forward': value index 999 outside values"):
        prune_emitter_output(emitter_output)
    assert emitter_output == before


def test_an_invariant_error_inside_the_filter_propagates_out_of_to_executorch(monkeypatch):
    import emitter_filter.inprocess.prune_emitted

    def broken(emitter_output, **options):
        raise InvariantError("boom")

    monkeypatch.setattr(emitter_filter.inprocess.prune_emitted, "prune_emitter_output", broken)
    with pytest.raises(InvariantError, match="boom"):
        CASE.build(dead=True, config=emitter_filter.ExecutorchBackendConfig(prune_constants=True))


@pytest.mark.parametrize("version", ["1.4.0", "1.4.1", "1.5.0rc1", "1.5.1", "1.5.9"])
def test_executorch_releases_in_the_supported_range_pass_the_check(version):
    check_executorch_version(version)


@pytest.mark.parametrize("version", ["1.3.1", "1.6.0", "1.6.0.dev20261101", "2.0.0"])
def test_an_executorch_outside_the_range_is_an_error_naming_the_range(version, monkeypatch):
    monkeypatch.delenv(_upstream.ENV_ALLOW_UNTESTED, raising=False)
    with pytest.raises(UnsupportedExecutorchError) as error:
        check_executorch_version(version)
    message = str(error.value)
    assert f"executorch >=1.4.0,<1.6 (tested: 1.4.1, 1.5.1), found {version}" in message
    assert f"{_upstream.ENV_ALLOW_UNTESTED}=1" in message


def test_an_untested_executorch_is_a_warning_once_when_the_user_opts_in(monkeypatch, caplog):
    monkeypatch.setenv(_upstream.ENV_ALLOW_UNTESTED, "1")
    monkeypatch.setattr(_upstream, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="emitter_filter"):
        check_executorch_version("1.6.0")
        check_executorch_version("1.6.0")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "found 1.6.0" in warnings[0], warnings


def test_a_missing_executorch_is_an_error_saying_what_to_install(monkeypatch):
    monkeypatch.setenv(_upstream.ENV_ALLOW_UNTESTED, "1")
    monkeypatch.setattr(_upstream, "installed_executorch_version", lambda: None)
    # From a checkout: the README's command with its constraints file (issue 33), not the
    # `emitter_filter[executorch]` that no index serves.
    with pytest.raises(
        UnsupportedExecutorchError,
        match=r"pip install .*\[executorch\]' -c .*"
        r"constraints/executorch-1\.5\.1\.txt",
    ):
        check_executorch_version()


def test_a_serializer_of_another_shape_is_an_error_even_when_untested_releases_are_allowed(
    monkeypatch,
):
    emitter_filter.uninstall()
    monkeypatch.setenv(_upstream.ENV_ALLOW_UNTESTED, "1")

    def serialize_for_executorch(emitter_output, config, data_serializer, named_data_store, extra):
        raise AssertionError("never called")

    monkeypatch.setattr(upstream_program, "serialize_for_executorch", serialize_for_executorch)
    with pytest.raises(UnsupportedExecutorchError, match=r"takes \('emitter_output', .*'extra'\)"):
        emitter_filter.install()
    assert upstream_program.serialize_for_executorch is serialize_for_executorch


def test_an_unsupported_executorch_fails_where_the_hook_is_used_not_at_import():
    code = textwrap.dedent(
        """
        import importlib.metadata
        importlib.metadata.version = lambda name: "1.6.0"
        import emitter_filter
        from emitter_filter.errors import UnsupportedExecutorchError
        for use in (lambda: emitter_filter.pruning().__enter__(),
                    lambda: emitter_filter.ExecutorchBackendConfig):
            try:
                use()
            except UnsupportedExecutorchError as error:
                print(error)
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and all("found 1.6.0" in line for line in lines), lines


# A third-party export script: knows nothing of emitter_filter.
EXPORT_SCRIPT = textwrap.dedent(
    """
    import sys
    from tests.builders import CASES
    from executorch.exir import ExecutorchBackendConfig
    case = next(c for c in CASES if c.name == "unused_buffer_portable")
    {preamble}
    manager = case.build(dead=True, config=ExecutorchBackendConfig())
    manager.save(sys.argv[1])
    """
)


def _run_python(args, tmp_path, env_extra=None, preamble=""):
    script = tmp_path / "export_script.py"
    script.write_text(EXPORT_SCRIPT.format(preamble=preamble))
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env_extra or {})}
    result = subprocess.run(
        [sys.executable, *[str(script) if a == "SCRIPT" else a for a in args]],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    return result


@pytest.mark.parametrize("how", ["environment", "run_command"])
def test_pruning_without_editing_the_export_script(how, tmp_path, expected):
    out = tmp_path / "model.pte"
    if how == "environment":
        result = _run_python(
            ["SCRIPT", str(out)],
            tmp_path,
            {emitter_filter.ENV_PRUNE: "1"},
            preamble="import emitter_filter",
        )
    else:
        result = _run_python(["-m", "emitter_filter", "run", "SCRIPT", str(out)], tmp_path)
        assert "dropped 1 constants (16,384 B)" in result.stderr
    assert out.read_bytes() == expected["clean"]


def test_an_unknown_environment_value_warns_at_the_export_and_leaves_it_unpruned(
    tmp_path, expected
):
    out = tmp_path / "model.pte"
    result = _run_python(
        ["SCRIPT", str(out)],
        tmp_path,
        {emitter_filter.ENV_PRUNE: "maybe"},
        preamble="import emitter_filter",
    )
    warnings = [line for line in result.stderr.splitlines() if "EMITTER_FILTER" in line]
    assert warnings == [
        "emitter_filter: EMITTER_FILTER_PRUNE='maybe': expected 1 or 0 "
        "(or true/yes/on and false/no/off; unset or empty means 0); not pruning"
    ]
    assert out.read_bytes() == expected["dirty"]


def test_observers_see_each_serialized_program_pruned_or_not(expected):
    seen = []
    hook.add_observer(seen.append)
    try:
        plain = CASE.build(dead=True, config=UpstreamConfig())
        with emitter_filter.pruning():
            pruned = CASE.build(dead=True, config=UpstreamConfig())
    finally:
        hook.remove_observer(seen.append)
    CASE.build(dead=True, config=UpstreamConfig())  # after removal: not seen
    assert [bytes(s.pte) for s in seen] == [plain.buffer, pruned.buffer]
    assert [bytes(s.pte) for s in seen] == [expected["dirty"], expected["clean"]]
    assert seen[0].prune_report is None and seen[1].prune_report.dropped
    assert all(s.ptd == {} and s.serialize_seconds > 0 for s in seen)
    with pytest.raises(ValueError, match="not an emitter_filter observer"):
        hook.remove_observer(seen.append)
