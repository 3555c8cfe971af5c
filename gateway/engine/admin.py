"""Admin verbs over a group: describe, list and resend dead letters, purge, list topics.

`GroupAdmin` works on the engine's back end (the engine gives it at construction) and learns what
the engine itself holds through its read-only queries (`gateway.engine.port.EngineQueries`).
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.backend import Backend, OutMessage, StoredMessage
from gateway.core.naming import NamingScheme
from gateway.core.properties import DEAD_AT, DEAD_REASON, ORIGIN_TOPIC, visible_properties
from gateway.engine.api import DeadLetterView, GroupView
from gateway.engine.port import EngineQueries
from gateway.errors import InvalidArgument


def _check(topic: str, group: str) -> None:
    if not topic:
        raise InvalidArgument("topic", topic, "a non-empty topic name")
    if not group:
        raise InvalidArgument("group", group, "a non-empty group name")


class GroupAdmin:
    """The admin verbs, over one back end and the engine that runs on it (`AdminPort`)."""

    def __init__(
        self, backend: Backend, engine: EngineQueries, now_ms: Callable[[], int]
    ) -> None:
        self._backend = backend
        self._engine = engine
        self._now_ms = now_ms

    async def topics(self) -> list[str]:
        """Every topic the back end holds."""
        return list(await self._backend.topics())

    async def naming_of(self, topic: str, group: str) -> NamingScheme:
        """The scheme the group's subscription uses; else the one whose topics exist."""
        state = self._engine.group_state(topic, group)
        if state is not None:
            return state.policy.naming
        known = set(await self._backend.topics())
        schemes = self._engine.naming_schemes()
        for scheme in schemes:
            if scheme.dead_letter_topic(topic, group) in known:
                return scheme
        for scheme in schemes:
            if scheme.retry_topic(topic, group) in known:
                return scheme
        return schemes[0]

    async def describe(self, topic: str, group: str) -> GroupView:
        _check(topic, group)
        scheme = await self.naming_of(topic, group)
        retry_topic = scheme.retry_topic(topic, group)
        dlq_topic = scheme.dead_letter_topic(topic, group)
        now = self._now_ms()
        backend = self._backend
        main = await backend.stats(topic, group, now)
        retry = await backend.stats(retry_topic, group, now)
        dead = await backend.stats(dlq_topic, group, now)
        unsettled = self._engine.unsettled(topic, group)
        held = sum(1 for u in unsettled if u.held)
        next_times = [t for t in (main.next_visible_ms, retry.next_visible_ms) if t]
        return GroupView(
            ready=main.ready + retry.ready,
            delayed=main.delayed,
            inflight=len(unsettled) - held,
            waiting_retry=retry.delayed + held,
            dead_letters=dead.ready + dead.delayed + dead.leased,
            oldest_ready_ms=min([t for t in (main.oldest_ready_ms, retry.oldest_ready_ms) if t],
                                default=0),
            next_retry_ms=min(next_times, default=0),
            retry_topic=retry_topic,
            dead_letter_topic=dlq_topic,
        )

    async def dead_letters(
        self, topic: str, group: str, limit: int, after: int
    ) -> tuple[list[DeadLetterView], int]:
        """A page of dead letters and the position to continue after (-1 at the end)."""
        _check(topic, group)
        if not 1 <= limit <= 1000:
            raise InvalidArgument("limit", limit, "1..1000")
        scheme = await self.naming_of(topic, group)
        dlq = scheme.dead_letter_topic(topic, group)
        page = await self._backend.peek(dlq, group, limit + 1, after)
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

    async def resend(self, topic: str, group: str, message_ids: list[str]) -> int:
        """Publish dead letters back to their original topic as fresh messages; remove them."""
        _check(topic, group)
        scheme = await self.naming_of(topic, group)
        dlq = scheme.dead_letter_topic(topic, group)
        wanted = set(message_ids)
        chosen: list[StoredMessage] = []
        after = -1
        backend = self._backend
        while True:
            page = await backend.peek(dlq, group, 500, after)
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
            await backend.publish(origin, messages)
        await backend.remove([m.lease for m in chosen])
        return len(chosen)

    async def purge(self, topic: str, group: str) -> int:
        """Remove the group's ready, delayed and waiting-retry messages (not those in flight)."""
        _check(topic, group)
        scheme = await self.naming_of(topic, group)
        count = await self._backend.purge(topic, group)
        count += await self._backend.purge(scheme.retry_topic(topic, group), group)
        return count
