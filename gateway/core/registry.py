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
from gateway.core.traits import NO_TRAITS, PolicyTraits
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
        """Properties of a retry copy (the product's own: the real topic, the retry count...)."""
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

SUBSCRIPTION_TYPE = "subscription_type"
"""The option a policy that takes the subscription type reads it from (the `ConsumerType`'s
value: `shared`, `key_shared`, `exclusive`, `failover`)."""


@dataclass
class Registry:
    policies: dict[str, PolicyFactory] = field(default_factory=dict)
    schemes: dict[str, NamingScheme] = field(default_factory=dict)
    dialects: dict[str, Dialect] = field(default_factory=dict)
    typed: set[str] = field(default_factory=set)
    """Policies whose behaviour depends on the subscription type: they are given the consumer's
    type as the `subscription_type` option unless the subscription sets that option itself."""
    retry_tables: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """By dialect: the waits of its default policy's retries (retry k waits entry k, the last
    entry after that), for reports that compare what they observe with what the policy says."""
    traits: dict[str, PolicyTraits] = field(default_factory=dict)
    """By policy: how its clients see it and what tunes it (`gateway.core.traits`), for
    `gateway migrate plan`."""

    def add_policy(
        self, name: str, factory: PolicyFactory, *, takes_subscription_type: bool = False
    ) -> None:
        self.policies[name] = factory
        if takes_subscription_type:
            self.typed.add(name)
        else:
            self.typed.discard(name)

    def add_retry_table(self, dialect: str, table_ms: tuple[int, ...]) -> None:
        """Declare the retry table of `dialect`'s default policy (see `retry_tables`)."""
        if not table_ms:
            raise ValueError(f"the retry table of {dialect!r} is empty")
        self.retry_tables[dialect] = tuple(table_ms)

    def add_traits(self, policy: str, traits: PolicyTraits) -> None:
        """Declare how `policy`'s clients see it and what tunes it (see `traits`)."""
        self.traits[policy] = traits

    def traits_of(self, policy: str) -> PolicyTraits:
        """The traits of `policy`; empty ones when its dialect declared none."""
        return self.traits.get(policy, NO_TRAITS)

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
        self,
        name: str,
        options: Mapping[str, str] | None = None,
        naming: str = "",
        subscription_type: str = "",
    ) -> RetryPolicy:
        """Build a validated policy; unknown names and bad options raise InvalidArgument.
        `subscription_type` goes to the policies that take it (`typed`) as that option."""
        try:
            factory = self.policies[name]
        except KeyError:
            known = ", ".join(sorted(self.policies))
            raise InvalidArgument("policy", name, "one of " + known) from None
        scheme = self.scheme(naming) if naming else None
        if subscription_type and name in self.typed and SUBSCRIPTION_TYPE not in (options or {}):
            options = {**(options or {}), SUBSCRIPTION_TYPE: subscription_type}
        return factory(options or {}, scheme)

    def dialect(self, name: str) -> Dialect:
        return self.dialects[name]
