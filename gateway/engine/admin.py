"""Admin verbs over a group: describe, list, find, resend and delete dead letters, waiting
retries by attempt, purge, list topics and groups.

`GroupAdmin` works on the engine's back end (the engine gives it at construction) and learns what
the engine itself holds through its read-only queries (`gateway.engine.port.EngineQueries`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from gateway.backend import Backend, OutMessage, StoredMessage, TopicStats
from gateway.core.destinations import Destinations
from gateway.core.naming import NamingScheme
from gateway.core.properties import ORIGIN_GROUP, ORIGIN_TOPIC, made_by, visible_properties
from gateway.engine.admin_move import MoveVerbs
from gateway.engine.admin_scan import (
    MAX_SCAN,
    MAX_WAITING_SCAN,
    PEEK_CHUNK,
    by_attempt,
    destination_groups,
    matches,
    pages,
    view_of,
)
from gateway.engine.api import (
    ConsumerView,
    DeadLetterFilter,
    DeadLetterPage,
    DeadLetterView,
    GroupView,
    Scanned,
    Scans,
    WaitingRetries,
)
from gateway.engine.port import EngineQueries
from gateway.errors import InvalidArgument, NotFound

SCANS_MAX_ROWS = 2 * MAX_WAITING_SCAN
"""Messages of shared destinations one request describing many groups (`scans`) reads in all.
A name shared by groups (`{topic}.dlq`) is read once for each group (each has its own view of
it): 1000 groups of one topic with 100,000 dead letters read 10**8 messages for one overview.
Past this, a group's counts are its destination's own (every group's copies, an upper bound)."""


def _of_topic(message: StoredMessage, topic: str, group: str) -> bool:
    """Whether a message of a group's retry or dead-letter destination is its own of `topic`.
    Destinations named by group alone (`%RETRY%g`, `%DLQ%g`) hold the group's messages of
    every topic, those named by topic alone (`{topic}.dlq`) every group's of the topic; each
    copy records its origin (one that records none counts for any topic or group)."""
    return made_by(message.properties, topic, group)


def _shared(name_of: Callable[[str, str], str], topic: str, group: str) -> bool:
    """Whether a naming function gives `group` one destination for every topic, or `topic` one
    for every group."""
    return _by_topics(name_of, topic, group) or _by_groups(name_of, topic, group)


def _by_topics(name_of: Callable[[str, str], str], topic: str, group: str) -> bool:
    return name_of(topic, group) == name_of(f"{topic}-other", group)


def _by_groups(name_of: Callable[[str, str], str], topic: str, group: str) -> bool:
    return name_of(topic, group) == name_of(topic, f"{group}-other")


def _check(topic: str, group: str) -> None:
    if not topic:
        raise InvalidArgument("topic", topic, "a non-empty topic name")
    if not group:
        raise InvalidArgument("group", group, "a non-empty group name")


class GroupAdmin(MoveVerbs):
    """The admin verbs, over one back end and the engine that runs on it (`AdminPort`); those
    that move messages elsewhere are `MoveVerbs`."""

    def __init__(
        self, backend: Backend, engine: EngineQueries, now_ms: Callable[[], int]
    ) -> None:
        self._backend = backend
        self._engine = engine
        self._now_ms = now_ms
        self._destinations = Destinations(engine.naming_schemes())

    async def topics(self) -> list[str]:
        """Every topic the back end holds."""
        return list(await self._backend.topics())

    async def naming_of(self, topic: str, group: str) -> NamingScheme:
        """The scheme the group's subscription uses; else (or while nothing exists under it,
        as after the group moved to another policy) the one whose topics exist."""
        state = self._engine.group_state(topic, group)
        known = set(await self._backend.topics())
        if state is not None:
            current = state.policy.naming
            if {current.dead_letter_topic(topic, group),
                    current.retry_topic(topic, group)} & known:
                return current
        schemes = self._engine.naming_schemes()
        for scheme in schemes:
            if scheme.dead_letter_topic(topic, group) in known:
                return scheme
        for scheme in schemes:
            if scheme.retry_topic(topic, group) in known:
                return scheme
        return state.policy.naming if state is not None else schemes[0]

    async def groups(self, known: Sequence[tuple[str, str]] = ()) -> list[tuple[str, str]]:
        """Every (topic, group) the engine runs, those in `known`, those whose position the
        back end keeps (a group that consumed before a restart; not a group's position in its
        own retry or dead-letter destination), and those whose retry or dead-letter topics the
        back end holds; sorted."""
        found = {(g.topic, g.group) for g in self._engine.groups()}
        found.update(known)
        found.update((topic, group) for topic, group in await self._backend.groups()
                     if not any(by in (None, group)
                                for _, by in self._destinations.owners(topic)))
        found |= await destination_groups(self._backend, self._destinations,
                                          await self._backend.topics())
        return sorted(found)

    async def describe(self, topic: str, group: str, scans: Scans | None = None) -> GroupView:
        """See `EngineQueries.describe`; `scans` keeps what group-wide destinations were read
        for, so that describing many groups reads each destination once."""
        _check(topic, group)
        scheme = await self.naming_of(topic, group)
        retry_topic = scheme.retry_topic(topic, group)
        dlq_topic = scheme.dead_letter_topic(topic, group)
        now = self._now_ms()
        backend = self._backend
        state = self._engine.group_state(topic, group)
        # A group that gets messages published with a delay at once counts them as ready.
        delays = state is None or state.policy.honours_delays
        main = await backend.stats(topic, group, now, publish_delays=delays)
        retry = await backend.stats(retry_topic, group, now, publish_delays=delays)
        dead = await backend.stats(dlq_topic, group, now)
        dead_letters = dead.ready + dead.delayed + dead.leased
        if dead_letters and _shared(scheme.dead_letter_topic, topic, group):
            counted = await self._count_of_topic(dlq_topic, group, topic, scans)
            dead_letters = dead_letters if counted is None else counted
        unsettled = self._engine.unsettled(topic, group)
        held = sum(1 for u in unsettled if u.held)
        if retry.ready + retry.delayed and (
                _by_groups(scheme.retry_topic, topic, group)
                or (_by_topics(scheme.retry_topic, topic, group)
                    and self._other_topics(topic, group))):
            retry = await self._retries_of_topic(retry_topic, group, topic, now,
                                                 {u.message_id for u in unsettled},
                                                 scans) or retry
        next_times = [t for t in (main.next_visible_ms, retry.next_visible_ms) if t]
        consumers: tuple[ConsumerView, ...] = ()
        policy, max_retries = "", -1
        if state is not None:
            policy = state.policy.name
            limit = state.policy.max_retries
            max_retries = -1 if limit is None else limit
            holding = Counter(u.consumer_id for u in unsettled if not u.held)
            consumers = tuple(ConsumerView(cid, holding.get(cid, 0))
                              for cid in state.consumer_ids)
        return GroupView(
            ready=main.ready + retry.ready,
            delayed=main.delayed,
            inflight=len(unsettled) - held,
            waiting_retry=retry.delayed + held,
            dead_letters=dead_letters,
            oldest_ready_ms=min([t for t in (main.oldest_ready_ms, retry.oldest_ready_ms) if t],
                                default=0),
            next_retry_ms=min(next_times, default=0),
            # Where the group's policy really puts them ("" when it keeps retries in place,
            # or discards); the scheme's names when the gateway runs no subscription for it.
            retry_topic=(state.policy.retry_topic(topic, group) if state is not None
                         else retry_topic),
            dead_letter_topic=(state.policy.dead_letter_topic(topic, group) if state is not None
                               else dlq_topic),
            policy=policy,
            naming=scheme.name,
            max_retries=max_retries,
            consumers=consumers,
            removes_exported=self._backend.removes_by_position,
        )

    async def _scan(self, name: str, group: str, scans: Scans | None) -> Scanned | None:
        """The group's messages in a group-wide destination, the first MAX_WAITING_SCAN, as
        (origin topic or None, message id, deliver at, publish time); read once per `scans`,
        and None once `scans` holds SCANS_MAX_ROWS messages (not read)."""
        if scans is not None and (name, group) in scans:
            return scans[(name, group)]
        if scans is not None and sum(len(s.rows) for s in scans.values()) >= SCANS_MAX_ROWS:
            return None
        rows: list[tuple[str | None, str | None, str, int, int]] = []
        async for chunk in pages(self._backend, name, group, -1, MAX_WAITING_SCAN):
            rows.extend((m.properties.get(ORIGIN_TOPIC), m.properties.get(ORIGIN_GROUP),
                         m.message_id, m.deliver_at_ms, m.publish_ms) for m in chunk)
        scanned = Scanned(rows, len(rows) < MAX_WAITING_SCAN)
        if scans is not None:
            scans[(name, group)] = scanned
        return scanned

    async def _count_of_topic(self, name: str, group: str, topic: str,
                              scans: Scans | None = None) -> int | None:
        """How many of the group's messages in a group-wide destination belong to `topic` (the
        first MAX_WAITING_SCAN looked at; a copy that records no origin counts for any topic)."""
        scanned = await self._scan(name, group, scans)
        if scanned is None:
            return None
        return sum(1 for origin, by, *_ in scanned.rows
                   if origin in (None, topic) and by in (None, group))

    def _other_topics(self, topic: str, group: str) -> bool:
        """Whether the engine runs `group` on another topic too (so that a group-wide
        destination may hold copies of other topics)."""
        return any(g.group == group and g.topic != topic for g in self._engine.groups())

    async def _retries_of_topic(self, name: str, group: str, topic: str, now: int,
                                in_flight: set[str], scans: Scans | None = None
                                ) -> TopicStats | None:
        """The group's retries of `topic` in a group-wide retry destination: due and waiting
        apart, those in flight left out; None when it holds more than MAX_WAITING_SCAN (or
        the request read SCANS_MAX_ROWS already)."""
        scanned = await self._scan(name, group, scans)
        if scanned is None or not scanned.complete:
            return None
        ready = delayed = 0
        oldest: int | None = None
        next_due: int | None = None
        for origin, by, message_id, deliver_at_ms, publish_ms in scanned.rows:
            if origin not in (None, topic) or by not in (None, group) or message_id in in_flight:
                continue
            if deliver_at_ms > now:
                delayed += 1
                next_due = min(next_due or deliver_at_ms, deliver_at_ms)
            else:
                ready += 1
                oldest = min(oldest or publish_ms, publish_ms)
        return TopicStats(ready=ready, delayed=delayed, leased=0, oldest_ready_ms=oldest,
                          next_visible_ms=next_due)

    async def _dlq(self, topic: str, group: str) -> str:
        _check(topic, group)
        scheme = await self.naming_of(topic, group)
        return scheme.dead_letter_topic(topic, group)

    async def _dlq_shared(self, topic: str, group: str) -> bool:
        scheme = await self.naming_of(topic, group)
        return _shared(scheme.dead_letter_topic, topic, group)

    async def dead_letters(
        self, topic: str, group: str, limit: int, after: int,
        where: DeadLetterFilter | None = None,
    ) -> DeadLetterPage:
        """A page of dead letters after position `after`. With a filter, the page holds those
        that match among the next `MAX_SCAN` at most (it may hold fewer than `limit` with more
        to come)."""
        if not 1 <= limit <= 1000:
            raise InvalidArgument("limit", limit, "1..1000")
        dlq = await self._dlq(topic, group)
        shared = await self._dlq_shared(topic, group)
        if (where is None or where.empty()) and not shared:
            page = await self._backend.peek(dlq, group, limit + 1, after)
            more = len(page) > limit
            page = page[:limit]
            return DeadLetterPage(tuple(view_of(m, topic) for m in page),
                                  page[-1].lease.position if more and page else -1, len(page))
        views: list[DeadLetterView] = []
        scanned, last, ended = 0, after, True
        async for chunk in pages(self._backend, dlq, group, after, MAX_SCAN + 1):
            for m in chunk:
                if len(views) == limit or scanned == MAX_SCAN:
                    ended = False
                    break
                scanned += 1
                last = m.lease.position
                if not _of_topic(m, topic, group):
                    continue
                view = view_of(m, topic)
                if where is None or matches(view, where):
                    views.append(view)
            if not ended:
                break
        return DeadLetterPage(tuple(views), -1 if ended else last, scanned)

    async def dead_letter(self, topic: str, group: str, message_id: str) -> DeadLetterView:
        """One dead letter by message id (the latest, should the id be there twice)."""
        dlq = await self._dlq(topic, group)
        found: StoredMessage | None = None
        async for chunk in pages(self._backend, dlq, group):
            for m in chunk:
                if m.message_id == message_id and _of_topic(m, topic, group):
                    found = m
        if found is None:
            raise NotFound(f"group {group!r} of topic {topic!r} has no dead letter "
                           f"{message_id!r}")
        return view_of(found, topic)

    async def _chosen(
        self, dlq: str, topic: str, group: str, message_ids: Sequence[str],
        where: DeadLetterFilter | None,
    ) -> list[StoredMessage]:
        wanted = set(message_ids)
        chosen: list[StoredMessage] = []
        async for chunk in pages(self._backend, dlq, group):
            for m in chunk:
                if (wanted and m.message_id not in wanted) or not _of_topic(m, topic, group):
                    continue
                if where is not None and not where.empty() and not matches(view_of(m, topic),
                                                                           where):
                    continue
                chosen.append(m)
        return chosen

    async def resend(
        self, topic: str, group: str, message_ids: Sequence[str],
        where: DeadLetterFilter | None = None,
    ) -> int:
        """Publish dead letters back to their original topic as fresh messages; remove them.
        No ids: every dead letter (matching `where`)."""
        dlq = await self._dlq(topic, group)
        chosen = await self._chosen(dlq, topic, group, message_ids, where)
        backend = self._backend
        for start in range(0, len(chosen), PEEK_CHUNK):
            part = chosen[start:start + PEEK_CHUNK]
            by_topic: dict[str, list[OutMessage]] = {}
            for m in part:
                origin = m.properties.get(ORIGIN_TOPIC, topic)
                by_topic.setdefault(origin, []).append(
                    OutMessage(m.body, dict(visible_properties(m.properties)), m.key, m.tag, 0,
                               m.message_id)
                )
            for origin, messages in by_topic.items():
                await backend.publish(origin, messages)
            await backend.remove([m.lease for m in part])
        return len(chosen)

    async def delete(
        self, topic: str, group: str, message_ids: Sequence[str],
        where: DeadLetterFilter | None = None,
    ) -> int:
        """Remove dead letters (by id, matching `where`; no ids: every one matching)."""
        dlq = await self._dlq(topic, group)
        chosen = await self._chosen(dlq, topic, group, message_ids, where)
        removed = 0
        for start in range(0, len(chosen), PEEK_CHUNK):
            part = chosen[start:start + PEEK_CHUNK]
            removed += await self._backend.remove([m.lease for m in part])
        return removed

    async def waiting_retries(self, topic: str, group: str) -> WaitingRetries:
        """Retry copies of the group's messages of `topic` that wait on its retry topic, and
        ordered retries the engine holds, by attempt number (the first MAX_WAITING_SCAN)."""
        _check(topic, group)
        scheme = await self.naming_of(topic, group)
        retry_topic = scheme.retry_topic(topic, group)
        now = self._now_ms()
        waiting: list[tuple[int, int]] = [
            (u.attempt, 0) for u in self._engine.unsettled(topic, group) if u.held
        ]
        complete = True
        if retry_topic != topic:
            async for chunk in pages(self._backend, retry_topic, group, -1,
                                     MAX_WAITING_SCAN + 1):
                for m in chunk:
                    if m.deliver_at_ms <= now:
                        continue
                    if not _of_topic(m, topic, group):
                        continue
                    if len(waiting) >= MAX_WAITING_SCAN:
                        complete = False
                        break
                    waiting.append((m.attempt, m.deliver_at_ms))
        buckets, next_due, total = by_attempt(waiting)
        return WaitingRetries(tuple(buckets), next_due, total, complete)

    async def purge(self, topic: str, group: str, *, in_flight: bool = False) -> int:
        """Remove the group's ready, delayed and waiting-retry messages (not those in flight:
        their consumers still ack them, or fail them back; with `in_flight`, those go too, their
        settles changing nothing: a deleted queue's). Returns how many were removed."""
        _check(topic, group)
        backend = self._backend
        scheme = await self.naming_of(topic, group)
        count = await backend.purge(topic, group, leased=in_flight)
        held = self._engine.drop_held(topic, group)  # ordered retries waiting in the engine
        if held:
            count += await backend.remove(held)
        retry_topic = scheme.retry_topic(topic, group)
        if retry_topic == topic:
            return count
        if not _shared(scheme.retry_topic, topic, group):
            return count + await backend.purge(retry_topic, group, leased=in_flight)
        # The group's retry copies of other topics wait there too: only this topic's go.
        mine = [m.lease async for chunk in pages(backend, retry_topic, group)
                for m in chunk if _of_topic(m, topic, group)]
        for start in range(0, len(mine), PEEK_CHUNK):
            count += await backend.remove(mine[start:start + PEEK_CHUNK],
                                          keep_leased=not in_flight)
        return count
