"""Product adapters: dialects, naming schemes, back ends and front ends, one package each."""

from __future__ import annotations

from gateway.core.naming import custom_scheme
from gateway.core.registry import Registry


def builtin_registry(custom: dict[str, tuple[str, str]] | None = None) -> Registry:
    """A registry with every built-in dialect, plus custom naming schemes by name."""
    from adapters.amqp import dialect as amqp
    from adapters.pulsar import dialect as pulsar
    from adapters.rocketmq import dialect as rocketmq

    registry = Registry()
    for module in (rocketmq, amqp, pulsar):
        module.register(registry)
    for name, (retry, dead_letter) in (custom or {}).items():
        registry.add_scheme(custom_scheme(retry, dead_letter, name))
    return registry
