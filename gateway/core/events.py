"""Events the retry state machine reacts to. Receipts identify one delivery."""

from __future__ import annotations

from gateway.values import value


@value
class Deliver:
    """Hand a visible message to a consumer. `invisible_ms` is chosen per receive where the
    policy allows it (simple consumer); otherwise the policy's delivery timeout applies."""

    receipt: str
    invisible_ms: int | None = None


@value
class Ack:
    receipt: str


@value
class Fail:
    """The consumer reports failure: RECONSUME_LATER, nack, reconsumeLater, negativeAcknowledge.

    `delay_ms` or `delay_level` request a wait where the policy accepts one."""

    receipt: str
    delay_ms: int | None = None
    delay_level: int | None = None
    reason: str = ""


@value
class DeadlinePassed:
    """The delivery's ack timeout or invisible duration ran out (or a failed invisible delivery's
    redelivery time came)."""


@value
class Extend:
    """Change the invisible duration: the deadline restarts from now. The delivery continues
    under `new_receipt`; the old receipt is spent."""

    receipt: str
    invisible_ms: int
    new_receipt: str


@value
class ConsumerLost:
    """The consumer holding the delivery went away (disconnect, close, rebalance)."""


@value
class RetryDue:
    """A waiting retry's interval has passed."""


@value
class DeadLetterNow:
    """Move the delivered message to the dead-letter destination at once."""

    receipt: str
    reason: str = ""


Event = Deliver | Ack | Fail | DeadlinePassed | Extend | ConsumerLost | RetryDue | DeadLetterNow


def event_name(event: Event) -> str:
    return type(event).__name__
