"""What the admin verbs read from a back end: dead letters page by page and which of them a
filter means, the groups whose retry or dead-letter topics exist, and waiting retries by attempt.

Every scan is bounded: a page of dead letters looks at no more than `MAX_SCAN` messages, a count
of waiting retries at no more than `MAX_WAITING_SCAN`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

from gateway.backend import Backend, StoredMessage
from gateway.core.destinations import Destinations
from gateway.core.properties import DEAD_AT, DEAD_REASON, ORIGIN_TOPIC, visible_properties
from gateway.engine.api import AttemptRetries, DeadLetterFilter, DeadLetterView

PEEK_CHUNK = 500
"""Messages read from a back end per `peek`."""
MAX_SCAN = 10_000
"""Dead letters one filtered page looks at."""
MAX_WAITING_SCAN = 100_000
"""Waiting retries a count by attempt looks at."""
ORIGIN_SAMPLE = 1000
"""Dead letters (or retries) read to learn which topics a topic-less destination holds."""


def view_of(message: StoredMessage, topic: str) -> DeadLetterView:
    """A dead letter as the admin verbs show it (`topic` when it records no origin)."""
    props = message.properties
    try:
        dead_at = int(props.get(DEAD_AT, "0") or 0)
    except ValueError:
        dead_at = 0
    return DeadLetterView(
        message=message,
        original_topic=props.get(ORIGIN_TOPIC, topic),
        reason=props.get(DEAD_REASON, ""),
        dead_lettered_ms=dead_at,
        properties=dict(visible_properties(props)),
    )


def matches(view: DeadLetterView, where: DeadLetterFilter) -> bool:
    """True when the dead letter is one `where` means."""
    attempt = view.message.attempt
    if where.min_attempt and attempt < where.min_attempt:
        return False
    if where.max_attempt and attempt > where.max_attempt:
        return False
    if where.since_ms and view.dead_lettered_ms < where.since_ms:
        return False
    if where.until_ms and view.dead_lettered_ms >= where.until_ms:
        return False
    if where.reason and where.reason.casefold() not in view.reason.casefold():
        return False
    return not where.text or _contains(view, where.text.casefold())


def _contains(view: DeadLetterView, needle: str) -> bool:
    m = view.message
    fields: list[str] = [m.message_id, m.key, m.tag]
    for key, value in view.properties.items():
        fields.append(key)
        fields.append(value)
    if any(needle in f.casefold() for f in fields):
        return True
    return needle in m.body.decode("utf-8", "replace").casefold()


async def pages(
    backend: Backend, topic: str, group: str, after: int = -1, limit: int | None = None
) -> AsyncIterator[list[StoredMessage]]:
    """The unacked messages of `topic` for `group` after position `after`, a chunk at a time;
    at most `limit` of them (None: all)."""
    seen = 0
    while limit is None or seen < limit:
        want = PEEK_CHUNK if limit is None else min(PEEK_CHUNK, limit - seen)
        page = await backend.peek(topic, group, want, after)
        if not page:
            return
        seen += len(page)
        after = page[-1].lease.position
        yield page
        if len(page) < want:
            return


async def destination_groups(
    backend: Backend, destinations: Destinations, topics: Iterable[str]
) -> set[tuple[str, str]]:
    """(topic, group) pairs whose retry or dead-letter topic is among `topics`. A name that
    carries no topic (`%DLQ%group`) tells its topics through the origin its messages record; a
    name that carries no group tells nothing."""
    known = set(topics)
    found: set[tuple[str, str]] = set()
    for name in sorted(known):
        for owner_topic, owner_group in destinations.owners(name):
            if owner_group is None:
                continue
            if owner_topic is not None:
                if owner_topic in known:
                    found.add((owner_topic, owner_group))
                continue
            async for page in pages(backend, name, owner_group, limit=ORIGIN_SAMPLE):
                for m in page:
                    origin = m.properties.get(ORIGIN_TOPIC)
                    if origin:
                        found.add((origin, owner_group))
    return found


def by_attempt(waiting: Iterable[tuple[int, int]]) -> tuple[list[AttemptRetries], int, int]:
    """(attempt, due ms or 0) pairs counted by attempt: the buckets, the earliest due, the
    total."""
    counts: dict[int, list[int]] = {}
    total = 0
    for attempt, due in waiting:
        total += 1
        bucket = counts.setdefault(attempt, [0, 0])
        bucket[0] += 1
        if due and (not bucket[1] or due < bucket[1]):
            bucket[1] = due
    buckets = [AttemptRetries(a, c, d) for a, (c, d) in sorted(counts.items())]
    dues = [b.next_due_ms for b in buckets if b.next_due_ms]
    return buckets, min(dues, default=0), total
