"""`prune_file` and `emitter-filter prune`: the file `prune_constants=True` writes, safely.

Each case is a model saved as upstream ExecuTorch writes it (dirty), pruned on
disk here, and compared with the same model pruned in process, and, where the
builders have one, with the model whose dead constants were deleted at the source.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import emitter_filter
from emitter_filter.cli import main
from emitter_filter.errors import OutputFileError, PteFormatError
from emitter_filter.ondisk.audit import audit_file
from emitter_filter.ondisk.prune import prune_file


@dataclasses.dataclass(frozen=True)
class Files:
    """One model on disk: dirty, pruned in process (and its report), and (if any) built
    without dead constants."""

    dirty: Path
    dirty_ptds: tuple[Path, ...]
    pruned: Path
    pruned_ptds: tuple[Path, ...]
    clean: Path | None
    runs: tuple[tuple[str, tuple], ...]
    report: emitter_filter.PruneReport


def _save(manager, directory: Path) -> tuple[Path, tuple[Path, ...]]:
    directory.mkdir(parents=True)
    pte = directory / "model.pte"
    pte.write_bytes(manager.buffer)
    manager.write_tensor_data_to_file(str(directory))
    return pte, tuple(sorted(directory.glob("*.ptd")))


def _builder_case(name: str, root: Path) -> Files:
    from tests.builders import CASES

    (case,) = [c for c in CASES if c.name == name]
    dirty, dirty_ptds = _save(case.build(dead=True), root / name / "dirty")
    manager = case.build(
        dead=True, config=emitter_filter.ExecutorchBackendConfig(prune_constants=True)
    )
    pruned, pruned_ptds = _save(manager, root / name / "pruned")
    clean, _ = _save(case.build(dead=False), root / name / "clean")
    return Files(
        dirty, dirty_ptds, pruned, pruned_ptds, clean, case.runs, emitter_filter.report(manager)
    )


def _named_data_case(name: str, root: Path) -> Files:
    """Named data a pass orphaned (the hook's own test models), in the .pte or a .ptd."""
    from executorch.exir import ExecutorchBackendConfig as UpstreamConfig

    from tests.inprocess.test_named_data import (
        INPUTS,
        RemoveLastXnnpackCall,
        TwoLinears,
        _two_delegates,
        _with_opaque_delegate,
    )

    def edge():
        torch.manual_seed(0)
        if name == "opaque_delegate":
            return _with_opaque_delegate()
        tag = "weights" if name == "dead_named_data_in_ptd" else None
        return _two_delegates(TwoLinears(), external_tag=tag)

    dirty, dirty_ptds = _save(
        edge().to_executorch(UpstreamConfig(passes=[RemoveLastXnnpackCall()])),
        root / name / "dirty",
    )
    manager = edge().to_executorch(
        emitter_filter.ExecutorchBackendConfig(
            prune_constants=True, passes=[RemoveLastXnnpackCall()]
        )
    )
    pruned, pruned_ptds = _save(manager, root / name / "pruned")
    return Files(
        dirty,
        dirty_ptds,
        pruned,
        pruned_ptds,
        None,
        (("forward", INPUTS),),
        emitter_filter.report(manager),
    )


BUILDER_CASES = (
    "dead_constant_shares_bytes_with_live_one",
    "two_methods_and_constant_method",
    "cond_constants_in_both_branches",
    "mutable_data_and_dead_constant",
)
NAMED_DATA_CASES = ("dead_named_data_in_pte", "dead_named_data_in_ptd", "opaque_delegate")
BUILT_CASES = ("plain", "external", "xnnpack", "mutated", "clean")
ALL_CASES = (*BUILT_CASES, *BUILDER_CASES, *NAMED_DATA_CASES)


@pytest.fixture(scope="module")
def cases(built, tmp_path_factory) -> dict[str, Files]:
    root = tmp_path_factory.mktemp("prune_file")
    result = {
        name: Files(
            b.pte, b.ptds, b.pruned_pte, b.pruned_ptds, None, (("forward", b.inputs),), b.report
        )
        for name, b in built.items()
    }
    result.update({name: _builder_case(name, root) for name in BUILDER_CASES})
    result.update({name: _named_data_case(name, root) for name in NAMED_DATA_CASES})
    return result


@pytest.fixture(scope="module")
def pruned_on_disk(cases, tmp_path_factory) -> dict[str, tuple[Path, tuple[Path, ...], object]]:
    """Every case pruned by `prune_file`: (pte, ptds written, report)."""
    root = tmp_path_factory.mktemp("pruned_on_disk")
    result = {}
    for name, files in cases.items():
        out = root / name
        out.mkdir()
        report = prune_file(files.dirty, out / "model.pte", files.dirty_ptds, out)
        result[name] = (out / "model.pte", tuple(sorted(out.glob("*.ptd"))), report)
    return result


def _digest(*paths: Path) -> list[str]:
    return [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]


def _deserialize(path: Path):
    from executorch.exir._serialize._program import deserialize_pte_binary

    return deserialize_pte_binary(path.read_bytes())


def _ptd_payload(path: Path):
    """(key -> (bytes, layout)) as ExecuTorch's own .ptd deserializer reads it."""
    from executorch.extension.flat_tensor.serialize.serialize import FlatTensorSerializer

    payload = FlatTensorSerializer().deserialize(path.read_bytes())
    return {
        key: (bytes(payload.buffers[entry.buffer_index]), entry.tensor_layout)
        for key, entry in payload.named_data.items()
    }


def _run(pte: Path, ptds: tuple[Path, ...], runs) -> list[list[torch.Tensor]]:
    from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer

    # The runtime owns neither buffer: keep both referenced while the module lives.
    pte_bytes = pte.read_bytes()
    ptd_bytes = ptds[0].read_bytes() if ptds else None
    module = _load_for_executorch_from_buffer(pte_bytes, ptd_bytes)
    outputs = [list(module.run_method(method, inputs)) for method, inputs in runs]
    del module
    return outputs


# --- the result is the in-process result ----------------------------------------------


@pytest.mark.parametrize("name", ALL_CASES)
def test_pruned_pte_is_byte_identical_to_the_in_process_result(cases, pruned_on_disk, name):
    pte, _, _ = pruned_on_disk[name]
    assert pte.read_bytes() == cases[name].pruned.read_bytes()


@pytest.mark.parametrize("name", BUILDER_CASES)
def test_pruned_pte_is_byte_identical_to_the_model_built_without_the_dead_constants(
    cases, pruned_on_disk, name
):
    assert pruned_on_disk[name][0].read_bytes() == cases[name].clean.read_bytes()


@pytest.mark.parametrize("name", ["external", "dead_named_data_in_ptd", "dead_named_data_in_pte"])
def test_executorch_reads_back_the_same_program_and_constant_bytes(cases, pruned_on_disk, name):
    ours = _deserialize(pruned_on_disk[name][0])
    theirs = _deserialize(cases[name].pruned)
    assert ours.program == theirs.program
    assert [b.storage for b in ours.program.constant_buffer] == [
        b.storage for b in theirs.program.constant_buffer
    ]
    assert ours.mutable_data == theirs.mutable_data
    ours_named = ours.named_data.pte_data if ours.named_data else {}
    theirs_named = theirs.named_data.pte_data if theirs.named_data else {}
    assert ours_named.keys() == theirs_named.keys()


@pytest.mark.parametrize("name", ["external", "dead_named_data_in_ptd"])
def test_pruned_ptd_is_byte_identical_to_the_in_process_ptd(cases, pruned_on_disk, name):
    _, ptds, _ = pruned_on_disk[name]
    assert [p.name for p in ptds] == [p.name for p in cases[name].pruned_ptds]
    for ours, theirs in zip(ptds, cases[name].pruned_ptds, strict=True):
        assert _ptd_payload(ours) == _ptd_payload(theirs)
        assert ours.read_bytes() == theirs.read_bytes()


# The opaque demo backend has no runtime.
RUNNABLE_CASES = tuple(name for name in ALL_CASES if name != "opaque_delegate")


@pytest.mark.parametrize("name", RUNNABLE_CASES)
def test_pruned_file_computes_bit_identical_outputs_in_the_runtime(cases, pruned_on_disk, name):
    pte, ptds, _ = pruned_on_disk[name]
    files = cases[name]
    expected = _run(files.dirty, files.dirty_ptds, files.runs)
    got = _run(pte, ptds, files.runs)
    assert len(got) == len(expected)
    for got_outputs, expected_outputs in zip(got, expected, strict=True):
        for g, e in zip(got_outputs, expected_outputs, strict=True):
            if isinstance(e, torch.Tensor):
                assert torch.equal(g, e)
            else:
                assert g == e


@pytest.mark.parametrize("name", ALL_CASES)
def test_audit_of_the_pruned_file_finds_no_dead_bytes(pruned_on_disk, name):
    pte, ptds, _ = pruned_on_disk[name]
    assert audit_file(pte, ptds).dead_bytes == 0


def test_report_lists_what_the_audit_of_the_input_found_dead(cases, pruned_on_disk):
    _, _, report = pruned_on_disk["plain"]
    audit = audit_file(cases["plain"].dirty)
    assert report.dropped == audit.dead
    assert sum(d.nbytes for d in report.dropped) == 148
    assert report.bytes_after == cases["plain"].pruned.stat().st_size


def _in_process_dropped_bytes(report) -> int:
    named = report.named_data.dropped_bytes if report.named_data is not None else 0
    return report.dropped_bytes + named


@pytest.mark.parametrize("name", ALL_CASES)
def test_audit_counts_exactly_the_bytes_both_prunes_drop(cases, pruned_on_disk, name):
    files = cases[name]
    audit = audit_file(files.dirty, files.dirty_ptds)
    assert audit.dead_bytes == _in_process_dropped_bytes(files.report)
    file_report = pruned_on_disk[name][2]
    assert sum(d.nbytes for d in file_report.dropped) == audit.dead_bytes
    assert file_report.dropped == audit.dead
    dead_keys = tuple(d.name for d in audit.dead if d.space == "named_data")
    assert dead_keys == file_report.dropped_named_data
    assert tuple(u.key for u in audit.kept_unprovable_named_data) == file_report.kept_unprovable


@pytest.mark.parametrize("name", NAMED_DATA_CASES)
def test_the_gate_fails_on_dead_named_data_and_passes_once_pruned(cases, capsys, name):
    files = cases[name]
    ptd_args = [a for p in files.dirty_ptds for a in ("--data", str(p))]
    dirty_code = main(["audit", str(files.dirty), *ptd_args, "--max-dead-bytes", "0"])
    pruned_ptd_args = [a for p in files.pruned_ptds for a in ("--data", str(p))]
    pruned_code = main(["audit", str(files.pruned), *pruned_ptd_args, "--max-dead-bytes", "0"])
    capsys.readouterr()
    dropped = files.report.named_data.dropped
    # The opaque demo backend may read any key: nothing is dead, nothing dropped.
    assert (dirty_code, pruned_code) == ((1, 0) if dropped else (0, 0))
    assert bool(dropped) == (name != "opaque_delegate")


def test_named_data_kept_for_an_opaque_delegate_is_listed_not_dead(cases):
    audit = audit_file(cases["opaque_delegate"].dirty)
    kept = cases["opaque_delegate"].report.named_data.kept_unprovable
    assert [u.key for u in audit.kept_unprovable_named_data] == [e.key for e in kept]
    assert [u.nbytes for u in audit.kept_unprovable_named_data] == [e.nbytes for e in kept]
    assert audit.spaces["named_data"].dead == 0


def test_dead_named_data_is_dropped_and_unprovable_named_data_kept(pruned_on_disk):
    assert pruned_on_disk["dead_named_data_in_pte"][2].dropped_named_data
    assert pruned_on_disk["dead_named_data_in_ptd"][2].dropped_named_data
    opaque = pruned_on_disk["opaque_delegate"][2]
    assert opaque.dropped_named_data == () and opaque.kept_unprovable


@pytest.mark.parametrize("name", ["dead_constant_shares_bytes_with_live_one", "external"])
def test_pruning_a_pruned_file_changes_nothing(pruned_on_disk, tmp_path, name):
    pte, ptds, _ = pruned_on_disk[name]
    report = prune_file(pte, tmp_path / "again.pte", ptds, tmp_path)
    assert (tmp_path / "again.pte").read_bytes() == pte.read_bytes()
    assert report.dropped == () and report.dropped_values == 0
    assert [p.read_bytes() for p in sorted(tmp_path.glob("*.ptd"))] == [
        p.read_bytes() for p in ptds
    ]


# --- safety ---------------------------------------------------------------------------


def test_input_files_are_not_modified(cases, tmp_path):
    files = cases["external"]
    before = _digest(files.dirty, *files.dirty_ptds)
    stats = [os.stat(p).st_mtime_ns for p in (files.dirty, *files.dirty_ptds)]
    prune_file(files.dirty, tmp_path / "out.pte", files.dirty_ptds, tmp_path)
    assert _digest(files.dirty, *files.dirty_ptds) == before
    assert [os.stat(p).st_mtime_ns for p in (files.dirty, *files.dirty_ptds)] == stats


def _copy(source: Path, directory: Path) -> Path:
    target = directory / source.name
    target.write_bytes(source.read_bytes())
    return target


def test_output_equal_to_the_input_is_refused_with_exit_2(cases, tmp_path, capsys):
    pte = _copy(cases["plain"].dirty, tmp_path)
    link = tmp_path / "link.pte"
    link.symlink_to(pte)
    before = _digest(pte)
    for argv in (
        ["prune", str(pte), "-o", str(pte)],
        ["prune", str(link), "-o", str(pte)],
        ["prune", str(pte), "-o", f"{tmp_path}/./{pte.name}"],
    ):
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and "never overwrites its input" in err
    assert _digest(pte) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.pte", pte.name]


def test_ptd_output_onto_its_input_is_refused(cases, tmp_path):
    files = cases["external"]
    ptd = _copy(files.dirty_ptds[0], tmp_path)
    with pytest.raises(OutputFileError, match="never overwrites its input"):
        prune_file(files.dirty, tmp_path / "out.pte", [ptd], tmp_path)
    assert not (tmp_path / "out.pte").exists()


def _listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_a_malformed_input_leaves_no_file(cases, tmp_path):
    bad = tmp_path / "bad.pte"
    bad.write_bytes(cases["plain"].dirty.read_bytes()[:300])
    with pytest.raises(PteFormatError, match="truncated"):
        prune_file(bad, tmp_path / "out.pte")
    assert _listing(tmp_path) == ["bad.pte"]


def test_a_failure_while_writing_leaves_no_file_and_the_old_output_in_place(
    cases, tmp_path, monkeypatch
):
    from emitter_filter.ondisk.write import stream

    files = cases["external"]
    out = tmp_path / "out.pte"
    out.write_bytes(b"previous")

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(stream.Writer, "copy", fail)
    with pytest.raises(OutputFileError, match="No space left on device"):
        prune_file(files.dirty, out, files.dirty_ptds, tmp_path)
    assert _listing(tmp_path) == ["out.pte"]
    assert out.read_bytes() == b"previous"


def test_an_unwritable_output_directory_exits_2_naming_the_output(cases, tmp_path, capsys):
    target = tmp_path / "missing" / "out.pte"
    assert main(["prune", str(cases["plain"].dirty), "-o", str(target)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"emitter-filter: {target}: cannot write")


# --- the command line -----------------------------------------------------------------


def test_cli_prune_writes_the_pruned_file_and_reports_it_as_json(cases, tmp_path, capsys):
    files = cases["external"]
    argv = [
        "prune",
        str(files.dirty),
        "-o",
        str(tmp_path / "out.pte"),
        "--json",
        *[a for p in files.dirty_ptds for a in ("--data", str(p))],
        "--ptd-out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert err == ""
    assert report["dropped_bytes"] == 148 and report["dropped_values"] == 2
    assert (tmp_path / "out.pte").read_bytes() == files.pruned.read_bytes()
    assert report["ptd_outputs"] == [
        {"path": str(files.dirty_ptds[0]), "output": str(tmp_path / files.dirty_ptds[0].name)}
    ]


def test_cli_prune_prints_a_one_line_summary(cases, tmp_path, capsys):
    assert main(["prune", str(cases["plain"].dirty), "-o", str(tmp_path / "o.pte")]) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.count("\n") == 1
    assert "1,876 -> 1,596 B; dropped 2 entries (148 B), 2 values, 0 named data in " in out


def test_cli_ptd_without_an_output_directory_is_a_usage_error(cases, tmp_path, capsys):
    files = cases["external"]
    code = main(
        [
            "prune",
            str(files.dirty),
            "-o",
            str(tmp_path / "o.pte"),
            "--data",
            str(files.dirty_ptds[0]),
        ]
    )
    assert code == 2 and "--data needs --ptd-out" in capsys.readouterr().err
    assert _listing(tmp_path) == []


def test_pruning_a_file_and_its_ptd_imports_neither_torch_nor_executorch(cases, tmp_path):
    files = cases["external"]
    code = (
        "import sys\n"
        "from emitter_filter.cli import main\n"
        f"argv = ['prune', {str(files.dirty)!r}, '-o', {str(tmp_path / 'o.pte')!r},"
        f" '--ptd', {str(files.dirty_ptds[0])!r}, '--ptd-out', {str(tmp_path)!r}]\n"
        "assert main(argv) == 0\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'executorch'))\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_prune_file_is_public():
    assert emitter_filter.prune_file is prune_file
    assert {"prune_file", "FilePruneReport", "OutputFileError"} <= set(emitter_filter.__all__)
