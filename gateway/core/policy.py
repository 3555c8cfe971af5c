"""A retry policy: the numbers a dialect gives the state machine.

Policies are frozen values built and validated by the dialects (`adapters/<product>/dialect.py`)
and registered by name in `gateway.core.registry`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from gateway.core.naming import NamingScheme
from gateway.core.record import Record
from gateway.errors import InvalidArgument

SECOND_MS = 1_000
MINUTE_MS = 60 * SECOND_MS
HOUR_MS = 60 * MINUTE_MS


class RetryMode(enum.Enum):
    BACKOFF = "backoff"
    """A failure waits in WAITING_RETRY for the back-off interval, then becomes READY."""
    INVISIBLE = "invisible"
    """Simple-consumer style: a failed delivery stays invisible (INFLIGHT, receipt spent) until
    its redelivery time, then READY; no WAITING_RETRY."""


class Placement(enum.Enum):
    COPY = "copy"
    """A retry is a new copy on the retry destination (e.g. `%RETRY%{group}`)."""
    IN_PLACE = "in_place"
    """The same stored message becomes visible again (ordered, simple, negative ack, fixed
    per-queue interval)."""


@dataclass(frozen=True, slots=True)
class RetryRequest:
    """What the consumer asked for when it failed a delivery."""

    delay_ms: int | None = None
    delay_level: int | None = None


class Backoff(Protocol):
    """Turns the n-th counted failure (1-based) and the consumer's request into a wait."""

    def delay_ms(self, retry: int, request: RetryRequest, record: Record, now_ms: int) -> int: ...

    def describe(self) -> str: ...


def check_range(field: str, value: int, low: int, high: int, unit: str = "") -> int:
    """Return `value` if low <= value <= high, else raise InvalidArgument naming the range."""
    if not low <= value <= high:
        suffix = f" {unit}" if unit else ""
        raise InvalidArgument(field, value, f"{low}..{high}{suffix}")
    return value


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    name: str
    """The public policy name (a key of `Registry.policies`)."""
    dialect: str
    """The dialect (product) the policy speaks for (a key of `Registry.dialects`)."""
    backoff: Backoff
    naming: NamingScheme
    max_retries: int | None = 16
    """Failures retried before the message is exhausted; None means no limit."""
    mode: RetryMode = RetryMode.BACKOFF
    placement: Placement = Placement.IN_PLACE
    delivery_timeout_ms: int | None = None
    """Push ack timeout; None: a delivery has no deadline unless the receive chooses one."""
    invisible_range_ms: tuple[int, int] | None = None
    """Where a receive chooses its invisible duration (simple consumer), the allowed range."""
    extend_range_ms: tuple[int, int] = (SECOND_MS, 12 * HOUR_MS)
    retries_enabled: bool = True
    """False in broadcasting mode: a failure is logged and dropped."""
    blocks_queue: bool = False
    """Ordered consumption: a failing message blocks later messages with the same key."""
    dead_letter: bool = True
    """Exhausted messages go to the dead-letter destination; else they are discarded."""
    counts_failures: bool = True
    """False where the product keeps no count (e.g. an exclusive subscription's redeliveries)."""
    lost_counts_as_failure: bool = False
    """Whether a delivery given back by a lost consumer counts against max retries."""
    count_resets_unattended: bool = False
    """The product keeps the failure count only while the group has a consumer: when the last
    one leaves, the count of every message of the group starts from 0 again."""
    honours_delays: bool = True
    """Messages published with a delay (`deliver_at_ms`) wait for it in this group; False where
    the product delivers them at once for this kind of subscription (its exclusive ones, say).
    Other groups of the topic keep their own rule (`Backend.fetch`'s `publish_delays`)."""
    dispatch_run: int = 1
    """Shared consumption: messages dealt to one consumer in a row before the next consumer
    with room gets its turn. 1 is per-message round robin; a dialect whose product deals
    longer runs says so, which keeps deliveries in batches however many consumers share the
    group."""
    settings: tuple[tuple[str, str], ...] = ()
    """The validated options the policy was built from, for display."""

    def exhausted_after(self, retries: int) -> bool:
        """True when a message with `retries` counted failures may not be retried again."""
        return self.max_retries is not None and retries > self.max_retries

    @property
    def copies_retries(self) -> bool:
        """True when a failed message waits as a copy on a retry destination; False when the
        policy keeps it in place or never retries (broadcasting)."""
        return self.placement is Placement.COPY and self.retries_enabled

    def retry_topic(self, topic: str, group: str) -> str:
        """The topic holding `group`'s retry copies of `topic`; "" when there is none (retries
        kept in place, or no retries)."""
        return self.naming.retry_topic(topic, group) if self.copies_retries else ""

    def dead_letter_topic(self, topic: str, group: str) -> str:
        """The topic receiving `group`'s dead letters of `topic`; "" when exhausted messages
        are discarded."""
        return self.naming.dead_letter_topic(topic, group) if self.dead_letter else ""

    def retry_destination(self, record: Record) -> str:
        return self.naming.retry_topic(record.topic, record.group)

    def dead_letter_destination(self, record: Record) -> str:
        return self.naming.dead_letter_topic(record.topic, record.group)
