"""What deduplication costs and saves on a SmolLM-135M-shaped model that optimum-executorch exports.

Run as a script: it holds no tests (`python -m bench` collects nothing from it).
Builds a LlamaConfig with SmolLM-135M's shape (hidden 576, intermediate 1536, 30
layers, 9 heads, 3 KV heads, vocab 49152, tied embeddings; fp32, random weights:
nothing is downloaded) and saves it with `save_pretrained` into a temporary
directory. Its tied weight is stored twice in the export: once as the embedding's
constant, once as XNNPACK's named data for lm_head. No tokenizer: the
text-generation export does not read one.

1. Exports it as `optimum-cli export executorch --task text-generation --recipe
   xnnpack` does (optimum's `main_export`, called in the child so that it can time
   `EdgeProgramManager.to_executorch`), each export in a fresh process, alternating,
   `--repeat` rounds: `EMITTER_FILTER_PRUNE=1` (pruning only) against
   `EMITTER_FILTER_PRUNE=1 EMITTER_FILTER_DEDUPE=1`. For each: the `.pte` size,
   the wall time of the process, the time of `to_executorch` in it, the hook's own
   seconds (`emitter_filter.report(manager)`: prune, and dedupe), and the peak RSS
   of the process (`os.wait4` of that child alone).
2. On disk, the pruning-only export: `emitter-filter prune --dedupe` against `cp`
   (whole commands, start-up included, page cache warm, alternating), and
   `emitter-filter prune` alone for reference; peak RSS of each. Checks that
   `prune --dedupe` writes the bytes the in-process dedupe wrote.
3. Prints a table of medians; `--json` writes the figures.

It measures the emitter_filter the environment imports: install this repository
editable, so that the run measures the tree as it is. In a venv of its own (torch
pinned first: an unpinned torch makes pip fetch a multi-GB CUDA build):

    pip install torch==2.13.0
    pip install -e . executorch==1.5.1 -c constraints/executorch-1.5.1.txt
    pip install optimum-executorch==1.1.0 -c constraints/executorch-1.5.1.txt

(optimum-executorch 1.1.0 brings transformers 5.0.0rc1, optimum 2.0.0 and
accelerate, and keeps torch 2.13.0 and executorch 1.5.1.) Then:

    python bench/bench_smollm.py                      # 2 rounds: 20 minutes on 2 cores
    python bench/bench_smollm.py --repeat 3 --json smollm.json --keep smollm-files
    python bench/bench_smollm.py --layers 2 --repeat 1   # a quick check of the script
"""

from __future__ import annotations

import argparse
import filecmp
import importlib.metadata
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

_MODES = {
    "prune": {"EMITTER_FILTER_PRUNE": "1"},
    "dedupe": {"EMITTER_FILTER_PRUNE": "1", "EMITTER_FILTER_DEDUPE": "1"},
}
_PACKAGES = ("torch", "executorch", "transformers", "optimum-executorch", "emitter_filter")


def build_model(directory: str, layers: int) -> None:
    """Child: saves SmolLM-135M's shape with random fp32 weights (seeded) to `directory`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=layers,
        num_attention_heads=9,
        num_key_value_heads=3,
        vocab_size=49152,
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=0,
        eos_token_id=0,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.float32).save_pretrained(directory)


def export(model: str, out: str) -> dict:
    """Child: optimum's xnnpack export of `model`, `to_executorch` timed, the hook's report read."""
    from executorch.exir.program._program import EdgeProgramManager
    from optimum.exporters.executorch import main_export

    import emitter_filter

    spent: list[float] = []
    to_executorch = EdgeProgramManager.to_executorch

    def timed(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return to_executorch(self, *args, **kwargs)
        finally:
            spent.append(time.perf_counter() - started)

    EdgeProgramManager.to_executorch = timed
    started = time.perf_counter()
    programs = main_export(model, task="text-generation", recipe="xnnpack", output_dir=out)
    seconds = time.perf_counter() - started
    report = emitter_filter.report(programs["model"])
    return {
        "main_export_seconds": seconds,
        "to_executorch_seconds": sum(spent),
        "prune_seconds": report.seconds,
        "dedupe_seconds": report.dedupe.seconds if report.dedupe else None,
        "dedupe_saved_bytes": report.dedupe.saved_bytes if report.dedupe else None,
        "dedupe_skipped": report.dedupe_skipped,
        "prune_skipped": report.skipped,
        "emitter_filter": os.path.dirname(emitter_filter.__file__),
    }


def run_child(options) -> int:
    """The `--child` side: one step in this process, its figures as JSON in `--result`."""
    if options.child == "build":
        build_model(options.model, options.layers)
        figures = {}
    else:
        figures = export(options.model, options.out)
    with open(options.result, "w") as f:
        json.dump(figures, f)
    return 0


def measure(argv: list[str], log: str, env: dict | None = None) -> dict:
    """Wall seconds, exit code and peak RSS (KiB) of one command, output to `log`.

    `os.wait4` gives the rusage of that child alone; this process stays small (it
    imports no torch), so the child's peak, which counts the memory it forked from,
    is its own."""
    with open(log, "ab") as output:
        started = time.perf_counter()
        process = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    return {"seconds": seconds, "code": process.returncode, "peak_rss_kib": usage.ru_maxrss}


def child_env(mode: str | None) -> dict:
    """This environment, offline, with only `mode`'s emitter_filter variables set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMITTER_FILTER_")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", **_MODES.get(mode, {}))
    return env


def run_step(workdir: str, name: str, step: list[str], env: dict) -> dict:
    """Runs this script with `--child` and `step`: its measure and its JSON. Exits on failure."""
    log = os.path.join(workdir, f"{name}.log")
    result = os.path.join(workdir, f"{name}.json")
    argv = [sys.executable, os.path.abspath(__file__), *step, "--result", result]
    measured = measure(argv, log, env)
    if measured["code"] != 0:
        with open(log, errors="replace") as f:
            tail = f.read()[-3000:]
        sys.exit(f"{name} failed (exit {measured['code']}); end of its log:\n{tail}")
    with open(result) as f:
        return {**measured, **json.load(f)}


def export_rounds(workdir: str, model: str, repeat: int) -> dict[str, list[dict]]:
    """`repeat` rounds of both exports, each in a fresh process, the order alternating."""
    runs: dict[str, list[dict]] = {mode: [] for mode in _MODES}
    for number in range(repeat):
        order = list(_MODES) if number % 2 == 0 else list(reversed(_MODES))
        for mode in order:
            name = f"{mode}{number}"
            out = os.path.join(workdir, name)
            step = ["--child", "export", "--model", model, "--out", out]
            figures = run_step(workdir, name, step, child_env(mode))
            figures["pte"] = os.path.join(out, "model.pte")
            figures["pte_bytes"] = os.path.getsize(figures["pte"])
            if mode == "dedupe" and figures["dedupe_seconds"] is None:
                sys.exit(f"{name}: the hook did not deduplicate: {figures['dedupe_skipped']}")
            runs[mode].append(figures)
            print(f"  {name}: {figures['seconds']:.1f} s, {figures['pte_bytes']:,} B", flush=True)
    return runs


def disk_rounds(workdir: str, plain: str, repeat: int) -> dict[str, list[dict]]:
    """`cp`, `prune --dedupe` and `prune` of the pruning-only export, alternating, cache warm."""
    cli = [sys.executable, "-m", "emitter_filter"]
    target = os.path.join(workdir, "disk-out.pte")
    commands = {
        "cp": ["cp", plain, target],
        "prune --dedupe": [*cli, "prune", plain, "-o", target, "--dedupe"],
        "prune": [*cli, "prune", plain, "-o", target],
    }
    log = os.path.join(workdir, "disk.log")
    measure(commands["cp"], log, child_env(None))  # warms the page cache for all alike
    runs: dict[str, list[dict]] = {name: [] for name in commands}
    for number in range(repeat):
        order = list(commands) if number % 2 == 0 else list(reversed(commands))
        for name in order:
            os.unlink(target)
            runs[name].append(measure(commands[name], log, child_env(None)))
            if runs[name][-1]["code"] != 0:
                sys.exit(f"{' '.join(commands[name])} failed; see {log}")
    os.unlink(target)
    return runs


def disk_dedupe(workdir: str, plain: str) -> tuple[str, dict]:
    """One more `prune --dedupe --json` of the plain export: its output and its report."""
    out = os.path.join(workdir, "disk-dedupe.pte")
    argv = [sys.executable, "-m", "emitter_filter", "prune", plain, "-o", out, "--dedupe", "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, env=child_env(None), check=True)
    return out, json.loads(done.stdout)


def median(runs: list[dict], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def percent(new: float, old: float) -> float:
    return 100.0 * (new - old) / old


def summarize(runs: dict[str, list[dict]], disk: dict[str, list[dict]]) -> dict:
    """The medians and the percentages the table shows."""
    exports = {
        mode: {
            "pte_bytes": median(mode_runs, "pte_bytes"),
            "wall_seconds": median(mode_runs, "seconds"),
            "to_executorch_seconds": median(mode_runs, "to_executorch_seconds"),
            "prune_seconds": median(mode_runs, "prune_seconds"),
            "peak_rss_mib": median(mode_runs, "peak_rss_kib") / 1024,
        }
        for mode, mode_runs in runs.items()
    }
    deduped = runs["dedupe"]
    own = [run["dedupe_seconds"] for run in deduped]
    share = [run["dedupe_seconds"] / run["to_executorch_seconds"] for run in deduped]
    adds = [
        run["dedupe_seconds"] / (run["to_executorch_seconds"] - run["dedupe_seconds"])
        for run in deduped
    ]
    plain, both = exports["prune"], exports["dedupe"]
    on_disk = {
        name: {
            "seconds": median(name_runs, "seconds"),
            "peak_rss_mib": median(name_runs, "peak_rss_kib") / 1024,
        }
        for name, name_runs in disk.items()
    }
    return {
        "exports": exports,
        "dedupe_seconds": statistics.median(own),
        "dedupe_saved_bytes": deduped[0]["dedupe_saved_bytes"],
        "dedupe_share_of_to_executorch_pct": 100 * statistics.median(share),
        "dedupe_adds_to_to_executorch_pct": 100 * statistics.median(adds),
        "to_executorch_difference_pct": percent(
            both["to_executorch_seconds"], plain["to_executorch_seconds"]
        ),
        "wall_difference_pct": percent(both["wall_seconds"], plain["wall_seconds"]),
        "dedupe_adds_to_peak_rss_pct": percent(both["peak_rss_mib"], plain["peak_rss_mib"]),
        "size_difference_pct": percent(both["pte_bytes"], plain["pte_bytes"]),
        "on_disk": on_disk,
        "prune_dedupe_over_cp": on_disk["prune --dedupe"]["seconds"] / on_disk["cp"]["seconds"],
        "prune_over_cp": on_disk["prune"]["seconds"] / on_disk["cp"]["seconds"],
    }


def same_bytes(paths: list[str]) -> bool:
    return all(filecmp.cmp(paths[0], path, shallow=False) for path in paths[1:])


def row(label: str, *cells: str) -> None:
    """One line of the table: a label, then right-aligned cells."""
    print(f"{label:32s}" + "".join(f" {cell:>16s}" for cell in cells))


def print_table(s: dict, checks: dict, header: str) -> None:
    plain, both = s["exports"]["prune"], s["exports"]["dedupe"]
    print(header)
    row("export (fresh process each)", "PRUNE=1", "PRUNE+DEDUPE=1", "difference")
    row(
        "  .pte bytes",
        f"{plain['pte_bytes']:,.0f}",
        f"{both['pte_bytes']:,.0f}",
        f"{s['size_difference_pct']:+.1f}%",
    )
    for label, key in (
        ("  wall of the process, s", "wall_seconds"),
        ("  to_executorch, s", "to_executorch_seconds"),
    ):
        row(
            label,
            f"{plain[key]:.2f}",
            f"{both[key]:.2f}",
            f"{percent(both[key], plain[key]):+.1f}%",
        )
    row("  prune (hook's own), s", f"{plain['prune_seconds']:.3f}", f"{both['prune_seconds']:.3f}")
    row("  dedupe (hook's own), s", "-", f"{s['dedupe_seconds']:.3f}")
    row(
        "  peak RSS, MiB",
        f"{plain['peak_rss_mib']:,.0f}",
        f"{both['peak_rss_mib']:,.0f}",
        f"{s['dedupe_adds_to_peak_rss_pct']:+.1f}%",
    )
    print(
        f"dedupe saved {s['dedupe_saved_bytes']:,} B;"
        f" its own time is {s['dedupe_share_of_to_executorch_pct']:.2f}% of to_executorch"
        f" (adds {s['dedupe_adds_to_to_executorch_pct']:.2f}% to the rest of it);"
        f" peak RSS {s['dedupe_adds_to_peak_rss_pct']:+.1f}%"
    )
    row("on disk (the PRUNE=1 export)", "seconds", "peak RSS, MiB", "/ cp")
    cp = s["on_disk"]["cp"]["seconds"]
    for name, figures in s["on_disk"].items():
        row(
            f"  {name}" if name == "cp" else f"  emitter-filter {name}",
            f"{figures['seconds']:.3f}",
            f"{figures['peak_rss_mib']:,.0f}",
            f"{figures['seconds'] / cp:.2f}x",
        )
    for label, value in checks.items():
        print(f"{label}: {value}")


def versions() -> dict:
    found = {}
    for package in _PACKAGES:
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    return found


def benchmark(options) -> int:
    workdir = options.keep or tempfile.mkdtemp(prefix="ef-bench-smollm-")
    os.makedirs(workdir, exist_ok=True)
    try:
        model = os.path.join(workdir, "model")
        started = time.perf_counter()
        build = ["--child", "build", "--model", model, "--layers", str(options.layers)]
        run_step(workdir, "build", build, child_env(None))
        build_seconds = time.perf_counter() - started
        print(
            f"model saved in {build_seconds:.1f} s; exporting, {options.repeat} round(s):",
            flush=True,
        )
        runs = export_rounds(workdir, model, options.repeat)
        plain = runs["prune"][0]["pte"]
        disk = disk_rounds(workdir, plain, options.disk_repeat or options.repeat)
        disk_out, disk_report = disk_dedupe(workdir, plain)
        summary = summarize(runs, disk)
        plains, deduped = [r["pte"] for r in runs["prune"]], [r["pte"] for r in runs["dedupe"]]
        checks = {
            "PRUNE=1 exports identical across rounds": same_bytes(plains),
            "dedupe exports identical across rounds": same_bytes(deduped),
            "prune --dedupe of the PRUNE=1 export == in-process dedupe export": same_bytes(
                [disk_out, deduped[0]]
            ),
            "prune skipped": runs["prune"][0]["prune_skipped"],
        }
        found = versions()
        header = (
            f"SmolLM-135M-shaped Llama, {options.layers} layers, fp32 random weights;"
            f" optimum-executorch {found['optimum-executorch']} xnnpack,"
            f" executorch {found['executorch']}, torch {found['torch']},"
            f" transformers {found['transformers']};"
            f" emitter_filter from {runs['prune'][0]['emitter_filter']};"
            f" medians of {options.repeat} round(s)"
        )
        print_table(summary, checks, header)
        if options.json:
            figures = {
                "layers": options.layers,
                "repeat": options.repeat,
                "versions": found,
                "build_seconds": build_seconds,
                **summary,
                "checks": checks,
                "disk_dedupe_report": disk_report,
                "runs": {
                    mode: [{k: v for k, v in run.items() if k != "pte"} for run in mode_runs]
                    for mode, mode_runs in runs.items()
                },
                "disk_runs": disk,
            }
            with open(options.json, "w") as f:
                json.dump(figures, f, indent=2)
    finally:
        if not options.keep:
            shutil.rmtree(workdir)
    return 0


def parse(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Needs optimum-executorch and this package installed in the same environment "
        "(see the module docstring for the install commands).",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=2,
        help="rounds of the two exports, each export in a fresh process, "
        "the order alternating (default 2; about 4.5 minutes an export)",
    )
    parser.add_argument(
        "--disk-repeat",
        type=int,
        default=None,
        help="rounds of cp / prune --dedupe / prune on disk (default: --repeat)",
    )
    parser.add_argument(
        "--layers",
        type=int,
        default=30,
        help="decoder layers (default 30, SmolLM-135M's; fewer for a quick "
        "check of the script itself)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write every figure to PATH")
    parser.add_argument(
        "--keep",
        metavar="DIR",
        help="work in DIR and keep the model, the .pte files and the logs "
        "(default: a temporary directory, removed at the end)",
    )
    parser.add_argument(
        "--child",
        choices=("build", "export"),
        help="internal: run one step in this process (the benchmark starts "
        "these itself), with --model, --out and --result",
    )
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main() -> int:
    options = parse()
    if options.child:
        return run_child(options)
    if versions()["optimum-executorch"] is None:  # read from metadata: imports no torch
        print(
            "bench_smollm: optimum-executorch is not installed here "
            "(pip install optimum-executorch -c constraints/executorch-1.5.1.txt)",
            file=sys.stderr,
        )
        return 2
    return benchmark(options)


if __name__ == "__main__":
    sys.exit(main())
