"""Policies and naming schemes by their public names.

Dialects register themselves here; the composition root builds one registry with every dialect
(`adapters.builtin_registry()`), and the rest of the gateway looks names up in it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from gateway.core.naming import NamingScheme
from gateway.core.policy import RetryPolicy
from gateway.errors import InvalidArgument


class Dialect(Protocol):
    """Product-specific shapes the engine needs when it moves a message."""

    name: str

    def retry_properties(
        self,
        properties: Mapping[str, str],
        *,
        topic: str,
        retry_topic: str,
        message_id: str,
        retries: int,
    ) -> dict[str, str]:
        """Properties of a retry copy (Pulsar REAL_TOPIC, RECONSUMETIMES; RocketMQ RETRY_TOPIC)."""
        ...

    def dead_letter_properties(
        self,
        properties: Mapping[str, str],
        *,
        topic: str,
        dead_letter_topic: str,
        message_id: str,
        retries: int,
        reason: str,
    ) -> dict[str, str]:
        """Properties of the copy stored on the dead-letter destination."""
        ...


PolicyFactory = Callable[[Mapping[str, str], NamingScheme | None], RetryPolicy]


@dataclass
class Registry:
    policies: dict[str, PolicyFactory] = field(default_factory=dict)
    schemes: dict[str, NamingScheme] = field(default_factory=dict)
    dialects: dict[str, Dialect] = field(default_factory=dict)

    def add_policy(self, name: str, factory: PolicyFactory) -> None:
        self.policies[name] = factory

    def add_scheme(self, scheme: NamingScheme) -> None:
        self.schemes[scheme.name] = scheme

    def add_dialect(self, dialect: Dialect) -> None:
        self.dialects[dialect.name] = dialect

    def scheme(self, name: str) -> NamingScheme:
        try:
            return self.schemes[name]
        except KeyError:
            known = ", ".join(sorted(self.schemes))
            raise InvalidArgument("naming", name, "one of " + known) from None

    def policy(
        self, name: str, options: Mapping[str, str] | None = None, naming: str = ""
    ) -> RetryPolicy:
        """Build a validated policy; unknown names and bad options raise InvalidArgument."""
        try:
            factory = self.policies[name]
        except KeyError:
            known = ", ".join(sorted(self.policies))
            raise InvalidArgument("policy", name, "one of " + known) from None
        scheme = self.scheme(naming) if naming else None
        return factory(options or {}, scheme)

    def dialect(self, name: str) -> Dialect:
        return self.dialects[name]
