"""The shape of ``recorder/`` that CI holds (docs/ARCHITECTURE.md, "House rules").

Modules of at most 500 lines, functions of at most 80, and no circle of imports
between files, ``TYPE_CHECKING`` imports included. ruff holds the rest (private
members, complexity) and import-linter the layers.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "recorder"
MODULE_LINES = 500
FUNCTION_LINES = 80


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def _imported(name: str, path: Path, tree: ast.AST, known: dict[str, Path]) -> set[str]:
    """The modules of ``recorder`` that ``name`` imports, wherever in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                # ``from pkg import mod`` imports the module; ``from mod import x`` the module
                sub = f"{base}.{alias.name}"
                out.add(sub if sub in known else base)
    return {target for target in out if target in known and target != name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _graph() -> dict[str, set[str]]:
    """File-to-file imports; a package's ``__init__`` re-exporting its own modules
    is not an edge back (importing ``pkg.mod`` runs ``pkg/__init__`` first anyway)."""
    known = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        targets = _imported(name, path, ast.parse(path.read_text()), known)
        graph[name] = targets
    return graph


def test_no_module_is_longer_than_500_lines() -> None:
    long = {
        name: n
        for name, path in _modules().items()
        if (n := len(path.read_text().splitlines())) > MODULE_LINES
    }
    assert long == {}


def test_no_function_is_longer_than_80_lines() -> None:
    long: dict[str, int] = {}
    for name, path in _modules().items():
        for fn in _functions(ast.parse(path.read_text())):
            n = (fn.end_lineno or fn.lineno) - fn.lineno + 1
            if n > FUNCTION_LINES:
                long[f"{name}.{fn.name}:{fn.lineno}"] = n
    assert long == {}


def test_no_circle_of_imports_between_files() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    # the check above must be able to fail
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
