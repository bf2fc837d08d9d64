"""Modules a reader holds in their head: sizes the house keeps (issue 54).

Read from the sources with `ast`, so it runs with flatbuffers alone. The generated readers
(`_program_fbs`) are flatc's, not ours, and are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.filetools

PACKAGE = Path(__file__).resolve().parents[1] / "emitter_filter"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
MAX_TOP_MODULES = 12


def _our_modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "_program_fbs" not in p.parts)


def code_lines(function: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> int:
    """A function's non-blank, non-comment lines, after its docstring."""
    body = function.body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str):
            body = body[1:]
    if not body:
        return 0
    text = lines[body[0].lineno - 1 : function.end_lineno]
    return sum(1 for line in text if line.strip() and not line.strip().startswith("#"))


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """`path:name count` for each function of `path` over `limit` code lines."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    return [
        f"{path}:{node.name} {code_lines(node, lines)}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and code_lines(node, lines) > limit
    ]


def test_no_module_is_over_500_lines():
    modules = _our_modules()
    assert len(modules) > 50, "the test reads the wrong folder"
    long = {
        str(p.relative_to(PACKAGE.parent)): n
        for p in modules
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_no_function_is_over_60_code_lines():
    assert [f for p in _our_modules() for f in long_functions(p)] == []


def test_the_top_folder_holds_at_most_12_modules():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert "__init__.py" in top, "the test reads the wrong folder"
    assert len(top) <= MAX_TOP_MODULES, top


def test_the_function_count_can_fail(tmp_path):
    """A function of 61 code lines is found; its docstring, blanks and comments don't count."""
    body = "\n".join(f"    x{i} = {i}\n\n    # note" for i in range(61))
    long = tmp_path / "long.py"
    long.write_text(f'def f():\n    """Doc."""\n{body}\n', encoding="utf-8")
    assert long_functions(long) == [f"{long}:f 61"]
    short = tmp_path / "short.py"
    short.write_text(f'def f():\n    """Doc."""\n{body}\n'.replace("    x60 = 60\n", ""))
    assert long_functions(short) == []
