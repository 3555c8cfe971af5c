"""The engine's seams: one owner for the reserved properties, the delay table and `Envelope`;
the engine names no product; callers outside the engine use its public surface only."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

from adapters import builtin_registry
from adapters.rocketmq import dialect as rocketmq
from gateway.core import properties
from gateway.core.backoff import DELAY_LEVELS_MS, parse_levels

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = re.compile(r"rocketmq|pulsar|rabbit|amqp", re.IGNORECASE)
NEUTRAL = ("gateway/engine", "gateway/core", "gateway/telemetry", "gateway/server/metrics.py")
REACH_INS = {"subscriptions", "inflight", "backend", "timers"}
"""The engine's own tables: only the engine (and tests of the engine itself) touch them."""
KNOWN_REACH_INS: set[tuple[str, str]] = set()
"""Reach-ins into the engine's tables allowed outside the engine: none."""


def sources(*roots: str) -> Iterator[Path]:
    for root in roots:
        path = ROOT / root
        yield from [path] if path.is_file() else sorted(path.rglob("*.py"))


@functools.cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def strings(path: Path) -> Iterator[str]:
    """The string constants of a module that are not docstrings."""
    tree = parsed(path)
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node.value


def test_the_engine_and_core_name_no_product() -> None:
    named = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in sources(*NEUTRAL)
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if PRODUCT.search(line)
    ]
    assert named == []


def test_reserved_properties_have_one_owner() -> None:
    """Every `x-gateway-*` name is spelled in `gateway.core.properties` and nowhere else."""
    owner = Path(properties.__file__)
    spelled = [
        f"{path.relative_to(ROOT)}: {text!r}"
        for path in sources("gateway", "adapters")
        if path != owner
        for text in strings(path)
        if text.startswith(properties.RESERVED_PREFIX)
    ]
    assert spelled == []
    assert all(name.startswith(properties.RESERVED_PREFIX) for name in properties.RESERVED)


def test_reserved_properties_are_hidden_from_consumers() -> None:
    plain = {"color": "red"}
    assert properties.visible_properties(plain) is plain
    mixed = {**plain, properties.ORIGIN_TOPIC: "t", properties.DEAD_LETTER_ROUTE: "q"}
    assert properties.visible_properties(mixed) == plain


def test_the_delay_table_has_one_owner() -> None:
    """The 18 levels are spelled once; both dialects that use them take them from the owner."""
    spelled = [
        str(path.relative_to(ROOT))
        for path in sources("gateway", "adapters")
        for text in strings(path)
        if parse_levels_or_none(text) == DELAY_LEVELS_MS
    ]
    assert spelled == ["gateway/core/backoff.py"]
    assert DELAY_LEVELS_MS[2:] == rocketmq.BACKOFF_MS
    registry = builtin_registry()
    assert registry.retry_tables == {"rocketmq": rocketmq.BACKOFF_MS, "pulsar": DELAY_LEVELS_MS}


def parse_levels_or_none(text: str) -> tuple[int, ...] | None:
    try:
        return parse_levels(text) if text.strip() else None
    except Exception:
        return None


def test_envelope_is_defined_once() -> None:
    defined = [
        str(path.relative_to(ROOT))
        for path in sources("gateway", "adapters")
        for node in ast.walk(parsed(path))
        if isinstance(node, ast.ClassDef) and node.name == "Envelope"
    ]
    assert defined == ["gateway/backend/envelope.py"]


def test_only_the_engine_touches_its_tables() -> None:
    """Outside the engine, nothing reads `<...>engine.subscriptions` and the like: admin,
    metrics, the gRPC API and the front ends use `gateway.engine.port`."""
    found = set()
    for path in sources("gateway", "adapters"):
        rel = str(path.relative_to(ROOT))
        if rel.startswith("gateway/engine/") and rel != "gateway/engine/admin.py":
            continue
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Attribute) and node.attr in REACH_INS:
                owner = node.value
                name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
                if "engine" in name.lower():
                    found.add((rel, node.attr))
    assert found - KNOWN_REACH_INS == set()


def test_policies_that_take_the_subscription_type_get_it() -> None:
    registry = builtin_registry()
    assert registry.typed == {"pulsar", "pulsar-nack"}
    exclusive = registry.policy("pulsar", {}, "", "exclusive")
    assert dict(exclusive.settings)["subscription_type"] == "exclusive"
    chosen = registry.policy("pulsar", {"subscription_type": "shared"}, "", "exclusive")
    assert dict(chosen.settings)["subscription_type"] == "shared"
    # A policy that does not take it is not given an option it would refuse.
    assert registry.policy("rocketmq", {}, "", "exclusive").name == "rocketmq"
