"""The part of the engine the Pulsar front end uses, as structural types.

The front end depends on these shapes rather than on the engine module so that it stays a thin
translator; `gateway.engine.engine.Engine` satisfies them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from gateway.backend.base import OutMessage
from gateway.engine.api import Delivery, Settlement, SettleResult, SubscriptionSpec


class ConsumerPort(Protocol):
    """A push-style engine consumer."""

    async def next_batch(self, max_messages: int = 256) -> list[Delivery]: ...

    def add_credit(self, n: int) -> None: ...

    async def close(self) -> None: ...


class EnginePort(Protocol):
    """Publishing, consuming and settling."""

    def now_ms(self) -> int: ...

    async def publish(self, topic: str, messages: Sequence[OutMessage]) -> list[str]: ...

    async def open_consumer(self, spec: SubscriptionSpec, credit: int = 0) -> ConsumerPort: ...

    async def settle(self, settlements: Sequence[Settlement]) -> list[SettleResult]: ...


class AuthorizerPort(Protocol):
    """Token authentication and topic permissions (`gateway.server.auth.Authorizer`)."""

    def authenticate(self, token: str | None) -> Any: ...

    def check_publish(self, principal: Any, topic: str) -> None: ...

    def check_consume(self, principal: Any, topic: str, group: str) -> None: ...
