"""Product packages: dialects, naming schemes, back ends and front ends, one package each.

Each package offers a `gateway.product.Product` in its `product` module, registered by one
entry point line in pyproject.toml (see docs/architecture.md, "Adding a product").
"""

from __future__ import annotations

from gateway.core.registry import Registry
from gateway.product import build_registry, installed


def builtin_registry(custom: dict[str, tuple[str, str]] | None = None) -> Registry:
    """A registry with every installed product's dialects, plus custom naming schemes by name."""
    return build_registry(installed(), custom)
