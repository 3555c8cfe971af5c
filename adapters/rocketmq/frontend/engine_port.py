"""The part of the engine's surface (gateway/engine/contract.md) this front end calls."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gateway.backend.base import OutMessage
from gateway.core.policy import RetryPolicy
from gateway.engine.api import Delivery, SettleGuard, Settlement, SettleResult, SubscriptionSpec
from gateway.engine.config import EngineConfig


class EnginePort(Protocol):
    """Publish, pull-style receive, settle, policy lookup; `now_ms` is the engine's clock;
    `config.max_message_bytes` is the largest message the gateway takes."""

    config: EngineConfig

    def now_ms(self) -> int: ...

    def policy_for(self, spec: SubscriptionSpec) -> RetryPolicy: ...

    async def publish(self, topic: str, messages: Sequence[OutMessage]) -> list[str]: ...

    async def receive(
        self,
        spec: SubscriptionSpec,
        max_messages: int,
        invisible_ms: int | None,
        wait_ms: int,
    ) -> list[Delivery]: ...

    async def settle(
        self, settlements: Sequence[Settlement], *, guard: SettleGuard | None = None
    ) -> list[SettleResult]: ...
