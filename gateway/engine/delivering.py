"""Delivering: subscriptions and their push consumers, the dispatch loop, and pull receives."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from dataclasses import replace

import structlog

from gateway.backend import Lease, Release, StoredMessage
from gateway.core import events as ev
from gateway.core.machine import decide, delivered, delivery_deadline
from gateway.core.policy import RetryPolicy
from gateway.core.properties import (
    BORN_MS,
    ORIGIN_GROUP,
    ORIGIN_TOPIC,
    born_ms,
    visible_properties,
)
from gateway.core.record import Record
from gateway.core.states import READY, WAITING_RETRY
from gateway.engine.api import ConsumerType, Delivery, InitialPosition, SubscriptionSpec
from gateway.engine.dispatch import (
    KEY_SHARED,
    Consumer,
    InFlight,
    Subscription,
    matches_all,
    matches_tag,
    wait_any,
)
from gateway.engine.leaving import Leaving
from gateway.errors import (
    AlreadyExists,
    GatewayError,
    InvalidArgument,
    Unavailable,
)
from gateway.limits import MAX_NAME_BYTES, utf8_len

EXCLUSIVE = ConsumerType.EXCLUSIVE

log = structlog.get_logger("gateway.engine")

OWN_MARK = "#"
"""Between a broadcast consumer's group and its consumer id in the name of its own group."""

class Delivering(Leaving):
    """Subscriptions, push consumers and pull receives."""

    # ---------------------------------------------------------- subscribing
    @staticmethod
    def _group_of(spec: SubscriptionSpec, policy: RetryPolicy) -> tuple[str, bool]:
        """The group `spec` consumes as, and whether it is a broadcast consumer's own."""
        if OWN_MARK in spec.group:
            # `group#consumer` is a broadcast consumer's own group: a group of that name taken
            # by anyone else would share its messages (and the rights to read them).
            raise InvalidArgument("group", spec.group, "a name without '#': group#consumer "
                                  "names a broadcast consumer's own group")
        own = policy.retries_enabled is False and bool(spec.consumer_id)
        if not own:
            return spec.group, False
        group = f"{spec.group}{OWN_MARK}{spec.consumer_id}"
        if utf8_len(group) > MAX_NAME_BYTES:
            # A longer name could not be described, listed or purged (names are 1..255 bytes).
            room = MAX_NAME_BYTES - utf8_len(spec.group) - len(OWN_MARK)
            raise InvalidArgument("consumer_id", spec.consumer_id,
                                  f"at most {room} bytes with this broadcast group: "
                                  f"group{OWN_MARK}consumer_id names the consumer's own group, "
                                  f"at most {MAX_NAME_BYTES} bytes")
        return group, True

    def _subscription(
        self, spec: SubscriptionSpec, policy: RetryPolicy, anonymous: bool
    ) -> Subscription:
        group, own = self._group_of(spec, policy)
        key = (spec.topic, group)
        sub = self.subscriptions.get(key)
        if sub is None:
            self._check_room(spec.owner)
            sub = Subscription(spec=spec, policy=policy, group=group, own_group=own,
                               anonymous=anonymous, owner=spec.owner)
            if not own:
                sub.retry_sources.extend(self._existing_retry_sources(spec.topic, group))
            self._run_group(key, sub)
        else:
            # The last consumer to subscribe sets the group's settings (document 000); each
            # delivery is still settled under the policy of the consumer that took it.
            sub.spec = spec
            sub.policy = policy
        sub.remember(policy)
        self._keep_group(sub)
        return sub

    def _existing_retry_sources(self, topic: str, group: str) -> list[str]:
        """The retry destinations of (topic, group), under every naming scheme, that exist: a
        group that comes back under another policy or client kind finds its waiting retries."""
        found: list[str] = []
        for scheme in self._registry.schemes.values():
            name = scheme.retry_topic(topic, group)
            if name != topic and name in self._known_topics and name not in found:
                found.append(name)
        return found

    def _check_exclusive(self, spec: SubscriptionSpec) -> None:
        """An exclusive subscription takes one consumer: a second one, or any consumer while an
        exclusive one is there, is refused (ALREADY_EXISTS)."""
        sub = self.subscriptions.get((spec.topic, spec.group))
        if sub is None or not sub.consumers:
            return
        if EXCLUSIVE in (spec.consumer_type, sub.spec.consumer_type):
            raise AlreadyExists(f"the exclusive subscription {spec.group!r} on {spec.topic!r} "
                                "has a consumer already")

    async def open_consumer(self, spec: SubscriptionSpec, credit: int = 0) -> Consumer:
        """A push consumer on `spec`, with `credit` to start with."""
        if not self._accepting:
            raise Unavailable("the gateway is shutting down")
        policy = self.policy_for(spec)
        await self._check_topic(spec.topic, spec.owner)
        if credit < 0:
            raise InvalidArgument("prefetch", credit, "0 or more")
        consumer_id = spec.consumer_id or secrets.token_hex(8)
        anonymous = policy.retries_enabled is False and not spec.consumer_id
        if anonymous:
            spec = replace(spec, consumer_id=consumer_id)
        sub = await self._settled_subscription(spec, policy, anonymous, exclusive=True)
        consumer = Consumer(sub, consumer_id, credit, self._config.max_unacked, policy,
                            self._config.max_unacked_bytes, owner=spec.owner,
                            holdings=self.holdings)
        consumer.on_close = lambda c: self._leave(self._consumer_closed(c))
        consumer.on_cancel = lambda c, untaken: self._leave(self._consumer_cancelled(c, untaken))
        sub.consumers.append(consumer)
        sub.announce()
        if sub.task is None or sub.task.done():
            sub.closed = False
            sub.task = asyncio.ensure_future(self._dispatch_loop(sub))
        sub.wake.set()
        log.info("consumer opened", topic=spec.topic, group=sub.group, policy=policy.name,
                 consumer=consumer_id)
        return consumer

    async def _settled_subscription(
        self, spec: SubscriptionSpec, policy: RetryPolicy, anonymous: bool, *, exclusive: bool
    ) -> Subscription:
        """The subscription `spec` joins, placed in the back end, and still the group's when
        this returns (a `drop_group` during an await here takes it away: then again, on a new
        one); with `exclusive`, checked for an exclusive consumer after the last await."""
        while True:
            if exclusive:
                self._check_exclusive(spec)
            await self._check_group(spec.topic, self._group_of(spec, policy)[0], spec.owner)
            sub = self._subscription(spec, policy, anonymous)
            await self._place(sub)
            await self._attend(sub, policy)
            if self.subscriptions.get((spec.topic, sub.group)) is sub:
                if exclusive:
                    self._check_exclusive(spec)  # a consumer may have come meanwhile
                return sub

    async def _place(self, sub: Subscription) -> None:
        """Create the group where its spec says it starts, unless the back end knows it (then
        it keeps its position)."""
        if self.backend.seekable and not sub.placed:
            latest = sub.spec.initial_position is InitialPosition.LATEST
            await self.backend.create_group(sub.topic, sub.group, at_end=latest)
            sub.placed = True

    # ------------------------------------------------------------- delivery
    def _deliver(
        self,
        sub: Subscription,
        stored: StoredMessage,
        consumer: Consumer | None,
        invisible_ms: int | None,
        now: int,
        real: int,
        policy: RetryPolicy,
    ) -> Delivery:
        """Lease `stored` to a delivery under `policy` (its consumer's); `now` and `real` are
        the batch's policy and real times."""
        record = Record(stored.message_id, stored.properties.get(ORIGIN_TOPIC, stored.topic),
                        sub.group, READY, stored.attempt, stored.retries, now)
        n, receipt = self._new_receipt()
        decision = decide(record, ev.Deliver(receipt, invisible_ms), policy, now)
        if self.observers.full or self._trace_debug:
            self._emit_arrival(policy, stored, record, real)
        new = decision.record
        inf = InFlight(receipt, new, stored, sub, consumer, policy, timer=n,
                       blocks=sub.policy.blocks_queue)
        self.inflight[receipt] = inf
        deadline = self._arm(n, receipt, new, now, real)
        self._emit(inf, READY, decision, real)
        return Delivery(receipt, stored.message_id, stored.topic, new.topic, stored.body,
                        visible_properties(stored.properties), stored.key, stored.tag,
                        new.attempt, new.retries, deadline, stored.publish_ms,
                        stored.deliver_at_ms, sub.group,
                        born_ms(stored.properties) if BORN_MS in stored.properties else 0)

    def _delivery(self, inf: InFlight, deadline_real: int) -> Delivery:
        stored = inf.stored
        return Delivery(
            receipt=inf.receipt,
            message_id=stored.message_id,
            topic=stored.topic,
            original_topic=inf.record.topic,
            body=stored.body,
            properties=visible_properties(stored.properties),
            key=stored.key,
            tag=stored.tag,
            attempt=inf.record.attempt,
            retries=inf.record.retries,
            deadline_ms=deadline_real,
            publish_ms=stored.publish_ms,
            deliver_at_ms=stored.deliver_at_ms,
            group=inf.sub.group,
            born_ms=born_ms(stored.properties) if BORN_MS in stored.properties else 0,
        )

    async def _fetch(self, sub: Subscription, want: int, budget: int | None) -> list[StoredMessage]:
        """Up to `want` messages for `sub`, their bodies within about `budget` bytes (None: what
        its consumers have room for): the back end reads no more from disk than that, so a
        backlog of large messages is not read into memory only to be given back. The budget of
        consumers of one principal is reserved in its holdings while the fetch is under way,
        so its other groups' fetches meanwhile do not take the same room."""
        if budget is None:
            budget = sub.byte_room(self._config.max_unacked_bytes)
            holder = sub.holder()
            if holder is not None:
                budget = max(1, min(budget, self.holdings.room(holder)))
                self.holdings.add(holder, budget)
                try:
                    return await self._fetch(sub, want, budget)
                finally:
                    self.holdings.less(holder, budget)  # delivered with no await between
        exclude = frozenset(sub.blocked_keys) if sub.policy.blocks_queue else frozenset()
        if sub.parked:
            exclude = exclude.union(sub.parked)
        got: list[StoredMessage] = []
        now = self.clock.now_ms()
        for source in sub.sources:
            if len(got) >= want or budget <= 0:
                break
            more = await self.backend.fetch(source, sub.group, want - len(got), now,
                                            exclude_keys=exclude, max_bytes=budget,
                                            publish_delays=sub.policy.honours_delays)
            budget -= sum([len(s.body) for s in more])
            if source != sub.topic and more and self.backend.independent_groups:
                more = await self._own_copies(sub, more)
            got.extend(more)
        return await self._filter(sub, got)

    async def _own_copies(self, sub: Subscription, got: list[StoredMessage]
                          ) -> list[StoredMessage]:
        """The retry copies `sub`'s group made, of those it read from a retry destination: a
        name without `{group}` is every group's of the topic, each reading every copy, so the
        others' are acked away for this group (a copy that records no group is anyone's)."""
        group = sub.group
        others = [s.lease for s in got if s.properties.get(ORIGIN_GROUP, group) != group]
        if not others:
            return got
        await self.backend.ack(others)
        return [s for s in got if s.properties.get(ORIGIN_GROUP, group) == group]

    async def _filter(self, sub: Subscription, got: list[StoredMessage]) -> list[StoredMessage]:
        """Drop messages the tag filter or selector leaves out (acked: not for this group)
        and, for ordered queues, every message whose key already has one in flight (given back
        at once, in order)."""
        blocks, selector = sub.policy.blocks_queue, sub.spec.selector
        if not blocks and matches_all(sub.spec.tag_filter) and selector is None:
            return got  # no filter, no ordering: every message goes out
        keep: list[StoredMessage] = []
        skip: list[Lease] = []
        back: list[Release] = []
        now = self.clock.now_ms()
        for stored in got:
            if not matches_tag(sub.spec.tag_filter, stored.tag) or (
                    selector is not None and not selector.matches(stored.tag, stored.properties)):
                skip.append(stored.lease)
            elif sub.policy.blocks_queue and stored.key in sub.blocked_keys:
                back.append(Release(stored.lease, now, stored.attempt, stored.retries))
            else:
                if sub.policy.blocks_queue:
                    sub.blocked_keys.add(stored.key)
                keep.append(stored)
        if skip:
            await self.backend.ack(skip)
        if back:
            await self.backend.release(back)
        return keep

    async def _dispatch_loop(self, sub: Subscription) -> None:
        """Move visible messages to push consumers as their credit allows."""
        backend = self.backend
        failing = ""  # why fetches fail, said once per run of failures (a broker outage)
        while not sub.closed and self._accepting:
            sub.wake.clear()
            sub.unpark()
            batch = self._config.dispatch_batch
            credit = sub.credit(batch)
            if credit <= 0:
                await sub.wake.wait()
                continue
            try:
                self._deliver_held(sub)
                credit = sub.credit(batch)
                if credit <= 0:
                    continue
                got = await self._fetch(sub, min(credit, batch), None)
            except asyncio.CancelledError:
                raise
            except GatewayError as exc:
                if exc.message != failing:
                    log.warning("fetch failed", topic=sub.topic, group=sub.group,
                                error=exc.message, retry="every 0.5 s, said once")
                failing = exc.message
                # Try again in 0.5 s, or at once when woken (a store that healed wakes it).
                sub.wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(sub.wake.wait(), 0.5)
                continue
            if failing:
                log.info("fetch works again", topic=sub.topic, group=sub.group)
                failing = ""
            if not got:
                waiters: list[asyncio.Future[object] | asyncio.Task[object]] = [
                    asyncio.ensure_future(backend.wait(s, sub.group, 1.0)) for s in sub.sources
                ]
                waiters.append(asyncio.ensure_future(sub.wake.wait()))
                await wait_any(waiters)
                continue
            time = self._time
            now, real = time.both()
            live = sub.receivers()
            with self._counted():
                if self._plain(sub):
                    # No key rules, nobody taking whole transitions: the batch goes out as a
                    # unit per consumer (what fits their room; the rest is given back).
                    shares, rest = sub.share(live, got)
                    for taker, share in shares:
                        self._deliver_all(sub, share, taker, now, real)
                    if rest:
                        await backend.release([Release(s.lease, self.clock.now_ms(), s.attempt,
                                                       s.retries) for s in rest])
                    continue
                for stored in got:
                    consumer = sub.pick(live, stored.key)
                    if consumer is None:
                        await backend.release([Release(stored.lease, self.clock.now_ms(),
                                                       stored.attempt, stored.retries)])
                        sub.blocked_keys.discard(stored.key)
                        now, real = time.both()
                        live = sub.receivers()
                        continue
                    try:
                        delivery = self._deliver(sub, stored, consumer, None, now, real,
                                                 consumer.policy)
                    except GatewayError as exc:
                        log.error("delivery refused", error=exc.message,
                                  message_id=stored.message_id)
                        continue
                    consumer.push(delivery)

    def _plain(self, sub: Subscription) -> bool:
        """True when a dispatch batch of `sub` may go out as a unit (`_deliver_all`): no key
        decides who gets a message, and nobody takes whole transitions."""
        return (sub.spec.consumer_type is not KEY_SHARED and not sub.policy.blocks_queue
                and not self.observers.full and not self._trace_debug)

    def _deliver_all(
        self, sub: Subscription, got: list[StoredMessage], consumer: Consumer | None, now: int,
        real: int, policy: RetryPolicy | None = None, invisible_ms: int | None = None,
    ) -> list[Delivery]:
        """Lease `got` as `_deliver` does each, as one batch: one deadline and one timer entry
        for them all, their counts told once; pushed together to `consumer` (under its policy),
        or returned for a pull receive (None, under `policy`, with `invisible_ms`). For a
        `_plain` subscription (no observer takes whole transitions, so none is told of each)."""
        if consumer is not None:
            policy = consumer.policy
        assert policy is not None
        group = sub.group
        deadline = delivery_deadline(policy, invisible_ms, now)
        n = next(self._counter) if deadline else 0
        owner = consumer.owner if consumer is not None else None
        entries: dict[str, InFlight] = {}
        receipts = self._new_receipts(len(got))
        deliveries: list[Delivery] = []
        attempts: dict[tuple[str, int], int] = {}
        deadline_real = real + self._time.real_ms(deadline - now) if deadline else 0
        for stored, receipt in zip(got, receipts, strict=True):
            props = stored.properties
            topic = props.get(ORIGIN_TOPIC, stored.topic) if props else stored.topic
            attempt = stored.attempt + 1
            record = delivered(stored.message_id, topic, group, stored.attempt, stored.retries,
                               receipt, deadline, now)
            entries[receipt] = InFlight(receipt, record, stored, sub, consumer, policy, False,
                                        n, False, 0, owner)
            deliveries.append(Delivery(
                receipt, stored.message_id, stored.topic, topic, stored.body,
                visible_properties(props), stored.key, stored.tag, attempt, stored.retries,
                deadline_real, stored.publish_ms, stored.deliver_at_ms, group,
                born_ms(props) if BORN_MS in props else 0))
            key = (topic, attempt)
            attempts[key] = attempts.get(key, 0) + 1
        self.inflight.put_all(entries, owner)
        if n:
            self._arm_all(n, receipts, deadline_real)
        if self.observers.counters:
            self._count_all("INFLIGHT", group, policy.name, attempts)
        if consumer is not None:
            consumer.push_all(deliveries)
        return deliveries

    def _deliver_held(self, sub: Subscription) -> None:
        """Ordered retries whose interval passed go out first, to the key's consumer."""
        while sub.held:
            consumer = sub.choose(sub.held[0].stored.key)
            if consumer is None:
                return
            consumer.push(self._redeliver_held(sub, consumer, consumer.policy))

    def _redeliver_held(
        self, sub: Subscription, consumer: Consumer | None, policy: RetryPolicy
    ) -> Delivery:
        """Deliver the first held ordered retry (its interval passed) to `consumer`, or to a pull
        receive (None), under `policy` (the receiver's)."""
        inf = sub.held.popleft()
        self.inflight.pop(inf.receipt, None)
        now, real = self._time.both()
        record = inf.record
        if record.state is WAITING_RETRY:
            due = record.visible_at_ms
            record = decide(record, ev.RetryDue(), inf.policy, max(now, due)).record
            if self._listening():
                real_due = self._due.pop((record.group, record.message_id), None)
                if real_due is None:
                    real_due = real - self._time.real_ms(max(0, now - due))
                self._emit_ready(inf.policy, record, WAITING_RETRY, min(real_due, real),
                                 "retry due")
        n, receipt = self._new_receipt()
        at = max(now, record.visible_at_ms)
        decision = decide(record, ev.Deliver(receipt), policy, at)
        new = InFlight(receipt, decision.record, inf.stored, sub, consumer, policy, timer=n,
                       blocks=inf.blocks)
        self.inflight[receipt] = new
        deadline = self._arm(n, receipt, decision.record, now, real)
        self._emit(new, READY, decision, real)
        return self._delivery(new, deadline)
