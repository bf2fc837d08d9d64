"""`keep_constants` / `--keep`: a constant matching a pattern is a root, in process and on disk."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from executorch.exir import ExecutorchBackendConfig as UpstreamConfig, to_edge
from executorch.extension.pybindings.portable_lib import _load_program

import emitter_filter
from emitter_filter.cli import main
from tests.builders import CASES, LINEAR_INPUTS, UnusedBuffer
from tests.programs import EXAMPLE_INPUTS, LinearWithUnusedBuffers

PRUNE = emitter_filter.ExecutorchBackendConfig


def _save(manager, directory: Path) -> dict[str, Path]:
    """Writes the .pte and its .ptd files; returns them by name."""
    directory.mkdir()
    manager.save(str(directory / "model.pte"))
    manager.write_tensor_data_to_file(str(directory))
    return {path.name: path for path in sorted(directory.iterdir())}


def _contents(files: dict[str, Path]) -> dict[str, bytes]:
    return {name: path.read_bytes() for name, path in files.items()}


def _external(config):
    config.external_constants = True
    torch.manual_seed(0)
    return to_edge(torch.export.export(UnusedBuffer(dead=True), LINEAR_INPUTS)).to_executorch(
        config
    )


# executorch 1.5 added `data_path`: before it, the pybindings load no program with its .ptd
# (and `_load_for_executorch`'s module has no attribute API), so the runtime check cannot run.
loads_ptd = pytest.mark.skipif(
    "data_path" not in (_load_program.__doc__ or ""),
    reason="this executorch's _load_program takes no .ptd (data_path, added in 1.5)",
)


def _load_forward(files: dict[str, Path]):
    ptd = [str(p) for name, p in files.items() if name.endswith(".ptd")]
    program = _load_program(str(files["model.pte"]), data_path=ptd[0])
    return program.load_method("forward")


@pytest.fixture(scope="module")
def external(tmp_path_factory):
    base = tmp_path_factory.mktemp("keep")
    return {
        "plain": _save(_external(UpstreamConfig()), base / "plain"),
        "pruned": _save(_external(PRUNE(prune_constants=True)), base / "pruned"),
        "kept": _save(
            _external(PRUNE(prune_constants=True, keep_constants=("unused",))), base / "kept"
        ),
    }


@loads_ptd
def test_a_kept_constant_stays_readable_by_name_in_the_runtime(external):
    want = UnusedBuffer(dead=True).unused
    plain, kept = _load_forward(external["plain"]), _load_forward(external["kept"])
    assert torch.equal(kept.get_attribute("unused"), want)
    assert torch.equal(plain.get_attribute("unused"), want)
    assert kept.method_meta().num_attributes() == plain.method_meta().num_attributes() == 4
    got = kept(LINEAR_INPUTS)
    assert torch.equal(got[0], plain(LINEAR_INPUTS)[0])


@loads_ptd
def test_without_keep_the_pruned_constant_is_no_longer_readable_by_name(external):
    pruned = _load_forward(external["pruned"])
    assert pruned.method_meta().num_attributes() == 3
    with pytest.raises(RuntimeError):
        pruned.get_attribute("unused")


def test_keeping_the_only_dead_constant_writes_what_executorch_writes(external):
    assert _contents(external["kept"]) == _contents(external["plain"])


@pytest.mark.parametrize("pattern", ["unused", "unu*", "[u]nused"])
def test_a_pruning_block_keeps_by_pattern_as_the_config_does(pattern, external, tmp_path):
    with emitter_filter.pruning(keep_constants=[pattern]):
        files = _save(_external(UpstreamConfig()), tmp_path / "block")
    assert _contents(files) == _contents(external["plain"])


def test_a_constant_the_program_does_not_name_is_kept_by_its_state_name():
    case = next(c for c in CASES if c.name == "unused_buffer_portable")
    plain = case.build(dead=True, config=UpstreamConfig())
    kept = case.build(dead=True, config=PRUNE(prune_constants=True, keep_constants=["unused"]))
    assert kept.buffer == plain.buffer
    assert emitter_filter.report(kept).dropped == ()


def test_a_pattern_that_matches_nothing_is_warned_about(caplog):
    case = next(c for c in CASES if c.name == "unused_buffer_portable")
    with caplog.at_level(logging.WARNING, logger="emitter_filter"):
        manager = case.build(
            dead=True, config=PRUNE(prune_constants=True, keep_constants=["unsued"])
        )
    assert [r.getMessage() for r in caplog.records if r.name.startswith("emitter_filter")] == [
        "emitter_filter: keep_constants pattern 'unsued' matched no constant"
    ]
    assert emitter_filter.report(manager).dropped


def test_a_single_string_is_not_taken_for_a_list_of_patterns():
    with pytest.raises(TypeError, match="not a str"):
        PRUNE(prune_constants=True, keep_constants="unused")
    with pytest.raises(TypeError, match="not a str"):
        with emitter_filter.pruning(keep_constants="unused"):
            pass


# --- on disk ---------------------------------------------------------------------------


def _linear_external(config):
    """LinearWithUnusedBuffers (dead `unused` and `odd`), constants in a .ptd."""
    config.external_constants = True
    exported = torch.export.export(LinearWithUnusedBuffers(), EXAMPLE_INPUTS)
    return to_edge(exported).to_executorch(config)


def test_keep_on_disk_writes_the_bytes_keep_constants_writes(tmp_path, capsys):
    dirty = _save(_linear_external(UpstreamConfig()), tmp_path / "dirty")
    kept = _save(
        _linear_external(PRUNE(prune_constants=True, keep_constants=("unused",))),
        tmp_path / "kept",
    )
    [ptd] = [p for name, p in dirty.items() if name.endswith(".ptd")]
    out = tmp_path / "out"
    out.mkdir()
    code = main(
        [
            "prune",
            str(dirty["model.pte"]),
            "-o",
            str(out / "model.pte"),
            "--data",
            str(ptd),
            "--ptd-out",
            str(out),
            "--keep",
            "unused",
        ]
    )
    assert code == 0, capsys.readouterr().err
    assert _contents({p.name: p for p in sorted(out.iterdir())}) == _contents(kept)
    assert _contents(kept) != _contents(dirty)  # `odd` is still dropped


def test_keep_on_disk_makes_a_matching_constant_live_for_audit(built, capsys):
    case = built["external"]
    ptds = [a for p in case.ptds for a in ("--data", str(p))]
    assert main(["audit", str(case.pte), *ptds, "--keep", "unused", "--max-dead-bytes", "20"]) == 0
    assert main(["audit", str(case.pte), *ptds, "--max-dead-bytes", "20"]) == 1
    capsys.readouterr()


@pytest.mark.parametrize(
    "keep, message",
    [
        ([123], "keep_constants=[123]: expected a sequence of str patterns; item 0 is int 123"),
        (
            ["a", None],
            "keep_constants=['a', None]: expected a sequence of str patterns; "
            "item 1 is NoneType None",
        ),
        (7, "keep_constants=7: expected a sequence of str patterns, not int"),
    ],
    ids=["int item", "None item", "not a sequence"],
)
def test_patterns_that_are_not_strings_are_a_type_error_naming_the_argument(keep, message):
    with pytest.raises(TypeError) as caught:
        PRUNE(prune_constants=True, keep_constants=keep)
    assert str(caught.value) == message
    with pytest.raises(TypeError) as caught:
        with emitter_filter.pruning(keep_constants=keep):
            pass
    assert str(caught.value) == message


@pytest.mark.parametrize("keep", [[123], 7], ids=["int item", "not a sequence"])
def test_the_file_tools_check_the_patterns_alike(keep, built, tmp_path):
    pte = built["plain"].pte
    for call in (
        lambda: emitter_filter.audit_file(pte, keep_constants=keep),
        lambda: emitter_filter.prune_file(pte, tmp_path / "out.pte", keep_constants=keep),
    ):
        with pytest.raises(TypeError, match=r"^keep_constants=.*: expected a sequence of str"):
            call()
    assert not (tmp_path / "out.pte").exists()


def test_keeping_a_parameter_a_delegate_took_says_where_it_is(caplog):
    case = next(c for c in CASES if c.name == "unused_buffer_xnnpack")
    with caplog.at_level(logging.WARNING, logger="emitter_filter"):
        case.build(dead=True, config=PRUNE(prune_constants=True, keep_constants=["lin*.weight"]))
    assert [r.getMessage() for r in caplog.records if r.name.startswith("emitter_filter")] == [
        "emitter_filter: keep_constants pattern 'lin*.weight' matched no constant of the "
        "program's values: parameter 'linear.weight' was lowered into the XnnpackBackend "
        "delegate lowered_module_0 of plan 'forward', which holds its own copy (kept as the "
        "delegate's data, not readable by name)"
    ]
