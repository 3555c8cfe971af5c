"""The retry state machine: one pure decision function for every dialect.

`decide(record, event, policy, now_ms)` returns the next record and what must happen to the stored
message. It reads no clock and does no I/O; the engine carries decisions out.
"""

from __future__ import annotations

import enum

from gateway.core.events import (
    Ack,
    ConsumerLost,
    DeadLetterNow,
    DeadlinePassed,
    Deliver,
    Event,
    Extend,
    Fail,
    RetryDue,
    event_name,
)
from gateway.core.policy import Placement, RetryMode, RetryPolicy, RetryRequest, check_range
from gateway.core.record import Record
from gateway.core.states import (
    COMMITTED,
    DEAD_LETTERED,
    DISCARDED,
    INFLIGHT,
    READY,
    WAITING_RETRY,
)
from gateway.errors import IllegalTransition, StaleReceipt
from gateway.values import value


class Outcome(enum.Enum):
    """What the engine does with the stored message."""

    DELIVER = "deliver"
    """Hand it to the consumer with the record's deadline."""
    COMMIT = "commit"
    """Remove it for the group."""
    RETRY = "retry"
    """Store a copy on `destination` visible after `delay_ms`, then remove the original."""
    REDELIVER = "redeliver"
    """Make the same message visible again after `delay_ms` (with the record's counters)."""
    EXTEND = "extend"
    """Keep it in flight with the new deadline."""
    DEAD_LETTER = "dead_letter"
    """Store a copy on `destination` (the dead-letter topic), then remove the original."""
    DISCARD = "discard"
    """Remove it; nothing is kept."""
    NONE = "none"
    """Only the record changes."""


# Members as module constants (see `gateway.core.states`).
DELIVER = Outcome.DELIVER
COMMIT = Outcome.COMMIT
RETRY = Outcome.RETRY
REDELIVER = Outcome.REDELIVER
EXTEND = Outcome.EXTEND
DEAD_LETTER = Outcome.DEAD_LETTER
DISCARD = Outcome.DISCARD
NO_CHANGE = Outcome.NONE


@value
class Decision:
    """The next record and what to do with the stored message."""

    record: Record
    outcome: Outcome
    delay_ms: int = 0
    destination: str | None = None
    reason: str = ""

    @property
    def visible_at_ms(self) -> int:
        return self.record.visible_at_ms


def decide(record: Record, event: Event, policy: RetryPolicy, now_ms: int) -> Decision:
    """Apply `event` to `record` under `policy` at `now_ms`."""
    state = record.state
    if state is COMMITTED or state is DEAD_LETTERED or state is DISCARDED:
        if isinstance(event, Ack | Fail | Extend | DeadLetterNow):
            raise StaleReceipt(event.receipt, "already settled")
        raise IllegalTransition(record.state.value, event_name(event), "the message is settled")
    match event:
        case Deliver():
            return _deliver(record, event, policy, now_ms)
        case Ack():
            _live(record, event.receipt, event)
            return Decision(record.evolve(state=COMMITTED, receipt=""), COMMIT)
        case Fail():
            _live(record, event.receipt, event)
            request = RetryRequest(event.delay_ms, event.delay_level)
            return _failure(record, policy, now_ms, request, event.reason or "consumer failure")
        case DeadlinePassed():
            return _deadline(record, event, policy, now_ms)
        case Extend():
            return _extend(record, event, policy, now_ms)
        case ConsumerLost():
            return _lost(record, event, policy, now_ms)
        case RetryDue():
            if record.state is not WAITING_RETRY or now_ms < record.visible_at_ms:
                raise IllegalTransition(record.state.value, "RetryDue", "no retry is due")
            return Decision(record.evolve(state=READY), NO_CHANGE)
        case DeadLetterNow():
            _live(record, event.receipt, event)
            return _exhaust(record, policy, event.reason or "dead-lettered on request")
    raise IllegalTransition(record.state.value, event_name(event), "unknown event")


def _live(record: Record, receipt: str, event: Event) -> None:
    """A settle must carry the receipt of the delivery in flight; any other is stale."""
    if record.state is not INFLIGHT or not receipt or receipt != record.receipt:
        raise StaleReceipt(receipt)


def delivery_deadline(policy: RetryPolicy, invisible_ms: int | None, now_ms: int) -> int:
    """The deadline of a delivery made at `now_ms` under `policy` (0: none): the invisible
    duration asked for, checked against the policy's range, or the policy's own timeout."""
    if invisible_ms is not None:
        if policy.invisible_range_ms is None:
            raise _fixed_timeout(policy, invisible_ms)
        low, high = policy.invisible_range_ms
        timeout: int | None = check_range("invisible_ms", invisible_ms, low, high, "ms")
    else:
        timeout = policy.delivery_timeout_ms
    return now_ms + timeout if timeout is not None else 0


def delivered(
    message_id: str, topic: str, group: str, attempt: int, retries: int, receipt: str,
    deadline_ms: int, now_ms: int,
) -> Record:
    """The record of a READY message (visible at `now_ms`, `attempt` deliveries so far)
    delivered at `now_ms` with `receipt` and `deadline_ms` (`delivery_deadline`): what
    `decide` makes of it on `Deliver`, for a batch delivered at one time under one policy
    without an event and a decision per message."""
    return Record(message_id, topic, group, INFLIGHT, attempt + 1, retries, now_ms, deadline_ms,
                  now_ms, receipt)


def _deliver(record: Record, event: Deliver, policy: RetryPolicy, now_ms: int) -> Decision:
    visible = record.state is READY or record.state is WAITING_RETRY
    if not visible or now_ms < record.visible_at_ms:
        raise IllegalTransition(record.state.value, "Deliver", "the message is not visible")
    deadline = delivery_deadline(policy, event.invisible_ms, now_ms)
    new = record.evolve(
        state=INFLIGHT,
        attempt=record.attempt + 1,
        deadline_ms=deadline,
        delivered_at_ms=now_ms,
        receipt=event.receipt,
    )
    return Decision(new, DELIVER)


def _fixed_timeout(policy: RetryPolicy, value: int) -> Exception:
    from gateway.errors import InvalidArgument

    fixed = policy.delivery_timeout_ms
    allowed = (
        f"policy {policy.name} has a fixed delivery timeout of {fixed} ms; leave it unset"
        if fixed is not None
        else f"policy {policy.name} has no invisible duration; leave it unset"
    )
    return InvalidArgument("invisible_ms", value, allowed)


def _failure(
    record: Record, policy: RetryPolicy, now_ms: int, request: RetryRequest, reason: str
) -> Decision:
    """A counted failure of the delivery in flight (consumer failure or timeout)."""
    if not policy.retries_enabled:
        gone = record.evolve(state=DISCARDED, receipt="")
        return Decision(gone, DISCARD, reason=f"{reason}; broadcast: dropped, no retry")
    retries = record.retries + 1 if policy.counts_failures else record.retries
    if policy.exhausted_after(retries):
        # Validate the request even when exhausted: bad input never passes silently.
        policy.backoff.delay_ms(record.retries + 1, request, record, now_ms)
        return _exhaust(record.evolve(retries=retries), policy, f"{reason}; retries exhausted")
    delay = policy.backoff.delay_ms(max(retries, 1), request, record, now_ms)
    if policy.mode is RetryMode.INVISIBLE:
        # Stays invisible, receipt spent, until the redelivery time (no WAITING_RETRY).
        new = record.evolve(retries=retries, deadline_ms=now_ms + delay, receipt="")
        return Decision(new, REDELIVER, delay, reason=reason)
    new = record.evolve(
        state=WAITING_RETRY,
        retries=retries,
        visible_at_ms=now_ms + delay,
        deadline_ms=0,
        receipt="",
    )
    if policy.placement is Placement.COPY:
        return Decision(new, RETRY, delay, policy.retry_destination(record), reason)
    return Decision(new, REDELIVER, delay, reason=reason)


def _exhaust(record: Record, policy: RetryPolicy, reason: str) -> Decision:
    if policy.dead_letter:
        new = record.evolve(state=DEAD_LETTERED, receipt="", deadline_ms=0)
        return Decision(new, DEAD_LETTER, 0, policy.dead_letter_destination(record), reason)
    new = record.evolve(state=DISCARDED, receipt="", deadline_ms=0)
    return Decision(new, DISCARD, reason=f"{reason}; no dead-letter destination")


def _deadline(record: Record, event: DeadlinePassed, policy: RetryPolicy, now_ms: int) -> Decision:
    if record.state is not INFLIGHT or record.deadline_ms == 0 or now_ms < record.deadline_ms:
        raise IllegalTransition(record.state.value, "DeadlinePassed", "no deadline has passed")
    if not record.receipt:
        # A failed invisible delivery: its redelivery time has come.
        return Decision(_ready(record, now_ms), NO_CHANGE)
    if policy.mode is RetryMode.INVISIBLE:
        # Timeout of a simple-style delivery: retry interval 0, counted as a failure.
        if not policy.retries_enabled:
            gone = record.evolve(state=DISCARDED, receipt="")
            return Decision(gone, DISCARD, reason="timeout; broadcast: dropped")
        retries = record.retries + 1 if policy.counts_failures else record.retries
        if policy.exhausted_after(retries):
            return _exhaust(record.evolve(retries=retries), policy, "timeout; retries exhausted")
        return Decision(_ready(record.evolve(retries=retries), now_ms), REDELIVER, 0,
                        reason="timeout")
    return _failure(record, policy, now_ms, RetryRequest(), "timeout")


def _ready(record: Record, now_ms: int) -> Record:
    return record.evolve(state=READY, visible_at_ms=now_ms, deadline_ms=0, receipt="")


def _extend(record: Record, event: Extend, policy: RetryPolicy, now_ms: int) -> Decision:
    _live(record, event.receipt, event)
    if record.deadline_ms and now_ms >= record.deadline_ms:
        raise IllegalTransition(
            record.state.value, "Extend", "the invisible duration already ran out"
        )
    low, high = policy.invisible_range_ms or policy.extend_range_ms
    check_range("invisible_ms", event.invisible_ms, low, high, "ms")
    if not event.new_receipt:
        raise StaleReceipt(event.new_receipt, "empty")
    new = record.evolve(deadline_ms=now_ms + event.invisible_ms, receipt=event.new_receipt)
    return Decision(new, EXTEND)


def _lost(record: Record, event: ConsumerLost, policy: RetryPolicy, now_ms: int) -> Decision:
    if record.state is not INFLIGHT:
        raise IllegalTransition(record.state.value, "ConsumerLost", "the message is not in flight")
    if not record.receipt:
        return Decision(record, NO_CHANGE)
    retries = record.retries
    if policy.lost_counts_as_failure and policy.counts_failures:
        # Counted (a broker's redelivery count) but READY again at once, without the retry wait.
        retries += 1
        if policy.exhausted_after(retries):
            return _exhaust(record.evolve(retries=retries), policy, "consumer lost; exhausted")
    new = _ready(record.evolve(retries=retries), now_ms)
    return Decision(new, REDELIVER, 0, reason="consumer lost")
