"""No import circles among the modules of `gateway/` and `adapters/`.

The graph is built from the source with `ast`: an edge for every module-level import of one of
our modules (imports inside functions run late and are left out). `runtime` leaves out the imports
under `if TYPE_CHECKING:`; `typing` counts them too, since a circle there is a circle in the
design even if it never runs.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gateway", "adapters")

KNOWN_CIRCLES: set[frozenset[str]] = set()


@functools.cache
def modules() -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package)."""
    found: dict[str, tuple[Path, bool]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            found[".".join(parts)] = (path, is_package)
    return found


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(body: list[ast.stmt], typing: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """The module-level import statements (also inside if/try blocks at module level)."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If):
            if typing or not _type_checking(node):
                yield from _imports(node.body, typing)
            yield from _imports(node.orelse, typing)
        elif isinstance(node, ast.Try):
            yield from _imports(node.body, typing)
            for handler in node.handlers:
                yield from _imports(handler.body, typing)
            yield from _imports(node.orelse, typing)
            yield from _imports(node.finalbody, typing)


@functools.cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def graph(typing: bool) -> dict[str, set[str]]:
    mods = modules()

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {name: set() for name in mods}
    for name, (path, is_package) in mods.items():
        package = name if is_package else name.rpartition(".")[0]
        for node in _imports(parsed(path).body, typing):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package
                    for _ in range(node.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{base}" if base else anchor
                # `from a import b` imports module a.b when there is one, else a name of a.
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                           for a in node.names]
            for target in targets:
                module = known(target)
                if module is not None and module != name:
                    edges[name].add(module)
    return edges


def circles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


@pytest.mark.parametrize("typing", [False, True], ids=["runtime", "typing"])
def test_no_import_circles(typing: bool) -> None:
    found = [sorted(c) for c in circles(graph(typing)) if c not in KNOWN_CIRCLES]
    assert found == []


def test_the_graph_sees_imports() -> None:
    """The graph is not empty by mistake: known edges, relative imports and typing-only ones."""
    runtime = graph(typing=False)
    assert "gateway.engine.api" in runtime["gateway.engine.port"]
    assert "adapters.rocketmq.frontend.codec" in runtime["adapters.rocketmq.frontend.renewer"]
    typing = graph(typing=True)
    assert runtime["gateway.product"] < typing["gateway.product"]


def test_a_circle_is_found() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
        frozenset({"a", "b", "c"})
    ]
