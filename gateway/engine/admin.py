"""Admin verbs over a group: describe, list and resend dead letters, purge."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.backend import OutMessage, StoredMessage
from gateway.core.naming import NamingScheme
from gateway.engine.engine import DEAD_AT, DEAD_REASON, ORIGIN_TOPIC, Engine, visible_properties
from gateway.errors import InvalidArgument


@dataclass(frozen=True, slots=True)
class GroupView:
    ready: int
    delayed: int
    inflight: int
    waiting_retry: int
    dead_letters: int
    oldest_ready_ms: int
    next_retry_ms: int
    retry_topic: str
    dead_letter_topic: str


@dataclass(frozen=True, slots=True)
class DeadLetterView:
    message: StoredMessage
    original_topic: str
    reason: str
    dead_lettered_ms: int
    properties: dict[str, str]


def _check(topic: str, group: str) -> None:
    if not topic:
        raise InvalidArgument("topic", topic, "a non-empty topic name")
    if not group:
        raise InvalidArgument("group", group, "a non-empty group name")


async def naming_of(engine: Engine, topic: str, group: str) -> NamingScheme:
    """The scheme the group's subscription uses; else the one whose topics exist."""
    sub = engine.subscriptions.get((topic, group))
    if sub is not None:
        return sub.policy.naming
    known = set(await engine.backend.topics())
    schemes = list(engine.registry.schemes.values())
    for scheme in schemes:
        if scheme.dead_letter_topic(topic, group) in known:
            return scheme
    for scheme in schemes:
        if scheme.retry_topic(topic, group) in known:
            return scheme
    return schemes[0]


async def describe(engine: Engine, topic: str, group: str) -> GroupView:
    _check(topic, group)
    scheme = await naming_of(engine, topic, group)
    retry_topic = scheme.retry_topic(topic, group)
    dlq_topic = scheme.dead_letter_topic(topic, group)
    now = engine.now_ms()
    main = await engine.backend.stats(topic, group, now)
    retry = await engine.backend.stats(retry_topic, group, now)
    dead = await engine.backend.stats(dlq_topic, group, now)
    inflight = [i for i in engine.inflight.values() if i.sub.spec.topic == topic
                and i.sub.group == group]
    held = sum(1 for i in inflight if i.held)
    next_times = [t for t in (main.next_visible_ms, retry.next_visible_ms) if t]
    return GroupView(
        ready=main.ready + retry.ready,
        delayed=main.delayed,
        inflight=len(inflight) - held,
        waiting_retry=retry.delayed + held,
        dead_letters=dead.ready + dead.delayed + dead.leased,
        oldest_ready_ms=min([t for t in (main.oldest_ready_ms, retry.oldest_ready_ms) if t],
                            default=0),
        next_retry_ms=min(next_times, default=0),
        retry_topic=retry_topic,
        dead_letter_topic=dlq_topic,
    )


async def dead_letters(
    engine: Engine, topic: str, group: str, limit: int, after: int
) -> tuple[list[DeadLetterView], int]:
    """A page of dead letters and the position to continue after (-1 at the end)."""
    _check(topic, group)
    if not 1 <= limit <= 1000:
        raise InvalidArgument("limit", limit, "1..1000")
    scheme = await naming_of(engine, topic, group)
    dlq = scheme.dead_letter_topic(topic, group)
    page = await engine.backend.peek(dlq, group, limit + 1, after)
    more = len(page) > limit
    page = page[:limit]
    views = [
        DeadLetterView(
            message=m,
            original_topic=m.properties.get(ORIGIN_TOPIC, topic),
            reason=m.properties.get(DEAD_REASON, ""),
            dead_lettered_ms=int(m.properties.get(DEAD_AT, "0") or 0),
            properties=dict(visible_properties(m.properties)),
        )
        for m in page
    ]
    return views, (page[-1].lease.position if more and page else -1)


async def resend(engine: Engine, topic: str, group: str, message_ids: list[str]) -> int:
    """Publish dead letters back to their original topic as fresh messages; remove them."""
    _check(topic, group)
    scheme = await naming_of(engine, topic, group)
    dlq = scheme.dead_letter_topic(topic, group)
    wanted = set(message_ids)
    chosen: list[StoredMessage] = []
    after = -1
    while True:
        page = await engine.backend.peek(dlq, group, 500, after)
        if not page:
            break
        chosen.extend(m for m in page if not wanted or m.message_id in wanted)
        after = page[-1].lease.position
    if not chosen:
        return 0
    by_topic: dict[str, list[OutMessage]] = {}
    for m in chosen:
        origin = m.properties.get(ORIGIN_TOPIC, topic)
        by_topic.setdefault(origin, []).append(
            OutMessage(m.body, dict(visible_properties(m.properties)), m.key, m.tag, 0,
                       m.message_id)
        )
    for origin, messages in by_topic.items():
        await engine.backend.publish(origin, messages)
    await engine.backend.remove([m.lease for m in chosen])
    return len(chosen)


async def purge(engine: Engine, topic: str, group: str) -> int:
    """Remove the group's ready, delayed and waiting-retry messages (not those in flight)."""
    _check(topic, group)
    scheme = await naming_of(engine, topic, group)
    count = await engine.backend.purge(topic, group)
    count += await engine.backend.purge(scheme.retry_topic(topic, group), group)
    return count
