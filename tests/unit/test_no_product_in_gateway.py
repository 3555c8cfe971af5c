"""`gateway/` knows no product (issue 17): it imports nothing from `adapters/`, and its code names
no product, neither as an identifier nor in a string. Products plug in through
`gateway.product` (entry points `retry_gateway.products`).

Allowed: docstrings (module, class, function and attribute docstrings) and comments may name
products as examples; the generated stubs in `gateway/v1/` are not scanned. Anything else is
listed in KNOWN below with the slice that removes it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

GATEWAY = Path(__file__).resolve().parents[2] / "gateway"
GENERATED = GATEWAY / "v1"
PRODUCT = re.compile(r"rocketmq|pulsar|rabbitmq|amqp", re.IGNORECASE)

KNOWN: dict[str, set[str]] = {}
"""Relative path -> the identifiers and strings still allowed there: none."""


def _sources() -> list[Path]:
    return sorted(p for p in GATEWAY.rglob("*.py") if GENERATED not in p.parents)


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (a string standing as a statement)."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)}


def _names(node: ast.AST) -> list[str]:
    """Identifiers a node spells."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.keyword):
        return [node.arg] if node.arg else []
    if isinstance(node, ast.alias):
        return [node.name, node.asname or ""]
    if isinstance(node, ast.ImportFrom):
        return [node.module or ""]
    return []


def _findings(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    docstrings = _docstrings(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        for name in _names(node):
            if PRODUCT.search(name):
                found.add(name)
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in docstrings and PRODUCT.search(node.value)):
            found.add(node.value)
    return found


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(
                r"adapters(\.[\w.]+)?(:\w+)?", node.value):
            modules.add(node.value)  # importlib.import_module("adapters...") and the like
    return modules


def test_the_scan_sees_names_and_strings_but_not_docstrings(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('"""About RocketMQ."""\nx = 1\n"""Pulsar too."""\n'
                      'def f(pulsar_port): return "rabbitmq"  # amqp\n')
    assert _findings(sample) == {"pulsar_port", "rabbitmq"}


def test_the_scan_sees_imports_by_name(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('import adapters.x\nfrom adapters import y\nfrom . import adapters\n'
                      'importlib.import_module("adapters.z")\n"""adapters are products."""\n')
    assert _imports(sample) == {"adapters.x", "adapters", "adapters.z"}


def test_gateway_imports_nothing_from_adapters() -> None:
    offenders = {str(p.relative_to(GATEWAY)): sorted(m for m in _imports(p)
                                                    if re.match(r"adapters\b", m))
                 for p in _sources()}
    assert {path: mods for path, mods in offenders.items() if mods} == {}


def test_gateway_names_no_product() -> None:
    unexpected = {}
    for path in _sources():
        relative = path.relative_to(GATEWAY).as_posix()
        extra = _findings(path) - KNOWN.get(relative, set())
        if extra:
            unexpected[relative] = sorted(extra)
    assert unexpected == {}


def test_known_exceptions_are_still_needed() -> None:
    """An exception nobody needs any more is dropped from KNOWN."""
    stale = {path: sorted(allowed - _findings(GATEWAY / path))
             for path, allowed in KNOWN.items()}
    assert {path: names for path, names in stale.items() if names} == {}
