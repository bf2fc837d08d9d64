"""Time `audit_file` on a file with two same-size tensors that differ only in their last byte.

Run as a script (not collected by pytest). Builds, through upstream ExecuTorch, a
portable model with two live buffers of `--pair-mib` MiB each (equal but for the
last element) and one live table filling the file up to `--mib` MiB, in a
temporary directory; reads it once (so both runs see the page cache), then times
in one process, alternating, the duplicate search as it is (`audit_file`: a
byte-for-byte compare of the pair) and a baseline that hashes both copies
(sha256, what the search did before). Deletes everything afterwards.

    python bench/bench_audit_pair.py --mib 1024 --pair-mib 256 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time


def build_pte(path: str, total_mib: int, pair_mib: int) -> int:
    import torch
    from executorch.exir import to_edge

    pair = pair_mib * (1 << 20) // 4
    rest = max(1, (total_mib - 2 * pair_mib) * (1 << 20) // 4 - 7)

    class Pair(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            generator = torch.Generator().manual_seed(0)
            first = torch.rand(pair, generator=generator)
            second = first.clone()
            second[-1] += 1.0
            self.register_buffer("first", first)
            self.register_buffer("second", second)
            self.register_buffer("table", torch.rand(rest, generator=generator))

        def forward(self, x):
            return x + self.first[:1] + self.second[:1] + self.table[:1]

    exported = torch.export.export(Pair(), (torch.randn(1),))
    data = to_edge(exported).to_executorch().buffer
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def hash_both(path: str) -> None:
    """The old cost: the two same-size candidates each hashed in full."""
    from emitter_filter.ondisk.read.byte_source import ByteSource
    from emitter_filter.ondisk.read.read_pte import read_pte
    from emitter_filter.program.reachability import DataSpace

    pte = read_pte(path)
    sizes: dict[int, list] = {}
    for index, entry in pte.entries[DataSpace.CONSTANT].items():
        if index:
            sizes.setdefault(entry.nbytes, []).append(entry)
    with ByteSource(path) as source:
        for entries in sizes.values():
            if len(entries) > 1:
                for entry in entries:
                    source.sha256(entry.offset, entry.nbytes, "constant")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--pair-mib", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to build the file (default: tmp)")
    args = parser.parse_args()
    from emitter_filter.ondisk.audit import audit_file

    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        path = os.path.join(directory, "pair.pte")
        size = build_pte(path, args.mib, args.pair_mib)
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass
        times: dict[str, list[float]] = {"audit": [], "hash both": []}
        for _ in range(args.repeat):
            runs = (("audit", lambda: audit_file(path)), ("hash both", lambda: hash_both(path)))
            for name, run in runs:
                started = time.perf_counter()
                result = run()
                times[name].append(time.perf_counter() - started)
        assert result is None and audit_file(path).duplicated_bytes == 0
        print(f"file {size:,} B, pair {args.pair_mib} MiB each, {args.repeat} rounds (medians):")
        for name, values in times.items():
            print(f"  {name:10s} {statistics.median(values):.3f} s")
        ratio = statistics.median(times["audit"]) / statistics.median(times["hash both"])
        print(f"  audit / hash both: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
