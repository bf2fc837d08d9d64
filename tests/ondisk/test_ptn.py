"""`audit`, `explain` and `diff` of ExecuTorch native packages (`.ptn`), and every other
command's one line for one.

On the golden package (`tests/golden/ptn/two.ptn`, torch-free) and on one- and two-method
packages built here with `to_native` (those skip without executorch). Each byte of the zip
is a part; the constants' bytes are checked against the safetensors header read here.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import zipfile
from pathlib import Path

import pytest

from emitter_filter.cli import main
from emitter_filter.errors import PteFormatError
from emitter_filter.ondisk.ptn_report import diff_ptn, ptn_report
from emitter_filter.ondisk.read.read_ptn import is_ptn, read_ptn
from tests.native_packages import GOLDEN_PTN, write_ptn

pytestmark = pytest.mark.filetools


def _header(path: Path) -> dict:
    """The safetensors header of a package, read here on its own."""
    blob = zipfile.ZipFile(path).read("program.safetensors")
    (length,) = struct.unpack_from("<Q", blob)
    header = json.loads(blob[8 : 8 + length])
    header.pop("__metadata__", None)
    return header


def _check_exact(path: Path) -> dict:
    """Every byte of `path` in one part, in order; each constant as its header says."""
    document = ptn_report(path).to_json()
    parts = document["parts"]
    assert sum(p["nbytes"] for p in parts) == path.stat().st_size == document["total_bytes"]
    for before, after in zip(parts, parts[1:], strict=False):
        assert before["offset"] + before["nbytes"] == after["offset"]
    header = _header(path)
    constants = {p["name"]: p for p in parts if p["storage"] == "constant"}
    assert {k: v["data_offsets"][1] - v["data_offsets"][0] for k, v in header.items()} == {
        k: p["nbytes"] for k, p in constants.items()
    }
    data = path.read_bytes()
    blob = zipfile.ZipFile(path).read("program.safetensors")
    start = 8 + struct.unpack_from("<Q", blob)[0]
    for key, entry in header.items():
        first, last = entry["data_offsets"]
        part = constants[key]
        assert (
            data[part["offset"] : part["offset"] + part["nbytes"]]
            == blob[start + first : start + last]
        )
    return document


def test_every_byte_of_the_golden_package_is_one_part_and_each_constant_names_its_readers():
    document = _check_exact(GOLDEN_PTN)
    assert document["methods"] == ["forward", "double"]
    readers = {p["name"]: p["readers"] for p in document["parts"] if p["storage"] == "constant"}
    assert readers == {
        "linear.weight": ["forward", "double"],
        "linear.bias": ["forward", "double"],
        "offset": ["forward"],  # and as `shift`, its alias
        "_lifted_tensor_constant0": ["double"],
    }
    assert document["aliases"] == {"shift": "offset"}
    assert document["alias_saved_bytes"] == 4 * 4
    assert document["dead_bytes"] == document["duplicated_bytes"] == 0


def test_audit_and_explain_of_a_ptn_print_its_parts(capsys):
    assert main(["audit", str(GOLDEN_PTN), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == ptn_report(GOLDEN_PTN).to_json()
    assert main(["explain", str(GOLDEN_PTN)]) == 0
    out = capsys.readouterr().out
    assert "offset  read by forward  also as shift" in out
    assert f"{GOLDEN_PTN.stat().st_size:,}  total" in out
    assert main(["audit", str(GOLDEN_PTN)]) == 0
    assert "stored once (aliases.json): 1 key(s), 16 B not stored again" in capsys.readouterr().out


def _with_unread_constant(source: Path, target: Path, nbytes: int = 24) -> Path:
    """`source` with one more safetensors entry, `unread`, that no method reads."""
    with zipfile.ZipFile(source) as package:
        entries = {name: package.read(name) for name in package.namelist()}
    blob = entries["program.safetensors"]
    (length,) = struct.unpack_from("<Q", blob)
    header, data = json.loads(blob[8 : 8 + length]), blob[8 + length :]
    header["unread"] = {
        "dtype": "U8",
        "shape": [nbytes],
        "data_offsets": [len(data), len(data) + nbytes],
    }
    text = json.dumps(header).encode()
    entries["program.safetensors"] = struct.pack("<Q", len(text)) + text + data + b"\x07" * nbytes
    with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as package:
        for name, content in entries.items():
            package.writestr(name, content)
    return target


def test_a_constant_no_method_reads_is_dead_and_fails_max_dead_bytes(tmp_path, capsys):
    path = _with_unread_constant(GOLDEN_PTN, tmp_path / "unread.ptn")
    document = _check_exact(path)
    assert document["dead_bytes"] == 24
    assert main(["audit", str(path), "--max-dead-bytes", "0"]) == 1
    captured = capsys.readouterr()
    assert "dead 'unread': 24 B" in captured.out
    assert "24 dead bytes > --max-dead-bytes 0" in captured.err


def test_diff_of_two_packages_accounts_for_every_byte(tmp_path, capsys):
    grown = _with_unread_constant(GOLDEN_PTN, tmp_path / "grown.ptn", 1000)
    result = diff_ptn(GOLDEN_PTN, grown)
    assert (
        sum(c.delta for c in result.changes)
        == result.delta
        == (grown.stat().st_size - GOLDEN_PTN.stat().st_size)
    )
    assert [(c.kind, c.name, c.delta) for c in result.changes if c.storage == "constant"] == [
        ("added", "unread", 1000)
    ]
    assert main(["diff", str(GOLDEN_PTN), str(grown), "--max-growth", "10%"]) == 1
    assert "added constant unread" in capsys.readouterr().err
    assert main(["diff", str(GOLDEN_PTN), str(GOLDEN_PTN), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["changes"] == []


@pytest.mark.parametrize(
    "argv",
    [
        ["prune", "{ptn}", "-o", "{out}"],
        ["prune", "{ptn}", "--dedupe", "-o", "{out}"],
        ["split", "{ptn}", "--method", "forward", "-o", "{out}"],
        ["merge", "{ptn}", "{ptn}", "--prefix", "b_={ptn}", "-o", "{out}"],
        ["share", "{ptn}", "--out", "{dir}"],
        ["verify", "{ptn}", "{ptn}"],
        ["budget", "write", "{ptn}", "-o", "{out}"],
    ],
    ids=["prune", "dedupe", "split", "merge", "share", "verify", "budget"],
)
def test_a_command_that_needs_a_pte_names_the_ptn_format(argv, tmp_path, capsys):
    args = [
        a.format(ptn=GOLDEN_PTN, out=tmp_path / "out.pte", dir=tmp_path / "shared") for a in argv
    ]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "is an ExecuTorch native (.ptn) package" in err, err
    assert "audit, explain and diff read it" in err
    assert "Traceback" not in err and not (tmp_path / "out.pte").exists()
    assert not (tmp_path / "shared").exists() or not any((tmp_path / "shared").iterdir())


def test_a_ptn_beside_a_pte_or_with_pte_options_is_one_usage_line(tmp_path, capsys):
    pte = next((Path(__file__).parent.parent / "golden" / "plain").glob("dirty/*.pte"))
    assert main(["audit", str(GOLDEN_PTN), str(pte)]) == 2
    assert "is not a .ptn package" in capsys.readouterr().err
    assert main(["explain", str(GOLDEN_PTN), "--html", str(tmp_path / "x.html")]) == 2
    assert "--html is for a .pte" in capsys.readouterr().err


def _rewritten(target: Path, change) -> Path:
    """The golden package with `change` applied to its entries' bytes, zipped again."""
    with zipfile.ZipFile(GOLDEN_PTN) as package:
        entries = {name: package.read(name) for name in package.namelist()}
    change(entries)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as package:
        for name, content in entries.items():
            package.writestr(name, content)
    return target


def _long_header(entries: dict) -> None:
    entries["program.safetensors"] = struct.pack("<Q", 1 << 40) + entries["program.safetensors"][8:]


def _bad_alias(entries: dict) -> None:
    entries["aliases.json"] = b'{"shift": "nowhere"}'


def _not_a_graph(entries: dict) -> None:
    entries["program.ptg"] = b"\x08\x00\x00\x00XXXX" + bytes(8)


def _bad_crc(path: Path) -> None:
    data = bytearray(GOLDEN_PTN.read_bytes())
    data[-300] ^= 0xFF  # a byte of the constants, not of the zip's directory
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_long_header, "header of 1099511627776 bytes"),
        (_bad_alias, "aliases of keys not stored: ['nowhere']"),
        (_not_a_graph, "flatbuffer identifier b'XXXX', expected b'NPTG'"),
        (None, "Bad CRC-32"),
    ],
    ids=["safetensors-header", "alias", "graph", "crc"],
)
def test_a_broken_package_is_one_line(change, message, tmp_path, capsys):
    broken = tmp_path / "broken.ptn"
    if change is None:
        _bad_crc(broken)
    else:
        _rewritten(broken, change)
    assert is_ptn(broken)
    with pytest.raises(PteFormatError, match=re.escape(message)):
        read_ptn(broken)
    assert main(["audit", str(broken)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


@pytest.mark.parametrize("methods", [1, 2], ids=["one-method", "two-methods"])
def test_packages_built_with_to_native_are_read_exactly(methods, tmp_path):
    pytest.importorskip("executorch.exir.native")
    path = write_ptn(tmp_path / f"{methods}.ptn", methods)
    document = _check_exact(path)
    assert document["methods"] == ["forward", "double"][:methods]
    assert document["aliases"] == {"shift": "offset"}
    readers = {p["name"]: p["readers"] for p in document["parts"] if p["storage"] == "constant"}
    assert readers["linear.weight"] == ["forward", "double"][:methods]
    copy = tmp_path / "copy.ptn"
    shutil.copyfile(path, copy)
    assert diff_ptn(path, copy).changes == ()
