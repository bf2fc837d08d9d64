"""What an app holds in RAM with two programs as separate files, `share`d, `merge`d or exported together.

Run as a script (not collected by pytest). Builds two programs that share a
backbone of `--mib` MiB of fp32 weights and each have a head of their own, both
named `head` (as separate exports name them), portable and lowered to XNNPACK.
Then arranges them four ways:

- `files`: the two `.pte` files as exported;
- `share`: `emitter-filter share` of them (two `.pte` and one `shared.ptd`);
- `merge`: `emitter-filter merge` of them (one `.pte`, methods `a` and `b`);
- `multimethod`: ExecuTorch's own multi-method export (`to_edge({"a": ..., "b": ...})`).

Each arrangement is loaded in fresh processes, by the pybindings'
`_load_for_executorch(path, data_path)` (`pybind`) and by `executorch.runtime`'s
`Runtime.load_program(path, data_path=)` (`runtime`), each method loaded and run
once and everything held; XNNPACK also with its weights cache on (`cache`). A
process reads `/proc/self/status` (RssAnon, RssFile, VmHWM) and
`/proc/self/smaps_rollup` (Pss) when done; the figures are medians over
`--repeat` processes, less the median of a baseline process per loader that
imports the same modules (and switches the cache alike) and loads nothing. Every
method's output must be equal, bit for bit, in every arrangement and loader of a
backend, or the script exits 1. No timing is reported: RSS does not depend on
the machine's load, times do.

XNNPACK's weights cache: executorch 1.5.1's pip wheel compiles it in
(`XnnpackBackendOptions`) but leaves it off; an app switches it on with the
backend option `weight_cache_enabled` (`executorch::runtime::set_option(
"XnnpackBackend", ...)`), which the Python bindings do not expose. The child calls
the exported `XnnpackBackend::set_option` through ctypes on the backend that
`get_backend_class("XnnpackBackend")` returns, before loading anything.

What the installed release cannot do is left out, with the reason in the report
(`not_measured`) and under the table: executorch 1.4.1's wheel has no
`libexecutorch.so` to call `get_backend_class` in (no weights-cache rows), and its
`Runtime.load_program` takes no `data_path` (no `Runtime` row for `share`, whose
programs read a `.ptd`).

A loading process imports `portable_lib` without running `executorch.exir`'s
package `__init__` (an app loads, it does not export): about 4 s of CPU per process
instead of 11 on this project's machine, and the baseline process does the same.

    python bench/bench_ram.py --out bench-out        # 24 MiB backbone, 5 processes each
    python bench/bench_ram.py --out bench-out --quick  # 8 MiB, 1 process each
    python -m bench --results bench-out/results.json --out bench-out  # the page shows ram.json
"""

from __future__ import annotations

import argparse
import concurrent.futures
import ctypes
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

RAM_SCHEMA = "emitter-filter-bench-ram/1"
_MIB = float(1 << 20)
_WIDTH = 1024  # a backbone layer: 1024 x 1024 fp32 = 4 MiB
_HEADS = {"a": 16, "b": 8}  # two heads named alike with different shapes, as separate exports have
_ARRANGEMENTS = ("files", "share", "merge", "multimethod")
_LOADERS = ("pybind", "runtime")
#: The figures of a process, from /proc: name -> (file, field).
_FIELDS = {
    "anon": ("status", "RssAnon"),
    "file": ("status", "RssFile"),
    "pss": ("smaps_rollup", "Pss"),
    "peak": ("status", "VmHWM"),
}


# -- the loading side: one process, one arrangement --------------------------------------


def _import_runtime():
    """portable_lib without `executorch.exir`'s package init, which only exporters need."""
    import importlib.util
    import types

    spec = importlib.util.find_spec("executorch")
    exir = types.ModuleType("executorch.exir")
    exir.__path__ = [os.path.join(spec.submodule_search_locations[0], "exir")]
    sys.modules.setdefault("executorch.exir", exir)
    import executorch.extension.pybindings.portable_lib as portable_lib
    import executorch.runtime

    return portable_lib, executorch.runtime


def _library_path(portable_lib, name: str) -> str:
    """Where the wheel keeps the ExecuTorch library `name` (executorch/lib/)."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(portable_lib.__file__)))
    return os.path.join(package, "lib", name)


def _library(portable_lib, name: str) -> ctypes.CDLL:
    """The already loaded ExecuTorch library `name` (dlopen of a loaded path returns it)."""
    return ctypes.CDLL(_library_path(portable_lib, name), mode=ctypes.RTLD_GLOBAL)


class _BackendOption(ctypes.Structure):
    """`executorch::runtime::BackendOption`: char key[64]; variant<bool, int, char[256]>."""

    _fields_ = [
        ("key", ctypes.c_char * 64),
        ("value", ctypes.c_char * 256),
        ("index", ctypes.c_ubyte),
    ]


class _Span(ctypes.Structure):
    _fields_ = [("data", ctypes.POINTER(_BackendOption)), ("length", ctypes.c_size_t)]


def cannot_measure(portable_lib, runtime) -> dict[str, str]:
    """What this release's Python side cannot do, by what it rules out, with why."""
    import inspect

    found = {}
    if not os.path.exists(_library_path(portable_lib, "libexecutorch.so")):
        found["weights_cache"] = (
            "this wheel has no executorch/lib/libexecutorch.so (executorch 1.5 ships one) "
            "whose get_backend_class finds the backend to switch XNNPACK's weights cache on"
        )
    if "data_path" not in inspect.signature(runtime.Runtime.load_program).parameters:
        found["runtime_ptd"] = (
            "this release's Runtime.load_program takes no data_path (1.5 added it): "
            "the runtime loader cannot read share's .ptd"
        )
    return found


def switch_weight_cache_on(portable_lib) -> None:
    """Sets XNNPACK's `weight_cache_enabled` backend option, as an app's C++ would."""
    core = _library(portable_lib, "libexecutorch.so")
    xnnpack = _library(portable_lib, "libexecutorch_backend_xnnpack.so")
    get_backend_class = core["_ZN10executorch7runtime17get_backend_classEPKc"]
    get_backend_class.restype = ctypes.c_void_p
    get_backend_class.argtypes = [ctypes.c_char_p]
    backend = get_backend_class(b"XnnpackBackend")
    if not backend:
        raise RuntimeError("no XnnpackBackend registered")
    set_option = xnnpack[
        "_ZN10executorch8backends14XnnpackBackend10set_optionERNS_7runtime"
        "20BackendOptionContextERKNS2_4SpanINS2_13BackendOptionEEE"
    ]
    set_option.restype = ctypes.c_int
    set_option.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(_Span)]
    option = _BackendOption(key=b"weight_cache_enabled", index=0)  # index 0: the bool
    option.value = b"\x01"
    context = ctypes.create_string_buffer(8)  # BackendOptionContext: an empty class
    span = _Span(ctypes.pointer(option), 1)
    error = set_option(backend, ctypes.addressof(context), ctypes.byref(span))
    if error != 0:
        raise RuntimeError(f"XnnpackBackend::set_option(weight_cache_enabled) returned {error}")


def _proc_figures() -> dict[str, int]:
    files = {}
    for name in ("status", "smaps_rollup"):
        with open(f"/proc/self/{name}") as f:
            files[name] = {line.split(":")[0]: line.split()[1:] for line in f}
    return {
        figure: int(files[source][field][0]) * 1024 for figure, (source, field) in _FIELDS.items()
    }


def _input(torch, features: int = _WIDTH):
    return (torch.randn(2, features, generator=torch.Generator().manual_seed(7)),)


def run_child(spec: dict) -> dict:
    """Loads and runs every method of `spec["programs"]`, holds them all, reads /proc.

    `spec`: {"loader": "pybind" | "runtime", "cache": bool, "programs": [{"pte", "ptd",
    "methods": {name: method}}], "features": the input's width (default the backbone's)};
    the result: {"figures": `_FIELDS`' figures, "outputs": sha256 of each method's outputs}.
    """
    portable_lib, runtime = _import_runtime()
    import torch

    if spec["cache"]:
        switch_weight_cache_on(portable_lib)
    held, outputs = [], {}
    inputs = _input(torch, spec.get("features", _WIDTH))
    for program in spec["programs"]:
        if spec["loader"] == "pybind":
            data = {"data_path": program["ptd"]} if program["ptd"] else {}
            module = portable_lib._load_for_executorch(program["pte"], **data)
            held.append(module)
            for name, method in program["methods"].items():
                result = module.run_method(method, inputs)
                held.append(result)
                outputs[name] = _digest(result)
        else:
            data = {"data_path": program["ptd"]} if program["ptd"] else {}
            loaded = runtime.Runtime.get().load_program(program["pte"], **data)
            held.append(loaded)
            for name, method_name in program["methods"].items():
                method = loaded.load_method(method_name)
                result = method.execute(inputs)
                held += [method, result]
                outputs[name] = _digest(result)
    return {"figures": _proc_figures(), "outputs": outputs}


def _digest(outputs) -> str:
    return hashlib.sha256(b"".join(t.contiguous().numpy().tobytes() for t in outputs)).hexdigest()


# -- the building side ------------------------------------------------------------------


def _models(mib: float):
    import torch

    layers = max(1, round(mib * _MIB / (_WIDTH * _WIDTH * 4)))
    torch.manual_seed(0)
    backbone = torch.nn.Sequential(
        *(
            torch.nn.Sequential(torch.nn.Linear(_WIDTH, _WIDTH, bias=False), torch.nn.ReLU())
            for _ in range(layers)
        )
    )

    class WithHead(torch.nn.Module):
        def __init__(self, outputs: int) -> None:
            super().__init__()
            self.backbone = backbone
            self.head = torch.nn.Linear(_WIDTH, outputs)

        def forward(self, x):
            return self.head(self.backbone(x))

    return {name: WithHead(outputs).eval() for name, outputs in _HEADS.items()}, layers


def build(directory: str, mib: float) -> dict:
    """Writes every arrangement of both backends; returns what each process loads."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge, to_edge_transform_and_lower

    models, layers = _models(mib)
    with torch.no_grad():
        exported = {name: torch.export.export(m, _input(torch)) for name, m in models.items()}
    lower = {
        "portable": to_edge,
        "xnnpack": lambda p: to_edge_transform_and_lower(p, partitioner=[XnnpackPartitioner()]),
    }
    cli = [sys.executable, "-m", "emitter_filter"]
    plans, sizes = {}, {}
    for backend, to_edge_of in lower.items():
        base = os.path.join(directory, backend)
        os.makedirs(base)
        files = {}
        for name, program in exported.items():
            files[name] = os.path.join(base, f"{name}.pte")
            with open(files[name], "wb") as f:
                to_edge_of(program).to_executorch().write_to_file(f)
        together = os.path.join(base, "multimethod.pte")
        with open(together, "wb") as f:
            to_edge_of(dict(exported)).to_executorch().write_to_file(f)
        shared = os.path.join(base, "share")
        subprocess.run(
            [*cli, "share", *files.values(), "--out", shared], check=True, capture_output=True
        )
        merged = os.path.join(base, "merged.pte")
        subprocess.run(
            [
                *cli,
                "merge",
                *files.values(),
                "-o",
                merged,
                *(f"--method={n}={p}:forward" for n, p in files.items()),
            ],
            check=True,
            capture_output=True,
        )
        shared_ptd = os.path.join(shared, "shared.ptd")
        plans[backend] = {
            "files": [_program(files[n], None, {n: "forward"}) for n in _HEADS],
            "share": [
                _program(os.path.join(shared, f"{n}.pte"), shared_ptd, {n: "forward"})
                for n in _HEADS
            ],
            "merge": [_program(merged, None, {n: n for n in _HEADS})],
            "multimethod": [_program(together, None, {n: n for n in _HEADS})],
        }
        sizes[backend] = {
            arrangement: _disk_bytes(programs) for arrangement, programs in plans[backend].items()
        }
    backbone_bytes = layers * _WIDTH * _WIDTH * 4
    return {"plans": plans, "disk_bytes": sizes, "backbone_bytes": backbone_bytes}


def _program(pte: str, ptd: str | None, methods: dict) -> dict:
    return {"pte": pte, "ptd": ptd, "methods": methods}


def _disk_bytes(programs: list[dict]) -> int:
    paths = {p["pte"] for p in programs} | {p["ptd"] for p in programs if p["ptd"]}
    return sum(os.path.getsize(p) for p in paths)


# -- measuring --------------------------------------------------------------------------


def _flavours() -> list[tuple[str, str, bool]]:
    """(backend, loader, weights cache on) for every column of the table."""
    return [("portable", loader, False) for loader in _LOADERS] + [
        ("xnnpack", loader, cache) for cache in (False, True) for loader in _LOADERS
    ]


def _spawn(spec: dict) -> dict:
    done = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"a loading process failed ({spec}):\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def _ruled_out(loader: str, cache: bool, programs: list[dict], cannot: dict) -> bool:
    if cache and "weights_cache" in cannot:
        return True
    return loader == "runtime" and "runtime_ptd" in cannot and any(p["ptd"] for p in programs)


def measure(built: dict, repeat: int, jobs: int, cannot: dict) -> list[dict]:
    """Every flavour and arrangement this release can load, `repeat` fresh processes each,
    baselines included."""
    specs = []
    for backend, loader, cache in _flavours():
        for arrangement in (None, *_ARRANGEMENTS):
            programs = [] if arrangement is None else built["plans"][backend][arrangement]
            if arrangement is None and backend == "xnnpack" and not cache:
                continue  # the same process as portable's baseline
            if _ruled_out(loader, cache, programs, cannot):
                continue
            specs += [
                {
                    "backend": backend,
                    "loader": loader,
                    "cache": cache,
                    "arrangement": arrangement,
                    "programs": programs,
                }
            ] * repeat
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        runs = list(pool.map(_spawn, specs))
    return [{**spec, **run} for spec, run in zip(specs, runs, strict=True)]


def summarize(runs: list[dict], built: dict) -> list[dict]:
    """One row per flavour and arrangement measured: medians above the flavour's baseline."""

    def median(selected, figure):
        return statistics.median(r["figures"][figure] for r in selected)

    rows = []
    for backend, loader, cache in _flavours():
        base = [
            r
            for r in runs
            if r["arrangement"] is None and r["loader"] == loader and r["cache"] == cache
        ]
        for arrangement in _ARRANGEMENTS:
            selected = [
                r
                for r in runs
                if (r["backend"], r["loader"], r["cache"], r["arrangement"])
                == (backend, loader, cache, arrangement)
            ]
            if not selected:
                continue
            rows.append(
                {
                    "backend": backend,
                    "loader": loader,
                    "weights_cache": cache,
                    "arrangement": arrangement,
                    "processes": len(selected),
                    "disk_bytes": built["disk_bytes"][backend][arrangement],
                    **{
                        f"{figure}_bytes": median(selected, figure) - median(base, figure)
                        for figure in _FIELDS
                    },
                    "rss_bytes": (median(selected, "anon") + median(selected, "file"))
                    - (median(base, "anon") + median(base, "file")),
                }
            )
    return rows


def check_outputs(runs: list[dict]) -> dict[str, bool]:
    """Per backend: does every method compute the same bytes in every arrangement and loader?"""
    equal = {}
    for backend in ("portable", "xnnpack"):
        digests = {}
        for run in runs:
            if run["backend"] == backend:
                for name, digest in run["outputs"].items():
                    digests.setdefault(name, set()).add(digest)
        equal[backend] = all(len(found) == 1 for found in digests.values())
    return equal


def _mib(value: int) -> str:
    return f"{value / _MIB:.1f}"


#: The table's columns: (header, row -> cell).
COLUMNS = (
    ("backend", lambda r: r["backend"] + (" + weights cache" if r["weights_cache"] else "")),
    ("loader", lambda r: r["loader"]),
    ("arrangement", lambda r: r["arrangement"]),
    ("disk MiB", lambda r: _mib(r["disk_bytes"])),
    ("RSS MiB", lambda r: _mib(r["rss_bytes"])),
    ("anon MiB", lambda r: _mib(r["anon_bytes"])),
    ("file MiB", lambda r: _mib(r["file_bytes"])),
    ("PSS MiB", lambda r: _mib(r["pss_bytes"])),
    ("peak MiB", lambda r: _mib(r["peak_bytes"])),
)


def table_rows(rows: list[dict]) -> list[list[str]]:
    return [[cell(row) for _, cell in COLUMNS] for row in rows]


def format_table(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(h for h, _ in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cells) + " |" for cells in table_rows(rows)]
    return "\n".join(lines)


def load_ram(path) -> dict:
    """A `ram.json` this script wrote; ValueError if it is not one."""
    with open(path) as f:
        report = json.load(f)
    if not isinstance(report, dict) or report.get("schema") != RAM_SCHEMA:
        raise ValueError(f"{path}: not a {RAM_SCHEMA} report")
    return report


def describe(report: dict) -> str:
    """The line above the table: what was measured, how, where."""
    equal = ", ".join(
        f"{backend} {'yes' if ok else 'NO'}" for backend, ok in report["outputs_equal"].items()
    )
    missing = "".join(f"; not measured: {why}" for why in report.get("not_measured", {}).values())
    return (
        f"two programs sharing a {_mib(report['backbone_bytes'])} MiB fp32 backbone; "
        f"MiB above a baseline process, medians of {report['repeat']} fresh processes; "
        f"{report['machine']}; "
        + ", ".join(f"{k} {v}" for k, v in report["versions"].items())
        + f"; outputs equal across arrangements and loaders: {equal}"
        + missing
    )


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in ("torch", "executorch")}


def _machine() -> str:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    return f"{platform.machine()}, {os.cpu_count()} cores, {memory:.0f} GiB, {platform.system()}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[1:]),
    )
    parser.add_argument("--out", metavar="DIR", help="write DIR/ram.json (the page reads it)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="an 8 MiB backbone, one process each (2.4 min of CPU here)",
    )
    parser.add_argument("--mib", type=float, help="the backbone's size (default 24; 8 --quick)")
    parser.add_argument("--repeat", type=int, help="processes per figure (default 5; 1 --quick)")
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="processes at once (default 1: PSS "
        "counts the pages another process maps, so more skews it)",
    )
    parser.add_argument(
        "--dir",
        default=None,
        help="build there and keep the programs (default: a /tmp dir, removed after)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.child:
        print(json.dumps(run_child(json.loads(options.child))))
        return 0
    mib = options.mib or (8.0 if options.quick else 24.0)
    repeat = options.repeat or (1 if options.quick else 5)

    if options.dir:
        os.makedirs(options.dir, exist_ok=True)
    workdir = options.dir or tempfile.mkdtemp(prefix="ef-bench-ram-")
    try:
        built = build(workdir, mib)
        # After the build: `_import_runtime`'s stand-in for executorch.exir is for loaders.
        import executorch.extension.pybindings.portable_lib as portable_lib
        import executorch.runtime

        cannot = cannot_measure(portable_lib, executorch.runtime)
        for why in cannot.values():
            print(f"bench_ram: not measured: {why}", file=sys.stderr)
        runs = measure(built, repeat, options.jobs, cannot)
    finally:
        if not options.dir:
            shutil.rmtree(workdir)
    rows = summarize(runs, built)
    equal = check_outputs(runs)
    report = {
        "schema": RAM_SCHEMA,
        "machine": _machine(),
        "versions": _versions(),
        "backbone_bytes": built["backbone_bytes"],
        "repeat": repeat,
        "outputs_equal": equal,
        "not_measured": cannot,
        "rows": rows,
    }
    print(describe(report))
    print(format_table(rows))
    if options.out:
        os.makedirs(options.out, exist_ok=True)
        path = os.path.join(options.out, "ram.json")
        with open(path, "w") as f:
            json.dump(report, f, indent=2)
        print(f"wrote {path}", file=sys.stderr)
    return 0 if all(equal.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
