"""The package's import graph: two sides that never mix, no cycle, a shallow tower.

Read from the sources with `ast` (imports inside functions count too), so it runs with
flatbuffers alone. `python -m tests.test_layout` prints the graph's layers.
"""

from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.filetools

PACKAGE = Path(__file__).resolve().parents[1] / "emitter_filter"
GENERATED = "emitter_filter._program_fbs"
#: From the CLI down to the generated readers, counting both ends: the package `cli` and
#: its `app` (the parser and `main`) sit two layers above the command modules, which
#: were one module until issue 44 split them.
MAX_LAYERS = 10


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(tree: ast.AST):
    """Every node but those under `if TYPE_CHECKING:`, which never run."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                stack.extend(child.orelse)
            else:
                stack.append(child)


def _imported(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    found: set[str] = set()
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


@functools.lru_cache(maxsize=1)
def import_graph() -> dict[str, frozenset[str]]:
    """Each module of the package (generated readers folded into one) to those it imports."""
    paths = [p for p in PACKAGE.rglob("*.py") if "_program_fbs" not in p.parts]
    modules = {_module_name(p): p for p in paths}
    graph: dict[str, frozenset[str]] = {GENERATED: frozenset()}
    for name, path in modules.items():
        names = _imported(
            ast.parse(path.read_text(encoding="utf-8")), name, path.name == "__init__.py"
        )
        edges = {GENERATED for n in names if n.startswith(GENERATED)}
        edges.update(n for n in names if n in modules and n != name)
        # `import emitter_filter` and names taken from it are the package, not its modules.
        edges.discard("emitter_filter")
        graph[name] = frozenset(edges)
    return graph


def _cycle(graph: dict[str, frozenset[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    for start in sorted(graph):
        if state.get(start):
            continue
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        state[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                path.pop()
                state[node] = 2
            elif state.get(child) == 1:
                return path[path.index(child) :] + [child]
            elif not state.get(child):
                state[child] = 1
                path.append(child)
                stack.append((child, iter(sorted(graph[child]))))
    return None


def layers(graph: dict[str, frozenset[str]]) -> dict[str, int]:
    """A module's layer: 1 for what imports nothing of ours, else one above its highest import."""
    depth: dict[str, int] = {}
    for start in sorted(graph):
        stack = [start]
        while stack:
            node = stack[-1]
            pending = [c for c in graph[node] if c not in depth]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            depth[node] = 1 + max((depth[c] for c in graph[node]), default=0)
    return depth


def test_the_import_graph_has_no_cycle():
    assert _cycle(import_graph()) is None


def test_the_on_disk_side_never_imports_the_in_process_side():
    graph = import_graph()
    crossing = {
        (module, target)
        for module, targets in graph.items()
        if module.startswith("emitter_filter.ondisk")
        for target in targets
        if target.startswith("emitter_filter.inprocess")
    }
    assert crossing == set()


def test_the_shared_modules_import_neither_side():
    graph = import_graph()
    shared = [
        m
        for m in graph
        if m.startswith(("emitter_filter.program", "emitter_filter.delegates"))
        or m.count(".") == 1
        and m.rsplit(".", 1)[1]
        not in (
            "cli",
            "pytest_plugin",
            "testing",
            "demo",
            "__main__",
            "inprocess",
            "ondisk",
            "verify",
        )
    ]
    assert shared, "no shared modules found: the test reads the wrong folder"
    crossing = {
        (module, target)
        for module in shared
        for target in graph[module]
        if target.startswith(("emitter_filter.inprocess", "emitter_filter.ondisk"))
    }
    assert crossing == set()


#: `ondisk/`'s folders, each importing only those listed below it: reading a file, then
#: analysing a program or writing one, and the commands (the modules of `ondisk/` itself)
#: above them all.
ONDISK_BELOW = {
    "read": (),
    "analyse": ("read",),
    "write": ("read",),
}


def _ondisk_group(module: str) -> str | None:
    """`read`, `analyse` or `write` for a module of those folders, "commands" for the rest."""
    if not module.startswith("emitter_filter.ondisk."):
        return None
    group = module.split(".")[2]
    return group if group in ONDISK_BELOW else "commands"


def test_the_on_disk_folders_import_only_downward():
    graph = import_graph()
    groups = {m: _ondisk_group(m) for m in graph if _ondisk_group(m)}
    assert {"read", "analyse", "write", "commands"} <= set(groups.values()), (
        "the test reads the wrong folder"
    )
    up = {
        (m, t)
        for m, group in groups.items()
        if group != "commands"
        for t in graph[m]
        if groups.get(t) not in (None, group, *ONDISK_BELOW[group])
    }
    assert up == set()
    # Nothing outside `ondisk/` reaches into it from below: the shared modules were checked
    # above; the commands' modules are imported only by the integrations and each other.
    assert {
        (m, t)
        for m, targets in graph.items()
        for t in targets
        if groups.get(t) == "commands" and groups.get(m) in ONDISK_BELOW
    } == set()


#: Who may import `verify/` (it needs a runtime): the integrations, and itself.
VERIFY_USERS = ("emitter_filter.cli", "emitter_filter.verify")
#: What loads a runtime: `verify/` imports these only inside the functions that run one.
RUNTIMES = ("torch", "executorch", "executorch_numpy_runtime", "numpy")


#: What of the on-disk side `verify/` may use: its file readers (a program's methods,
#: signatures and arenas, read before any runtime loads it) and the writers' hook that
#: checks outputs before they replace anything (`--verify`), all torch-free.
VERIFY_READS = ("emitter_filter.ondisk.read.", "emitter_filter.ondisk.write.output")


def test_the_verify_side_imports_only_the_on_disk_readers_and_only_the_integrations_import_it():
    graph = import_graph()
    verify = [m for m in graph if m.startswith("emitter_filter.verify")]
    assert "emitter_filter.verify.compare" in verify, "the test reads the wrong folder"
    assert {
        (m, t)
        for m in verify
        for t in graph[m]
        if t.startswith(("emitter_filter.inprocess", "emitter_filter.ondisk"))
        and not t.startswith(VERIFY_READS)
    } == set()
    assert {
        (m, t)
        for m, targets in graph.items()
        for t in targets
        if t.startswith("emitter_filter.verify") and not m.startswith(VERIFY_USERS)
    } == set()


def test_the_verify_side_imports_its_runtimes_only_where_it_runs_one():
    """`emitter-filter --help` and the file tools run where no runtime is installed."""
    found = {}
    for path in (PACKAGE / "verify").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        names = {a.name for n in top if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module for n in top if isinstance(n, ast.ImportFrom) and n.module}
        found[path.name] = sorted(n for n in names if n.split(".")[0] in RUNTIMES)
    assert "runtimes.py" in found
    assert all(not names for names in found.values()), found


def test_the_cli_modules_import_only_downward():
    """`app` imports the command modules, they import `common`, and nothing imports back up."""
    graph = import_graph()
    cli = sorted(m for m in graph if m.startswith("emitter_filter.cli."))
    assert "emitter_filter.cli.common" in cli, "the test reads the wrong folder"
    up = {"emitter_filter.cli", "emitter_filter.cli.app"}
    commands = [m for m in cli if m not in up | {"emitter_filter.cli.common"}]
    assert {
        (m, t)
        for m in commands
        for t in graph[m]
        if t.startswith("emitter_filter.cli") and t != "emitter_filter.cli.common"
    } == set()
    assert {
        t for t in graph["emitter_filter.cli.common"] if t.startswith("emitter_filter.cli")
    } == set()
    assert {
        (m, t)
        for m, targets in graph.items()
        for t in targets
        if t.startswith("emitter_filter.cli.") and not m.startswith("emitter_filter.cli")
    } == set()


def longest_path(graph: dict[str, frozenset[str]], start: str, target: str) -> list[str]:
    """The longest chain of imports from `start` that ends at `target` ([] if none does)."""
    best: dict[str, list[str]] = {target: [target]}
    order = [m for m, _ in sorted(layers(graph).items(), key=lambda item: item[1])]
    for node in order:
        if node == target:
            continue
        paths = [best[c] for c in graph[node] if best.get(c)]
        best[node] = [node, *max(paths, key=len)] if paths else []
    return best[start]


def test_the_cli_is_at_most_ten_layers_above_the_generated_readers():
    path = longest_path(import_graph(), "emitter_filter.cli", GENERATED)
    assert path, "the CLI does not reach the generated readers: the test reads the wrong graph"
    assert len(path) <= MAX_LAYERS, " -> ".join(path)


def test_the_checks_can_fail():
    """The graph reader sees a cycle and a crossing where there is one."""
    assert _cycle({"a": frozenset({"b"}), "b": frozenset({"a"})}) == ["a", "b", "a"]
    chain = {"a": frozenset({"b", "c"}), "b": frozenset({"c"}), "c": frozenset()}
    assert layers(chain)["a"] == 3
    assert longest_path(chain, "a", "c") == ["a", "b", "c"]
    assert _ondisk_group("emitter_filter.ondisk.read.layout") == "read"
    assert _ondisk_group("emitter_filter.ondisk.merge") == "commands"
    assert _ondisk_group("emitter_filter.errors") is None
    graph = import_graph()
    assert "emitter_filter.errors" in graph["emitter_filter.ondisk.audit"] or any(
        "emitter_filter.errors" in graph[m] for m in graph if m.startswith("emitter_filter.ondisk")
    )


if __name__ == "__main__":
    print(" -> ".join(longest_path(import_graph(), "emitter_filter.cli", GENERATED)))
    depth = layers(import_graph())
    for layer in range(max(depth.values()), 0, -1):
        names = sorted(m for m, d in depth.items() if d == layer)
        print(f"layer {layer}: {', '.join(names)}")
    sys.exit(0)
