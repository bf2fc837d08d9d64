"""`EMITTER_FILTER_PRUNE=1` in any Python process: the .pth start-up hook, the lazy switch, `env`.

The subprocess tests run an export script that never imports emitter_filter, as
`optimum-cli` or any exporter does: with the variable its files have no dead bytes
(audited on disk) and are the file of the same model without the dead buffer, byte
for byte; without it the dead buffer is there; with a bad value the script still
runs and stderr carries one warning. Once with the interpreter
running the tests (the README's editable install), and once, in the slow run,
in a fresh environment where a wheel built from this tree is installed.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import io
import json
import logging
import os
import subprocess
import sys
import sysconfig
import textwrap
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import emitter_filter
from emitter_filter import _upstream, environment
from emitter_filter.cli import main
from emitter_filter.errors import (
    EmitterFilterError,
    EnvironmentVariableError,
    UnsupportedExecutorchError,
)
from emitter_filter.inprocess import startup as _startup

REPO = Path(__file__).resolve().parents[2]

# An exporter that knows nothing of emitter_filter, nor of logging: one program per
# path, each with a 4 KiB buffer nothing reads, except `clean.pte`: the same seeded
# model without it. It says what it saw.
EXPORT_SCRIPT = textwrap.dedent(
    """
    import json, sys
    at_start = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "executorch"))
    import torch
    from executorch.exir import to_edge

    class LinearWithUnusedBuffer(torch.nn.Module):
        def __init__(self, unused):
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)
            if unused:
                self.register_buffer("unused", torch.arange(1024, dtype=torch.float32))

        def forward(self, x):
            return self.lin(x)

    for path in sys.argv[1:]:
        torch.manual_seed(0)
        model = LinearWithUnusedBuffer(unused=not path.endswith("clean.pte"))
        exported = torch.export.export(model, (torch.ones(2, 4),))
        with open(path, "wb") as f:
            to_edge(exported).to_executorch().write_to_file(f)
    loaded = sys.modules.get("emitter_filter")
    print(json.dumps({"heavy_at_start": at_start,
                      "emitter_filter": loaded and loaded.__file__}))
    """
)
DEAD_BYTES = 1024 * 4
PRUNE_LOG = "emitter_filter: dropped 1 constants (4,096 B) and 1 values in "


def _run_exporter(python: Path, directory: Path, value: str | None):
    """Runs EXPORT_SCRIPT under `python` with EMITTER_FILTER_PRUNE=`value` (None: unset).

    Returns what the script saw, its stderr lines, and the files it wrote, dirty first.
    """
    directory.mkdir(parents=True)
    script = directory / "export.py"
    script.write_text(EXPORT_SCRIPT)
    outputs = [directory / "first.pte", directory / "second.pte"]
    if value is None:
        outputs.append(directory / "clean.pte")
    env = {k: v for k, v in os.environ.items() if k not in (environment.ENV_PRUNE, "PYTHONPATH")}
    env["PYTHONWARNINGS"] = "ignore"
    if value is not None:
        env[environment.ENV_PRUNE] = value
    result = subprocess.run(
        [str(python), str(script), *map(str, outputs)],
        capture_output=True,
        text=True,
        env=env,
        cwd=directory,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout), result.stderr.splitlines(), outputs


def _dead_bytes(paths: list[Path]) -> list[int]:
    return [emitter_filter.audit_file(p).dead_bytes for p in paths]


def _check_the_variable_prunes_in_an_exporter(python: Path, tmp_path: Path) -> str:
    """The three runs, side by side; returns where the pruning run imported emitter_filter from."""
    values = {"on": "1", "unset": None, "bad": "2"}
    with ThreadPoolExecutor(len(values)) as pool:
        runs = dict(
            zip(
                values,
                pool.map(
                    lambda item: _run_exporter(python, tmp_path / item[0], item[1]), values.items()
                ),
                strict=True,
            )
        )

    seen, stderr, pruned = runs["on"]
    assert _dead_bytes(pruned) == [0, 0]
    assert seen["heavy_at_start"] == [], "the start-up hook imported torch or ExecuTorch"
    assert len([line for line in stderr if PRUNE_LOG in line]) == 2, stderr

    seen, stderr, (*dirty, clean) = runs["unset"]
    assert _dead_bytes(dirty) == [DEAD_BYTES, DEAD_BYTES]
    # Pruned: the file of the same model without the buffer, byte for byte.
    assert [p.read_bytes() for p in pruned] == [clean.read_bytes()] * 2
    assert seen["emitter_filter"] is None, (
        "the hook imported emitter_filter with the variable unset"
    )
    assert not [line for line in stderr if line.startswith("emitter_filter") or PRUNE_LOG in line]

    seen, stderr, dirty = runs["bad"]
    assert _dead_bytes(dirty) == [DEAD_BYTES, DEAD_BYTES]
    warnings = [line for line in stderr if line.startswith("emitter_filter")]
    assert warnings == [
        "emitter_filter: EMITTER_FILTER_PRUNE='2': expected 1 or 0 "
        "(or true/yes/on and false/no/off; unset or empty means 0); not pruning"
    ]
    assert not [line for line in stderr if PRUNE_LOG in line]
    return runs["on"][0]["emitter_filter"]


# --- the variable -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, False),
        ("", False),
        ("0", False),
        (" off ", False),
        ("No", False),
        ("1", True),
        ("true", True),
        (" YES", True),
        ("on", True),
    ],
    ids=repr,
)
def test_the_variable_reads_true_and_false_values(value, expected):
    environ = {} if value is None else {environment.ENV_PRUNE: value}
    assert _startup.prune_requested(environ) is expected


@pytest.mark.parametrize("value", ["2", "maybe", "enable"])
def test_a_bad_value_is_an_emitter_filter_error_naming_the_accepted_values(value):
    with pytest.raises(EnvironmentVariableError) as caught:
        _startup.prune_requested({environment.ENV_PRUNE: value})
    assert isinstance(caught.value, EmitterFilterError) and isinstance(caught.value, ValueError)
    assert str(caught.value) == (
        f"EMITTER_FILTER_PRUNE={value!r}: expected 1 or 0 "
        "(or true/yes/on and false/no/off; unset or empty means 0)"
    )


def test_importing_emitter_filter_with_a_bad_value_neither_raises_nor_warns():
    env = {**os.environ, environment.ENV_PRUNE: "2", environment.ENV_DEDUPE: "yes_please"}
    result = subprocess.run(
        [sys.executable, "-c", "import emitter_filter"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert (result.returncode, result.stderr) == (0, "")


@pytest.fixture
def environment_applied(monkeypatch):
    """`apply_environment` with the real exporter imported already: it acts at once."""
    from emitter_filter.inprocess import hook

    monkeypatch.setattr(_startup, "_requested", _startup._requested)
    monkeypatch.setattr(_startup, "_refused", _startup._refused)
    _upstream.program_module()
    yield hook
    hook.disable()
    hook.disable_dedupe()


@pytest.mark.parametrize(
    "prune, dedupe, enabled, refused",
    [
        ("1", "2", (True, False), "EMITTER_FILTER_DEDUPE='2'"),
        ("maybe", "on", (False, True), "EMITTER_FILTER_PRUNE='maybe'"),
        ("1", "1", (True, True), None),
    ],
    ids=["bad dedupe", "bad prune", "both good"],
)
def test_each_variable_counts_on_its_own_and_a_refused_one_warns_once(
    environment_applied, caplog, prune, dedupe, enabled, refused
):
    hook = environment_applied
    environ = {environment.ENV_PRUNE: prune, environment.ENV_DEDUPE: dedupe}
    with caplog.at_level(logging.WARNING, logger="emitter_filter"):
        _startup.apply_environment(environ)
    assert (hook.is_enabled(), hook._dedupe_process_wide) == enabled
    mode = "pruning" if "PRUNE" in (refused or "") else "deduplicating"
    expected = (
        []
        if refused is None
        else [
            f"emitter_filter: {refused}: expected 1 or 0 "
            f"(or true/yes/on and false/no/off; unset or empty means 0); not {mode}"
        ]
    )
    assert caplog.messages == expected


def test_the_command_line_ignores_variables_it_does_not_read(built):
    """A typo in the environment changes neither `audit`'s exit code nor its output."""
    env = {**os.environ, environment.ENV_PRUNE: "2", environment.ENV_DEDUPE: "yes_please"}
    for argv, code in (
        ([str(built["clean"].pte), "--max-dead-bytes", "0"], 0),
        ([str(built["plain"].pte), "--max-dead-bytes", "0"], 1),
    ):
        result = subprocess.run(
            [sys.executable, "-m", "emitter_filter", "audit", *argv],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
        )
        assert result.returncode == code, result.stderr
        assert "EMITTER_FILTER" not in result.stderr and "Traceback" not in result.stderr


# --- the finder that waits for the exporter's import -------------------------------------


@pytest.fixture
def fake_exporter(tmp_path, monkeypatch):
    """Points the switch at a module of our own, and records what the callback saw."""
    name = f"fake_exporter_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(_startup, "EXPORTER_MODULE", name)
    seen = []
    monkeypatch.setattr(_startup, "_enable_pruning", lambda: seen.append(sys.modules[name].VALUE))
    yield name, seen
    sys.modules.pop(name, None)
    for finder in [f for f in sys.meta_path if isinstance(f, _startup._ImportTrigger)]:
        finder.remove()


def _triggers():
    return [f for f in sys.meta_path if isinstance(f, _startup._ImportTrigger)]


def test_pruning_starts_right_after_the_exporter_module_has_run(fake_exporter):
    name, seen = fake_exporter
    _startup.prune_from_exporter_import()
    _startup.prune_from_exporter_import()
    assert len(_triggers()) == 1 and seen == []
    module = __import__(name)
    assert seen == [42], "once, after the module's code ran"
    assert _triggers() == []
    # The module keeps its own loader: source, reload and resources still work.
    assert type(module.__loader__).__name__ == "SourceFileLoader"
    assert module.__spec__.loader is module.__loader__
    assert inspect.getsource(module) == "VALUE = 42\n"


def test_pruning_starts_at_once_when_the_exporter_is_already_imported(fake_exporter):
    name, seen = fake_exporter
    __import__(name)
    _startup.prune_from_exporter_import()
    assert seen == [42]
    assert _triggers() == []


def test_a_failed_exporter_import_leaves_the_switch_waiting(fake_exporter, tmp_path):
    name, seen = fake_exporter
    (tmp_path / f"{name}.py").write_text("raise RuntimeError('broken exporter')\n")
    _startup.prune_from_exporter_import()
    with pytest.raises(RuntimeError, match="broken exporter"):
        __import__(name)
    assert seen == [] and len(_triggers()) == 1


def test_an_executorch_the_hook_does_not_know_warns_and_the_import_goes_on(
    fake_exporter, monkeypatch, caplog
):
    name, _ = fake_exporter

    def refuse():
        raise UnsupportedExecutorchError("emitter_filter supports executorch==1.5.1 only")

    monkeypatch.setattr(_startup, "_enable_pruning", refuse)
    _startup.prune_from_exporter_import()
    assert __import__(name).VALUE == 42
    assert caplog.messages == [
        "emitter_filter: emitter_filter supports executorch==1.5.1 only; not pruning"
    ]
    assert _triggers() == []


def test_the_switch_answers_no_other_import(fake_exporter):
    _startup.prune_from_exporter_import()
    (trigger,) = _triggers()
    assert trigger.find_spec("json", None) is None
    assert trigger.find_spec("emitter_filter_no_such_module", None) is None


def test_the_switch_waits_for_the_module_the_hook_wraps():
    assert _upstream.program_module().__name__ == _startup.EXPORTER_MODULE


# --- the INFO line of each prune, seen ---------------------------------------------------


def _alone() -> logging.Logger:
    """A logger whose records reach only its own handlers.

    Made in the test's body: pytest adds its capture handler to every logger that
    does not propagate when the test starts.
    """
    logger = logging.getLogger(f"emitter_filter_test_{uuid.uuid4().hex}")
    logger.propagate = False
    return logger


def test_a_prune_line_no_handler_receives_goes_to_stderr(capsys):
    logger = _alone()
    logger.addHandler(_startup._StderrUnlessHandled())
    logging.getLogger(f"{logger.name}.hook").warning("dropped 1 constants")
    assert capsys.readouterr().err == "dropped 1 constants\n"


def test_a_prune_line_the_process_handles_is_not_written_twice(capsys):
    logger, theirs = _alone(), logging.StreamHandler(io.StringIO())
    logger.addHandler(_startup._StderrUnlessHandled())
    logger.addHandler(theirs)
    logging.getLogger(f"{logger.name}.hook").warning("dropped 1 constants")
    assert capsys.readouterr().err == ""
    assert theirs.stream.getvalue() == "dropped 1 constants\n"


@pytest.fixture
def package_logger():
    logger = logging.getLogger("emitter_filter")
    saved = logger.level, list(logger.handlers)
    yield logger
    logger.setLevel(saved[0])
    logger.handlers[:] = saved[1]


@pytest.mark.parametrize(
    "level, expected",
    [(logging.NOTSET, logging.INFO), (logging.ERROR, logging.ERROR)],
    ids=["unset", "set"],
)
def test_pruning_by_the_variable_logs_at_info_unless_told_otherwise(
    level, expected, package_logger
):
    package_logger.setLevel(level)
    _startup._show_prune_lines()
    _startup._show_prune_lines()
    assert package_logger.level == expected
    assert [type(h) for h in package_logger.handlers].count(_startup._StderrUnlessHandled) == 1


# --- the .pth and its packaging ----------------------------------------------------------


def test_the_pth_file_is_comments_and_one_import_line_reading_the_variable():
    lines = (REPO / _startup.PTH_NAME).read_text().splitlines()
    code = [line for line in lines if not line.startswith("#")]
    assert len(code) == 1 and code[0].startswith("import ")
    assert f'"{environment.ENV_PRUNE}"' in code[0]
    assert f'PTH = "{_startup.PTH_NAME}"' in (REPO / "setup.py").read_text()
    # site runs .pth files in sorted order: after setuptools' editable finder, which
    # makes emitter_filter importable in an editable install.
    assert "__editable__.emitter_filter-0.1.0.pth" < _startup.PTH_NAME


def _run_pth(tmp_path: Path, values: dict[str, str], *, importable: bool = True, runs: int = 1):
    """Runs the checkout's .pth as `site` does (`runs` times, as a venv's site runs it twice)
    in a Python without site-packages; returns whether it imported emitter_filter, and stderr."""
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / _startup.PTH_NAME).write_bytes((REPO / _startup.PTH_NAME).read_bytes())
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMITTER_FILTER_")}
    env.update(values, PYTHONPATH=str(REPO) if importable else "")
    code = (
        f"import site, sys\nfor _ in range({runs}): site.addsitedir({str(site_dir)!r})\n"
        "print('emitter_filter' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip() == "True", result.stderr


@pytest.mark.parametrize(
    "values, imports",
    [
        ({}, False),
        ({"EMITTER_FILTER_PRUNE": "0"}, False),
        ({"EMITTER_FILTER_PRUNE": " Off", "EMITTER_FILTER_DEDUPE": "false"}, False),
        ({"EMITTER_FILTER_DEDUPE": "no"}, False),
        ({"EMITTER_FILTER_PRUNE": ""}, False),
        ({"EMITTER_FILTER_PRUNE": "1"}, True),
        ({"EMITTER_FILTER_DEDUPE": "1"}, True),
        ({"EMITTER_FILTER_PRUNE": "2"}, True),
    ],
    ids=["unset", "0", "off and false", "dedupe no", "empty", "1", "dedupe 1", "bad"],
)
def test_a_value_meaning_off_costs_what_unset_costs(tmp_path, values, imports):
    assert _run_pth(tmp_path, values) == (imports, "")


def test_the_pth_knows_the_off_values_the_package_reads():
    (code,) = [
        line
        for line in (REPO / _startup.PTH_NAME).read_text().splitlines()
        if not line.startswith("#")
    ]
    assert f"not in {environment._FALSE!r}" in code
    assert all(f'"{name}"' in code for name, _ in _startup._VARIABLES)


def test_a_stale_pth_without_its_package_warns_once(tmp_path):
    imported, stderr = _run_pth(tmp_path, {"EMITTER_FILTER_PRUNE": "1"}, importable=False, runs=2)
    assert not imported
    assert stderr == "emitter_filter: No module named 'emitter_filter'; not pruning\n"


def test_the_installed_distribution_records_the_pth_so_uninstall_removes_it():
    # The one in site-packages, not the checkout's emitter_filter.egg-info.
    (installed,) = importlib.metadata.distributions(
        name="emitter_filter", path=[sysconfig.get_path("purelib")]
    )
    assert _startup.PTH_NAME in [str(f) for f in installed.files]


def test_the_variable_prunes_an_exporter_that_never_imports_emitter_filter(tmp_path):
    assert _startup.installed_pth_files(), (
        f"{_startup.PTH_NAME} is not in {sys.executable}'s site-packages: "
        "reinstall the project (pip install -e .)"
    )
    _check_the_variable_prunes_in_an_exporter(Path(sys.executable), tmp_path)


@pytest.mark.slow
def test_a_wheel_built_from_the_tree_installs_the_hook(tmp_path):
    from tests.wheel_env import build_wheel, dependency_site_packages, install_wheel, make_venv

    wheel = build_wheel(tmp_path / "wheel")
    python = make_venv(tmp_path / "venv", dependency_site_packages())
    install_wheel(python, wheel)
    site_packages = next((tmp_path / "venv" / "lib").glob("python3*/site-packages"))
    installed = site_packages / _startup.PTH_NAME
    assert installed.read_bytes() == (REPO / _startup.PTH_NAME).read_bytes()

    imported_from = _check_the_variable_prunes_in_an_exporter(python, tmp_path / "runs")
    assert Path(imported_from).is_relative_to(site_packages), imported_from

    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "uninstall",
            "-y",
            "-q",
            "emitter_filter",
        ],
        check=True,
    )
    assert not installed.exists()


# --- emitter-filter env -----------------------------------------------------------------


def _env_output(capsys, monkeypatch, value: str | None, **others: str) -> list[str]:
    for name in (environment.ENV_PRUNE, environment.ENV_DEDUPE, environment.ENV_STRICT):
        monkeypatch.delenv(name, raising=False)
    if value is not None:
        monkeypatch.setenv(environment.ENV_PRUNE, value)
    for variable, other in others.items():
        monkeypatch.setenv(f"EMITTER_FILTER_{variable.upper()}", other)
    assert main(["env"]) == 0
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize(
    "value, answer",
    [
        (None, "no: EMITTER_FILTER_PRUNE is not set"),
        ("0", "no: EMITTER_FILTER_PRUNE='0' turns it off"),
        ("2", "no: EMITTER_FILTER_PRUNE='2': expected 1 or 0"),
        ("1", "yes: every Python process started here prunes"),
    ],
    ids=["unset", "off", "bad", "on"],
)
def test_env_says_whether_the_hook_would_prune_and_why(value, answer, capsys, monkeypatch):
    monkeypatch.setattr(
        _startup, "installed_pth_files", lambda: ("/site/emitter_filter_startup.pth",)
    )
    lines = _env_output(capsys, monkeypatch, value)
    assert lines[0].startswith(f"would prune: {answer}")
    assert lines[1] == "would deduplicate: no: EMITTER_FILTER_DEDUPE is not set"
    assert lines[2].startswith("strict: no: EMITTER_FILTER_STRICT is not set")
    assert lines[3] == f"python: {sys.executable} ({sys.version.split()[0]})"
    assert lines[4].startswith("EMITTER_FILTER_PRUNE: ")
    assert lines[5:7] == ["EMITTER_FILTER_DEDUPE: not set", "EMITTER_FILTER_STRICT: not set"]
    assert lines[7] == "start-up hook: /site/emitter_filter_startup.pth"
    assert lines[8].startswith(f"executorch: {_upstream.installed_executorch_version()} at ")
    assert lines[8].endswith(" (supported)")


def test_env_says_what_the_dedupe_variable_does_on_its_own(capsys, monkeypatch):
    monkeypatch.setattr(
        _startup, "installed_pth_files", lambda: ("/site/emitter_filter_startup.pth",)
    )
    lines = _env_output(capsys, monkeypatch, None, dedupe="1")
    assert lines[0] == "would prune: no: EMITTER_FILTER_PRUNE is not set"
    assert lines[1] == (
        "would deduplicate: yes: every Python process started here deduplicates the programs "
        f"it serializes (pruned or not) once it imports {_startup.EXPORTER_MODULE}"
    )
    assert lines[5] == "EMITTER_FILTER_DEDUPE: '1' (on)"


def test_env_explains_each_refused_value_and_what_it_leaves_on(capsys, monkeypatch):
    monkeypatch.setattr(
        _startup, "installed_pth_files", lambda: ("/site/emitter_filter_startup.pth",)
    )
    lines = _env_output(capsys, monkeypatch, "1", dedupe="2", strict="perhaps")
    assert lines[0].startswith("would prune: yes: ")
    assert lines[1] == (
        "would deduplicate: no: EMITTER_FILTER_DEDUPE='2': expected 1 or 0 (or true/yes/on and "
        "false/no/off; unset or empty means 0); a process says so, and does not deduplicate, "
        f"once it imports {_startup.EXPORTER_MODULE}"
    )
    assert lines[2].startswith("strict: EMITTER_FILTER_STRICT='perhaps': expected 1 or 0")
    assert lines[5:7] == [
        "EMITTER_FILTER_DEDUPE: '2' (not accepted)",
        "EMITTER_FILTER_STRICT: 'perhaps' (not accepted)",
    ]


def test_env_explains_a_bad_value_from_the_command_line():
    env = {**os.environ, environment.ENV_PRUNE: "2", environment.ENV_DEDUPE: "yes_please"}
    result = subprocess.run(
        [sys.executable, "-m", "emitter_filter", "env"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.startswith("would prune: no: EMITTER_FILTER_PRUNE='2': expected 1 or 0")
    assert "would deduplicate: no: EMITTER_FILTER_DEDUPE='yes_please'" in result.stdout


def test_env_names_a_missing_hook_file(capsys, monkeypatch):
    monkeypatch.setattr(_startup, "installed_pth_files", lambda: ())
    lines = _env_output(capsys, monkeypatch, "1")
    assert lines[0] == (
        "would prune: no: emitter_filter_startup.pth is in none of this Python's site "
        "directories; reinstall emitter_filter (a process that imports it still prunes)"
    )
    assert lines[7] == "start-up hook: not installed"


def test_env_names_an_unsupported_executorch(capsys, monkeypatch):
    monkeypatch.setattr(_upstream, "installed_executorch_version", lambda: "0.1.0")
    lines = _env_output(capsys, monkeypatch, "1")
    assert lines[0].startswith("would prune: no: emitter_filter supports executorch")
    assert "found 0.1.0" in lines[0]
    assert lines[8].startswith("executorch: 0.1.0 at ") and lines[8].endswith(" (not supported)")


def test_env_finds_the_hook_installed_with_the_running_interpreter(capsys, monkeypatch):
    lines = _env_output(capsys, monkeypatch, None)
    assert lines[7] == f"start-up hook: {Path(sysconfig.get_path('purelib'), _startup.PTH_NAME)}"
