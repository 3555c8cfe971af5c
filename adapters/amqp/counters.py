"""The one attempt counter of a RabbitMQ delivery, reconciled from the headers the broker adds.

The gateway writes `x-gateway-attempt` (deliveries the message already had) and
`x-gateway-retries` on every copy it publishes. RabbitMQ keeps its own evidence of deliveries the
gateway never recorded: the `redelivered` flag and the quorum-queue `x-delivery-count` header for a
copy handed out again after a consumer vanished (a gateway crash), and `x-death` entries with reason
`rejected` left by plain consumers that rejected the message into a dead-letter loop. The rule is in
`reconcile_attempt`; everything here is pure and reads header dicts of any shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gateway.core.properties import ATTEMPT, COUNT_MAX, RETRIES, read_count

DEATH_HEADER = "x-death"
DELIVERY_COUNT_HEADER = "x-delivery-count"


def header_int(value: object, limit: int = COUNT_MAX) -> int | None:
    """A count or time read from an AMQP header value (int, float, str or bytes); None when it
    cannot be read or is above `limit` (any AMQP client may write these headers, so the value may
    be anything: '²', 2**64, NaN). A negative number reads as 0."""
    if type(value) is int:  # what the gateway writes: the common case first
        return max(value, 0) if value <= limit else None
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float):
        if value != value or abs(value) == float("inf"):
            return None
        value = int(value)
    if isinstance(value, int):
        return max(value, 0) if value <= limit else None
    if isinstance(value, bytes | bytearray):
        value = bytes(value).decode("utf-8", "replace")
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("-") and read_count(text[1:], 2**63) is not None:
            return 0
        return read_count(text, limit)
    return None


def header_text(value: object) -> str:
    """A header value as text: bytes decoded as UTF-8, booleans as true/false, others via str."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


def _death_entries(raw: object) -> list[Mapping[object, object]]:
    """The `x-death` entries that are tables; a lone table counts as one entry, junk as none."""
    if isinstance(raw, Mapping):
        return [raw]
    if isinstance(raw, Sequence) and not isinstance(raw, str | bytes | bytearray):
        return [entry for entry in raw if isinstance(entry, Mapping)]
    return []


def rejected_deliveries(headers: Mapping[str, object], queue: str) -> int:
    """Deliveries from `queue` that ended in a reject recorded by `x-death` (reason `rejected`).

    Entries for other queues or other reasons (`expired` hops through delay queues, `maxlen`,
    `delivery_limit`) are not deliveries from this queue and are ignored; an entry without a usable
    `count` counts once, since RabbitMQ only writes an entry when the event happened.
    """
    total = 0
    for entry in _death_entries(headers.get(DEATH_HEADER)):
        if header_text(entry.get("reason", "")) != "rejected":
            continue
        if header_text(entry.get("queue", "")) != queue:
            continue
        count = header_int(entry.get("count"))
        total += 1 if count is None else count
    return total


def redeliveries(headers: Mapping[str, object], redelivered: bool) -> int:
    """Deliveries of this very copy before the current one that no header of the gateway records.

    Quorum queues say how many in `x-delivery-count`; classic queues only set the `redelivered`
    flag, which counts as one (a lower bound: the broker keeps no more).
    """
    count = header_int(headers.get(DELIVERY_COUNT_HEADER))
    if count is not None:
        return count
    return 1 if redelivered else 0


def reconcile_attempt(headers: Mapping[str, object] | None, redelivered: bool, queue: str) -> int:
    """Deliveries before this one: `max(H, R) + D`.

    * H: `x-gateway-attempt`, written by the gateway on every copy it publishes (0 if absent);
    * R: deliveries from `queue` that plain consumers rejected, per `x-death`
      (`rejected_deliveries`);
    * D: redeliveries of this copy since it was published (`redeliveries`).

    H is the truth whenever present: a copy the gateway publishes already took R into H, so the max
    never counts a reject twice, whether or not the copy still carries the old `x-death`. D only
    counts deliveries of the current copy, which the gateway republishes with a fresh H on every
    release, so a delivery lost in a gateway crash counts once and nothing counts twice. Delay-queue
    hops (`x-death` reason `expired`) are waits, not deliveries, and never count.
    """
    data: Mapping[str, object] = headers or {}
    stated = header_int(data.get(ATTEMPT)) or 0
    total = max(stated, rejected_deliveries(data, queue)) + redeliveries(data, redelivered)
    return min(total, COUNT_MAX)


def stated_retries(headers: Mapping[str, object] | None) -> int:
    """Failures counted by the gateway so far (`x-gateway-retries`, 0 if absent or unreadable)."""
    return header_int((headers or {}).get(RETRIES)) or 0
