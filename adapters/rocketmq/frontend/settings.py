"""Configuration of the RocketMQ 5 gRPC front end, parsed once and validated."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from adapters.rocketmq.dialect import (
    BACKOFF_MS,
    DEFAULT_SUSPEND_MS,
    INT_MAX,
    INVISIBLE_RANGE_MS,
    SUSPEND_RANGE_MS,
)
from gateway.engine.api import SettleGuard

__all__ = [
    "DEFAULT_SUSPEND_MS",
    "ORDERLY_UNLIMITED_ATTEMPTS",
    "RECEIVE_BATCH_MAX",
    "ROCKETMQ_BACKOFF_S",
    "FrontendSettings",
]
from gateway.errors import InvalidArgument

ROCKETMQ_BACKOFF_S: tuple[int, ...] = tuple(ms // 1000 for ms in BACKOFF_MS)
"""Unordered push-consumer back-off, retry k = 1..16 (RocketMQ documents 000, 003)."""

ORDERLY_UNLIMITED_ATTEMPTS = INT_MAX
"""Ordered consumption retries without limit by default (Integer.MAX_VALUE)."""
RECEIVE_BATCH_MAX = 1024
"""Most messages one ReceiveMessage returns (and the largest `receive_batch_size`)."""


def _check(ok: bool, name: str, value: object, allowed: str) -> None:
    if not ok:
        raise InvalidArgument(name, value, allowed)


class Checks(Protocol):
    def check_publish(self, principal: Any, topic: str) -> None: ...

    def check_consume(self, principal: Any, topic: str, group: str) -> None: ...

    def settle_guard(self, principal: Any) -> SettleGuard | None: ...


@dataclass(frozen=True, slots=True)
class CheckTimes:
    """When the gateway asks a producer about a transaction it has not ended (policy ms): first
    after 10 s (a RocketMQ broker's first check comes 6 s at the earliest, on its check round;
    10 s is the shortest invisible time of the simple consumer the checker is), then every
    60 s, 15 checks, as a RocketMQ broker."""

    first_ms: int = 10_000
    interval_ms: int = 60_000
    max_checks: int = 15
    held_bytes: int = 64 << 20
    """Bodies of half messages held at once, each counting 1 KiB more
    (`open_halves.OVERHEAD`); beyond that they wait in the store. With authentication one
    principal may have half of it open at once."""

    def __post_init__(self) -> None:
        for name in ("first_ms", "interval_ms"):
            value = getattr(self, name)
            _check(INVISIBLE_RANGE_MS[0] <= value <= INVISIBLE_RANGE_MS[1],
                   f"transaction_check.{name}", value,
                   f"{INVISIBLE_RANGE_MS[0]}..{INVISIBLE_RANGE_MS[1]}")
        _check(1 <= self.max_checks <= 1000, "transaction_check.max_checks", self.max_checks,
               "1..1000")
        _check(self.held_bytes >= 1, "transaction_check.held_bytes", self.held_bytes, ">= 1")


@dataclass(frozen=True, slots=True)
class Permissions:
    """Who may publish and consume: the gateway's authorizer and its principals by access key."""

    checks: Checks
    by_access_key: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class FrontendSettings:
    """What the RocketMQ front end needs to know besides the engine.

    Times carry their unit in the name. Every field is checked when the object is built.
    """

    advertised_endpoint: str = ""
    """`host:port` the SDK should connect to; "" echoes the address the client used."""
    credentials: Mapping[str, str] | None = None
    """Access key -> secret; None turns authentication off."""
    clock_skew_s: int = 900
    """How far the signed `x-mq-date-time` may be from now (after the local-time allowance)."""
    max_delivery_attempts: int | None = None
    """Deliveries in all for unordered push consumers; None keeps the policy default (17)."""
    orderly_max_delivery_attempts: int = ORDERLY_UNLIMITED_ATTEMPTS
    """Deliveries before an ordered (FIFO) push consumer forwards a message to the DLQ."""
    orderly_suspend_ms: int = DEFAULT_SUSPEND_MS
    """Pause between local retries of an ordered consumer, 10..30000 ms (sent in whole seconds)."""
    backoff_s: tuple[int, ...] = ROCKETMQ_BACKOFF_S
    """Back-off table pushed to push consumers as their customized back-off."""
    fifo_groups: frozenset[str] = field(default_factory=frozenset)
    """Consumer groups that consume in order (RocketMQ's group attribute)."""
    long_polling_timeout_s: int = 20
    """Long-polling time offered to push consumers in Settings."""
    push_invisible_ms: int = 60_000
    """Invisible time each renewal of a push delivery asks for (policy time, 1 s..12 h)."""
    push_consume_timeout_ms: int = 300_000
    """Renewal stops this long after the delivery (the message waits in the client's cache and
    then in the listener): a delivery still unsettled then times out and counts as a failure."""
    renew_interval_ms: int = 1000
    """How often the renewal task looks for push deliveries close to their deadline."""
    permissions: Permissions | None = None
    """Per-access-key permissions (`gateway.server.auth.Authorizer` and its principals by
    access key); None leaves every authenticated caller unrestricted."""
    receive_batch_size: int = 32
    max_body_size: int = 4 * 1024 * 1024
    deadline_margin_ms: int = 500
    """A receive ends this long before the client's gRPC deadline."""
    transaction_check: CheckTimes = field(default_factory=CheckTimes)
    """Checks of half messages whose transaction was not ended (`transactions`)."""
    metrics: bool = True
    """Tell push consumers to export metrics to the gateway (their telemetry reader needs it)."""

    def __post_init__(self) -> None:
        if self.advertised_endpoint:
            host, sep, port = self.advertised_endpoint.rpartition(":")
            _check(
                bool(sep and host and port.isascii() and port.isdigit() and 0 < int(port) < 65536),
                "advertised_endpoint",
                self.advertised_endpoint,
                "host:port with port 1..65535",
            )
        if self.credentials is not None:
            _check(
                all(ak and sk for ak, sk in self.credentials.items()),
                "credentials",
                "<hidden>",
                "non-empty access keys and secrets",
            )
        _check(0 <= self.clock_skew_s <= 86_400, "clock_skew_s", self.clock_skew_s, "0..86400")
        if self.max_delivery_attempts is not None:
            _check(
                1 <= self.max_delivery_attempts <= 1001,
                "max_delivery_attempts",
                self.max_delivery_attempts,
                "1..1001 (1000 retries)",
            )
        _check(
            1 <= self.orderly_max_delivery_attempts <= ORDERLY_UNLIMITED_ATTEMPTS,
            "orderly_max_delivery_attempts",
            self.orderly_max_delivery_attempts,
            "1..2147483647",
        )
        _check(
            SUSPEND_RANGE_MS[0] <= self.orderly_suspend_ms <= SUSPEND_RANGE_MS[1],
            "orderly_suspend_ms",
            self.orderly_suspend_ms,
            "10..30000",
        )
        _check(
            len(self.backoff_s) > 0 and all(0 <= s <= 86_400 for s in self.backoff_s),
            "backoff_s",
            self.backoff_s,
            "one or more steps of 0..86400 s",
        )
        _check(
            1 <= self.long_polling_timeout_s <= 60,
            "long_polling_timeout_s",
            self.long_polling_timeout_s,
            "1..60",
        )
        _check(
            1_000 <= self.push_invisible_ms <= 43_200_000,
            "push_invisible_ms",
            self.push_invisible_ms,
            "1000..43200000",
        )
        _check(
            self.push_consume_timeout_ms >= 1,
            "push_consume_timeout_ms",
            self.push_consume_timeout_ms,
            ">= 1",
        )
        _check(
            10 <= self.renew_interval_ms < self.push_invisible_ms,
            "renew_interval_ms",
            self.renew_interval_ms,
            "10 ms .. push_invisible_ms",
        )
        _check(
            1 <= self.receive_batch_size <= RECEIVE_BATCH_MAX,
            "receive_batch_size",
            self.receive_batch_size,
            f"1..{RECEIVE_BATCH_MAX}",
        )
        _check(self.max_body_size >= 1, "max_body_size", self.max_body_size, ">= 1")
        _check(
            0 <= self.deadline_margin_ms <= 10_000,
            "deadline_margin_ms",
            self.deadline_margin_ms,
            "0..10000",
        )

    @property
    def push_max_attempts(self) -> int:
        """Deliveries in all that unordered push consumers are told about."""
        if self.max_delivery_attempts is not None:
            return self.max_delivery_attempts
        return len(self.backoff_s) + 1
