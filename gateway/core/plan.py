"""The timeline the state machine produces for a message that fails every attempt.

Pure: it drives `decide` with a simulated clock. `gateway plan` prints it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.core.events import Deliver, Fail, RetryDue
from gateway.core.machine import Outcome, decide
from gateway.core.policy import RetryMode, RetryPolicy, RetryRequest
from gateway.core.record import Record
from gateway.core.states import State


@dataclass(frozen=True, slots=True)
class PlannedAttempt:
    attempt: int
    """1 is the first delivery."""
    delay_ms: int
    """Wait before this delivery's READY time, counted from the previous failure."""
    at_ms: int
    """Delivery time, counted from the first delivery."""
    ready_ms: int
    """When the message became READY for this delivery, counted from the first READY."""
    retries: int
    """The retry count the consumer sees on this delivery (reconsumeTimes / RECONSUMETIMES)."""
    topic: str
    """Where this delivery comes from (the original topic or a retry destination)."""


@dataclass(frozen=True, slots=True)
class Plan:
    policy: RetryPolicy
    attempts: tuple[PlannedAttempt, ...]
    disposition: str
    """`dlq`, `discard`, or `none` (retried without limit)."""
    destination: str | None
    total_attempts: int | None
    """Deliveries in all before the disposition; None when unlimited."""
    truncated: bool
    ended_ms: int | None = None
    """When the disposition happened (the last failure), counted from the first delivery; None
    when the timeline is truncated."""


def plan(
    policy: RetryPolicy,
    *,
    topic: str,
    group: str,
    processing_ms: int = 0,
    pickup_ms: int = 0,
    invisible_ms: int | None = None,
    delay_ms: int | None = None,
    delay_level: int | None = None,
    limit: int = 200,
    requests: Sequence[RetryRequest] = (),
) -> Plan:
    """Simulate deliveries failing after `processing_ms`, picked up `pickup_ms` after READY.

    Every failure asks for `delay_ms` / `delay_level`; or, with `requests`, failure k asks for
    `requests[k-1]` (the last one for every failure past them)."""
    record = Record(message_id="planned", topic=topic, group=group)
    attempts: list[PlannedAttempt] = []
    source = topic
    ready_at = 0
    delay = 0
    first_delivery: int | None = None
    while True:
        now = ready_at + pickup_ms
        if record.state is State.WAITING_RETRY:
            record = decide(record, RetryDue(), policy, now).record
        receipt = f"r{record.attempt + 1}"
        record = decide(record, Deliver(receipt, invisible_ms), policy, now).record
        first_delivery = now if first_delivery is None else first_delivery
        attempts.append(
            PlannedAttempt(
                record.attempt, delay, now - first_delivery, ready_at, record.retries, source
            )
        )
        failed_at = now + processing_ms
        if record.deadline_ms and failed_at > record.deadline_ms:
            failed_at = record.deadline_ms
        if requests:
            asked = requests[min(len(attempts), len(requests)) - 1]
            fail = Fail(receipt, asked.delay_ms, asked.delay_level)
        else:
            fail = Fail(receipt, delay_ms, delay_level)
        decision = decide(record, fail, policy, failed_at)
        record = decision.record
        if decision.outcome in (Outcome.DEAD_LETTER, Outcome.DISCARD):
            kind = "dlq" if decision.outcome is Outcome.DEAD_LETTER else "discard"
            return Plan(policy, tuple(attempts), kind, decision.destination, record.attempt, False,
                        failed_at - first_delivery)
        if decision.outcome is Outcome.RETRY and decision.destination:
            source = decision.destination
        delay = decision.delay_ms
        ready_at = failed_at + delay
        if policy.mode is RetryMode.INVISIBLE:
            ready_at = record.deadline_ms
            record = Record(
                message_id=record.message_id,
                topic=record.topic,
                group=record.group,
                attempt=record.attempt,
                retries=record.retries,
                visible_at_ms=ready_at,
            )
        if len(attempts) >= limit:
            return _truncated(policy, attempts, topic, group)


def _truncated(policy: RetryPolicy, attempts: list[PlannedAttempt], topic: str, group: str) -> Plan:
    record = Record(message_id="planned", topic=topic, group=group)
    if policy.max_retries is None or not policy.counts_failures or not policy.retries_enabled:
        return Plan(policy, tuple(attempts), "none", None, None, True)
    total = policy.max_retries + 1
    if policy.dead_letter:
        return Plan(
            policy, tuple(attempts), "dlq", policy.dead_letter_destination(record), total, True
        )
    return Plan(policy, tuple(attempts), "discard", None, total, True)
