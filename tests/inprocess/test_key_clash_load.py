"""Two XNNPACK programs loaded side by side in one process, with XNNPACK's weights cache on.

The cache (off in the pip wheel; on in ExecuTorch's Android and Apple presets) packs each
named-data key once for every program of the process, and trusts the key: a second
program holding the key with other bytes computes with the first one's weights, and
nothing fails. That is the clash `audit --fail-on-key-clash` reports. `share`'s and
`merge`'s outputs of programs that agree on their keys compute, side by side with the
cache on, what each original computes alone with it off.

Each load is a fresh process (`bench/bench_ram.py --child`, which switches the cache on
through the backend option `weight_cache_enabled`): the cache lives as long as the process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from emitter_filter.cli import main
from emitter_filter.ondisk.merge import merge_files
from emitter_filter.ondisk.read.read_pte import read_pte
from emitter_filter.ondisk.share import share_files
from tests.model_sets import INPUT, SETS, export

_REPO = Path(__file__).resolve().parents[2]

# The bench switches XNNPACK's weights cache on through the wheel's own libraries
# (bench_ram.switch_weight_cache_on), which executorch 1.5's wheel ships and 1.4.1's does not.
_pybindings = pytest.importorskip("executorch.extension.pybindings.portable_lib")
if not (Path(_pybindings.__file__).parents[2] / "lib" / "libexecutorch.so").exists():
    pytest.skip(
        "this executorch wheel has no libexecutorch.so to switch XNNPACK's weights "
        "cache on with (1.5 has)",
        allow_module_level=True,
    )


def _run_side_by_side(programs: list[tuple[Path, Path | None, dict]], cache: bool) -> dict:
    """Each method's output digest, every program loaded in one fresh process."""
    spec = {
        "loader": "pybind",
        "cache": cache,
        "features": INPUT[0].shape[1],
        "programs": [
            {"pte": str(pte), "ptd": None if ptd is None else str(ptd), "methods": methods}
            for pte, ptd, methods in programs
        ],
    }
    done = subprocess.run(
        [sys.executable, str(_REPO / "bench" / "bench_ram.py"), "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        cwd=_REPO,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])["outputs"]


@pytest.fixture(scope="module")
def heads(tmp_path_factory):
    """Two heads on one backbone, exported to XNNPACK apart (equal backbone keys)."""
    root = tmp_path_factory.mktemp("heads")
    paths = []
    for name, model in zip("ab", SETS["heads"](), strict=True):
        paths.append(root / f"{name}.pte")
        paths[-1].write_bytes(export(model, "xnnpack"))
    return paths


def _with_other_bytes(path: Path, to: Path) -> Path:
    """`path` with the largest named-data entry's bytes changed, its key kept."""
    entry = max(read_pte(path).named_data, key=lambda e: e.nbytes)
    data = bytearray(path.read_bytes())
    for offset in range(entry.offset, entry.offset + entry.nbytes, 4):
        data[offset + 3] ^= 0x40  # every fp32 weight's exponent, so the output changes
    to.write_bytes(bytes(data))
    return to


def test_a_key_with_other_bytes_computes_with_the_first_programs_weights(heads, tmp_path):
    a = heads[0]
    other = _with_other_bytes(a, tmp_path / "other.pte")
    pair = [(a, None, {"a": "forward"}), (other, None, {"other": "forward"})]
    apart = _run_side_by_side(pair, cache=False)
    assert apart["a"] != apart["other"]
    cached = _run_side_by_side(pair, cache=True)
    assert cached["a"] == apart["a"]
    assert cached["other"] == apart["a"], "the cache gave `other` a's packed weights"
    assert main(["audit", str(a), str(other), "--fail-on-key-clash"]) == 1


def test_share_and_merge_outputs_compute_as_the_originals_side_by_side(heads, tmp_path):
    a, b = heads
    alone = _run_side_by_side(
        [(a, None, {"a": "forward"}), (b, None, {"b": "forward"})], cache=False
    )
    share_files([a, b], tmp_path / "share")
    shared = tmp_path / "share" / "shared.ptd"
    merge_files([a, b], tmp_path / "merged.pte", methods=["a=a.pte:forward", "b=b.pte:forward"])
    # All four programs in one process, one cache: every key they share has equal bytes.
    cached = _run_side_by_side(
        [
            (tmp_path / "share" / "a.pte", shared, {"shared a": "forward"}),
            (tmp_path / "share" / "b.pte", shared, {"shared b": "forward"}),
            (tmp_path / "merged.pte", None, {"merged a": "a", "merged b": "b"}),
        ],
        cache=True,
    )
    assert cached == {
        "shared a": alone["a"],
        "shared b": alone["b"],
        "merged a": alone["a"],
        "merged b": alone["b"],
    }
    assert main(["audit", str(a), str(b), "--fail-on-key-clash"]) == 0
