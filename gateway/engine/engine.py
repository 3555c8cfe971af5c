"""The engine: drives the retry state machine over a back end, in time.

It owns subscriptions and consumers, the one timer structure for delivery deadlines, and the
carrying-out of decisions (ack, retry copies, in-place redelivery, dead letters) in batches. Its
public surface is `gateway.engine.port`; its parts live in layers (`gateway.engine.base`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import deque
from collections.abc import Collection, Mapping, Sequence

import structlog

from gateway.backend import Backend, Lease, OutMessage
from gateway.core.naming import NamingScheme
from gateway.core.properties import BORN_MS, TIME_MAX_MS
from gateway.core.registry import Registry
from gateway.engine.admin import GroupAdmin
from gateway.engine.base import debug_enabled
from gateway.engine.clock import Clock
from gateway.engine.config import EngineConfig
from gateway.engine.dispatch import Subscription
from gateway.engine.observe import Observer
from gateway.engine.port import GroupState, Unsettled
from gateway.engine.pulling import Pulling
from gateway.errors import InvalidArgument
from gateway.limits import check_batch, check_message, check_name

log = structlog.get_logger("gateway.engine")


def with_born(messages: Sequence[OutMessage], born: Sequence[int]) -> list[OutMessage]:
    """`messages`, each with the first publish time `born` gives it (0: none) kept as
    `BORN_MS`, where retry and dead-letter copies keep theirs (`Settling`)."""
    if len(born) != len(messages):
        raise InvalidArgument("born", f"{len(born)} times", f"one per message ({len(messages)})")
    out = []
    for i, (message, at_ms) in enumerate(zip(messages, born, strict=True)):
        if not 0 <= at_ms <= TIME_MAX_MS:
            raise InvalidArgument(f"messages[{i}].born_ms", at_ms,
                                  f"0..{TIME_MAX_MS} (wall-clock ms; 0: when it is stored)")
        if at_ms:
            props = {**message.properties, BORN_MS: str(at_ms)}
            message = dataclasses.replace(message, properties=props)
        out.append(message)
    return out


class Engine(Pulling):
    """Publish, deliver (push and pull), settle, time out; see `gateway.engine.port` for what
    callers may use."""

    def __init__(
        self,
        backend: Backend,
        registry: Registry,
        clock: Clock,
        config: EngineConfig | None = None,
        observers: Sequence[Observer] = (),
    ) -> None:
        super().__init__(backend, registry, clock, config, observers)
        self.admin = GroupAdmin(backend, self, clock.now_ms)
        """Admin verbs over a group (describe, dead letters, resend, purge, topics)."""

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Open the back end and start the timers."""
        self._trace = log.bind()
        self._trace_debug = debug_enabled(self._trace)
        self.backend.on_leases_lost(self._leases_lost)
        await self.backend.open()
        self._known_topics.update(await self.backend.topics())
        self.timers.start()

    def _leases_lost(self) -> None:
        """The back end rebuilt its state after a failure: every delivery handed out before is
        void (settling it answers a stale receipt) and its message is delivered again by the
        back end. Deliveries a consumer has not taken yet are dropped and their credit given
        back; ordered keys blocked behind a void delivery are free again."""
        void = len(self.inflight)
        for inf in self.inflight.values():
            self._disarm(inf)
        self.inflight.clear()
        for sub in self.subscriptions.values():
            sub.held.clear()
            sub.blocked_keys.clear()
            for consumer in sub.consumers:
                consumer.forget_all()
                consumer.credit += len(consumer.outbox)
                consumer.outbox.clear()
            sub.kick()
        log.warning("back end recovered: deliveries handed out before are void", void=void)

    async def stop_dispatch(self) -> None:
        """No new deliveries from now on; settles are still accepted."""
        self._accepting = False
        for sub in self.subscriptions.values():
            sub.closed = True
            sub.kick()  # its dispatcher and its pulls waiting
            if sub.task is not None:
                sub.task.cancel()

    async def close(self) -> None:
        """Stop everything and close the back end."""
        await self.stop_dispatch()
        for sub in list(self.subscriptions.values()):
            for consumer in list(sub.consumers):
                consumer.on_close = None
                consumer.closed = True
                consumer.ready.set()
        await self.timers.stop()
        for task in list(self._tasks):
            task.cancel()
        await self.backend.close()

    async def run_due_timers(self) -> None:
        """Carry out every deadline the clock has reached now, and wait until that is done
        (tests on a manual clock)."""
        self.timers.poke()
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # -------------------------------------------------------------- publish
    async def publish(self, topic: str, messages: Sequence[OutMessage], *,
                      grown: Sequence[int] = (), born: Sequence[int] = (),
                      owner: str | None = "") -> list[str]:
        """Append `messages` to `topic`, durably. Every front end comes through here, so the
        checks that do not depend on the protocol are made here (`gateway.limits`). A message's
        `grown` bytes (the headers a front end wrote on its own copy) are not counted against
        the size limit: the limit is for what clients publish. `born`: the first publish time
        each message keeps (its producer's own send time; 0: when it is stored). Publishes of
        every front end together hand at most `EngineConfig.max_publish_bytes` to the back end
        at once (`gateway.engine.budget`): one that does not fit waits its turn. `owner`: the
        publishing principal, whose share of new topics a new `topic` takes."""
        check_name("topic", topic)
        check_batch("messages", len(messages))
        limit = self._config.max_message_bytes
        now = self.clock.now_ms()
        size = 0
        for i, message in enumerate(messages):
            extra = max(grown[i], 0) if i < len(grown) else 0
            size += check_message(message, i, now, limit + extra)
        if born:
            messages = with_born(messages, born)
        await self._check_topic(topic, owner)
        budget = self.publish_budget
        if not budget.take_now(size):
            await budget.take(size)
        try:
            if self.observers.publishing:
                return await self._publish_observed(topic, messages)
            ids = await self.backend.publish(topic, messages)
        finally:
            budget.give(size)
        self._known_topics.add(topic)
        return ids

    async def _publish_observed(self, topic: str, messages: Sequence[OutMessage]) -> list[str]:
        """`publish` with the publish observers told before and after (tracing)."""
        messages, done = self.observers.before_publish(topic, messages)
        try:
            ids = await self.backend.publish(topic, messages)
        except BaseException:
            self.observers.published(done, None)
            raise
        self.observers.published(done, ids)
        self._known_topics.add(topic)
        return ids

    # ------------------------------------------------------------- positions
    async def create_group(self, topic: str, group: str, *, at_end: bool = False,
                           owner: str | None = "") -> bool:
        """Create a group before anyone consumes (`Backend.create_group`), for `owner`."""
        check_name("topic", topic)
        check_name("group", group)
        await self._check_topic(topic, owner)
        if not self.backend.seekable:
            return False
        await self._check_group(topic, group, owner)
        return await self.backend.create_group(topic, group, at_end=at_end)

    async def drop_group(self, topic: str, group: str) -> bool:
        """Forget a group nobody consumes (`EnginePort.drop_group`)."""
        sub = self.subscriptions.get((topic, group))
        if sub is not None and sub.consumers:
            return False
        dropped = await self.backend.drop_group(topic, group)  # may fail: then nothing changed
        if sub is not None and not sub.consumers and self.subscriptions.get((topic, group)) is sub:
            self._forget_group((topic, group))
            sub.closed = True
            sub.wake.set()
            if sub.task is not None:
                sub.task.cancel()
            self._void(sub)
            self.observers.group_dropped(topic, group)
        elif dropped:
            self.observers.group_dropped(topic, group)
        return dropped

    async def seek(self, topic: str, group: str, *, message_id: str = "",
                   publish_ms: int = -1) -> None:
        """Move `group`'s position on `topic` to a message, or to the first one published at or
        after `publish_ms` (`Backend.seek`). Deliveries of the group still unsettled are void
        (settling one answers a stale receipt) and deliveries its consumers have not taken yet
        are dropped (their credit given back): from here the group reads the topic again."""
        check_name("topic", topic)
        check_name("group", group)
        if bool(message_id) == (publish_ms >= 0):
            raise InvalidArgument("seek", message_id or publish_ms,
                                  "a message id or a publish time (ms, 0 or more), not both")
        # The back end moves first (or refuses, changing nothing); then, with no await in
        # between, what the engine handed out before is void, a fetch under way included.
        await self.backend.seek(topic, group, message_id=message_id, publish_ms=publish_ms)
        sub = self.subscriptions.get((topic, group))
        if sub is not None:
            self._void(sub)
            sub.wake.set()

    def _void(self, sub: Subscription) -> None:
        for receipt in [r for r, inf in self.inflight.items() if inf.sub is sub]:
            inf = self.inflight.pop(receipt)
            self._disarm(inf)
            if inf.consumer is not None:
                inf.consumer.forget(receipt)
        sub.held.clear()
        sub.blocked_keys.clear()
        for consumer in list(sub.consumers):
            consumer.credit += len(consumer.outbox)
            consumer.outbox.clear()
            if consumer.cancelled and not consumer.receipts:
                sub.hand_over(consumer)  # it kept its place for what is void now

    def drop_held(self, topic: str, group: str,
                  positions: Collection[int] | None = None) -> list[Lease]:
        """Forget the group's ordered retries held in the engine for their in-place retry (a
        purge takes them with the other waiting retries; `migrate copy` those at `positions`,
        once their copies are stored elsewhere): their keys are free again. Returns their
        leases, which the caller removes from the back end."""
        sub = self.subscriptions.get((topic, group))
        if sub is None:
            return []
        wanted = None if positions is None else set(positions)
        held = [inf for inf in self.inflight.values() if inf.held and inf.sub is sub
                and (wanted is None or inf.stored.lease.position in wanted)]
        for inf in held:
            del self.inflight[inf.receipt]
            self._disarm(inf)
            if inf.consumer is not None:
                inf.consumer.forget(inf.receipt)
            if inf.blocks:
                sub.blocked_keys.discard(inf.stored.key)
        if held:
            sub.held = deque(inf for inf in sub.held if inf.receipt in self.inflight)
            sub.kick()
        return [inf.stored.lease for inf in held]

    # -------------------------------------------------------------- queries
    def unsettled_count(self) -> int:
        """Deliveries the engine waits on (held ordered retries included)."""
        return len(self.inflight)

    def pending_timers(self) -> int:
        """Deadlines the engine keeps: one per delivery (or held ordered retry) waiting on one,
        whether or not it shares its timer entry, and one per idle broadcast group."""
        return self._deadlines + len(self._expiring)

    def unsettled(self, topic: str, group: str) -> list[Unsettled]:
        """The deliveries of `group`'s subscription to `topic` the engine waits on."""
        return [
            Unsettled(inf.receipt, inf.stored.message_id,
                      inf.consumer.id if inf.consumer is not None else "", inf.held,
                      inf.record.attempt, inf.record.retries, inf.stored.lease.position,
                      inf.due_ms)
            for inf in list(self.inflight.values())
            if inf.sub.spec.topic == topic and inf.sub.group == group
        ]

    def group_state(self, topic: str, group: str) -> GroupState | None:
        """The engine's subscription of `group` to `topic`, or None when it runs none."""
        sub = self.subscriptions.get((topic, group))
        if sub is None:
            return None
        return GroupState(sub.topic, sub.group, sub.policy, len(sub.consumers),
                          tuple(c.id for c in sub.consumers))

    async def backlog(self, topic: str, group: str) -> int:
        """Messages waiting for a consumer (`EnginePort.backlog`)."""
        check_name("topic", topic)
        check_name("group", group)
        outstanding = await self.backend.outstanding(topic, group, self.now_ms())
        # Less what push consumers have taken: what is left is visible, being fetched, in an
        # outbox, or being given back.
        sub = self.subscriptions.get((topic, group))
        taken = 0 if sub is None else sum(len(c.receipts) - len(c.outbox)
                                          for c in sub.consumers)
        return max(outstanding - taken, 0)

    async def last_id(self, topic: str) -> str | None:
        """The newest message id of `topic` (`EnginePort.last_id`)."""
        check_name("topic", topic)
        return await self.backend.last_id(topic)

    async def properties_after(
        self, topic: str, message_id: str, limit: int
    ) -> list[tuple[str, Mapping[str, str]]] | None:
        """`EnginePort.properties_after`."""
        check_name("topic", topic)
        return await self.backend.properties_after(topic, message_id, limit)

    def known_topic(self, topic: str) -> bool:
        """Whether `topic` is known to exist without asking the back end (`EngineQueries`)."""
        return topic in self._known_topics

    def groups(self) -> list[GroupState]:
        """Every subscription the engine runs."""
        return [GroupState(sub.topic, sub.group, sub.policy, len(sub.consumers),
                           tuple(c.id for c in sub.consumers))
                for sub in list(self.subscriptions.values())]

    def naming_schemes(self) -> list[NamingScheme]:
        """Every naming scheme the registry knows."""
        return list(self._registry.schemes.values())
