"""Delay queues: where RabbitMQ itself holds a message until its deliver-at time.

A delay queue is a durable queue nobody consumes, with `x-message-ttl` = the delay and a dead-letter
route back to the target queue through the default exchange. One TTL per queue keeps expiry in
order (RabbitMQ only expires messages at the head). Delays are rounded up to three significant
digits (at least 10 ms steps), so the number of delay queues stays small while a message is never
delivered early and at most 1 % late; `x-expires` removes a delay queue some time after its last
use.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.errors import InvalidArgument

DEFAULT_TEMPLATE = "{queue}.delay.{ms}"
MIN_STEP_MS = 10
EXPIRES_GRACE_MS = 60_000


def delay_bucket_ms(delay_ms: int) -> int:
    """The delay actually used for `delay_ms`: rounded up to 3 significant digits, 10 ms steps."""
    if delay_ms <= 0:
        return 0
    step: int = max(MIN_STEP_MS, 10 ** max(len(str(delay_ms)) - 3, 0))
    return -(-delay_ms // step) * step


def check_template(template: str) -> str:
    """Validate a delay-queue name template: it must use both `{queue}` and `{ms}`."""
    try:
        sample = template.format(queue="q", ms=1)
    except (KeyError, IndexError, ValueError) as exc:
        raise InvalidArgument("delay_queue_template", template, "only {queue} and {ms}") from exc
    if "{queue}" not in template or "{ms}" not in template or not sample:
        raise InvalidArgument("delay_queue_template", template, "must contain {queue} and {ms}")
    return template


@dataclass(frozen=True, slots=True)
class DelayQueue:
    """Name and declare arguments of the delay queue for one (target queue, delay)."""

    name: str
    target: str
    delay_ms: int

    @property
    def expires_ms(self) -> int:
        """Unused-queue lifetime: well past the time its last message dead-letters."""
        return 2 * self.delay_ms + EXPIRES_GRACE_MS

    def arguments(self) -> dict[str, object]:
        """`queue.declare` arguments; identical on every declare so redeclaring never conflicts."""
        return {
            "x-message-ttl": self.delay_ms,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": self.target,
            "x-expires": self.expires_ms,
        }


def delay_queue(template: str, target: str, delay_ms: int) -> DelayQueue:
    """The delay queue that holds a message for at least `delay_ms` before `target` gets it."""
    bucket = delay_bucket_ms(delay_ms)
    return DelayQueue(name=template.format(queue=target, ms=bucket), target=target, delay_ms=bucket)
