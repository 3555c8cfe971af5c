"""The engine: drives the retry state machine over a back end, in time.

It owns subscriptions and consumers, the one timer structure for delivery deadlines, and the
carrying-out of decisions (ack, retry copies, in-place redelivery, dead letters) in batches.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
from collections import defaultdict
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import structlog

from gateway.backend import Backend, Lease, OutMessage, Release, StoredMessage
from gateway.core import events as ev
from gateway.core.machine import (
    COMMIT,
    DEAD_LETTER,
    DISCARD,
    EXTEND,
    NO_CHANGE,
    REDELIVER,
    RETRY,
    Decision,
    decide,
)
from gateway.core.policy import RetryPolicy
from gateway.core.record import Record
from gateway.core.registry import Registry
from gateway.core.states import INFLIGHT, READY, WAITING_RETRY, State
from gateway.engine.api import (
    ACK,
    Delivery,
    SettleAction,
    SettleGuard,
    Settlement,
    SettleResult,
    SubscriptionSpec,
)
from gateway.engine.clock import Clock
from gateway.engine.config import EngineConfig
from gateway.engine.dispatch import (
    Consumer,
    InFlight,
    Subscription,
    matches_all,
    matches_tag,
    wait_any,
)
from gateway.engine.observe import Observer, Observers, Tally, Transition
from gateway.engine.timers import TimerService
from gateway.errors import GatewayError, InvalidArgument, NotFound, StaleReceipt
from gateway.limits import MAX_RECEIVE, MAX_WAIT_MS, check_batch, check_message, check_name

log = structlog.get_logger("gateway.engine")

ORIGIN_TOPIC = "x-gateway-origin-topic"
DEAD_REASON = "x-gateway-dead-letter-reason"
DEAD_AT = "x-gateway-dead-lettered-ms"
INTERNAL_PREFIX = "x-gateway-"
GROUP_KEYS = 1 << 61
"""Timer keys from here up drop idle broadcast groups; the ones below are delivery numbers."""
DEFAULT_INVISIBLE_MS = 30_000
"""A receive that chooses no invisible duration under a policy where each receive chooses one
(rocketmq-simple) gets this one, within the policy's range."""
RECEIPT_POOL = 1024
"""Receipts' random parts drawn per call to the system's random source."""


def visible_properties(properties: Mapping[str, str]) -> Mapping[str, str]:
    """The properties a consumer sees: the gateway's own `x-gateway-` ones left out (the same
    mapping when it has none of them; only copies made by the engine do)."""
    for k in properties:
        if k.startswith(INTERNAL_PREFIX):
            return {k: v for k, v in properties.items() if not k.startswith(INTERNAL_PREFIX)}
    return properties


_Decided = tuple[Settlement, InFlight, Decision, int, str]
"""A settlement, its delivery, the decision, and for EXTEND the new timer key and receipt."""


class _Batch:
    """Back-end work collected while settling, done in as few calls as possible."""

    def __init__(self) -> None:
        self.copies: dict[str, list[OutMessage]] = defaultdict(list)
        self.acks: list[Lease] = []
        self.releases: list[Release] = []

    def empty(self) -> bool:
        return not (self.copies or self.acks or self.releases)


class Engine:
    def __init__(
        self,
        backend: Backend,
        registry: Registry,
        clock: Clock,
        config: EngineConfig | None = None,
        observers: Sequence[Observer] = (),
    ) -> None:
        self.backend = backend
        self.registry = registry
        self.clock = clock
        self.config = config or EngineConfig()
        self.observers = Observers(observers)
        self.subscriptions: dict[tuple[str, str], Subscription] = {}
        self.inflight: dict[str, InFlight] = {}
        self._timer_receipts: dict[int, str] = {}
        self._expiring: dict[int, Subscription] = {}
        """Broadcast consumers' own groups waiting to be dropped, by timer key."""
        self._expiry_keys = itertools.count(GROUP_KEYS)
        self._counter = itertools.count(1)
        self._random: list[str] = []
        self._epoch = secrets.token_hex(4)
        self._v_anchor = clock.now_ms()
        self.timers = TimerService(clock, self._on_due)
        self.accepting = True
        self._tasks: set[asyncio.Task[None]] = set()
        self._known_topics: set[str] = set(self.config.topics)
        self._tally: Tally | None = None
        """While a batch is carried out: its transition counts, given to the counting observers
        once at its end (see `_counted`)."""
        self._trace: Any = log.bind()
        """The logger bound once (not per transition), for the per-transition debug line."""
        self._trace_debug = _debug_enabled(self._trace)

    # ----------------------------------------------------------------- time
    def now_ms(self) -> int:
        return self.clock.now_ms()

    def policy_now(self) -> int:
        """The time the policies see: real time stretched by 1 / time_scale."""
        real = self.clock.now_ms()
        scale = self.config.time_scale
        if scale == 1.0:
            return real
        return self._v_anchor + int((real - self._v_anchor) / scale)

    def real_after(self, policy_ms: int) -> int:
        """Real wall-clock time after a policy duration."""
        return self.clock.now_ms() + int(policy_ms * self.config.time_scale)

    def _times(self) -> tuple[int, int]:
        """(policy time, real time) from one clock reading: taken once per batch."""
        real = self.clock.now_ms()
        scale = self.config.time_scale
        if scale == 1.0:
            return real, real
        return self._v_anchor + int((real - self._v_anchor) / scale), real

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._trace = log.bind()
        self._trace_debug = _debug_enabled(self._trace)
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
                consumer.receipts.clear()
                consumer.credit += len(consumer.outbox)
                consumer.outbox.clear()
            sub.wake.set()
        log.warning("back end recovered: deliveries handed out before are void", void=void)

    async def stop_dispatch(self) -> None:
        """No new deliveries from now on; settles are still accepted."""
        self.accepting = False
        for sub in self.subscriptions.values():
            sub.closed = True
            sub.wake.set()
            if sub.task is not None:
                sub.task.cancel()

    async def close(self) -> None:
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

    # ----------------------------------------------------------- validation
    def policy_for(self, spec: SubscriptionSpec) -> RetryPolicy:
        check_name("topic", spec.topic)
        check_name("group", spec.group)
        options = dict(spec.options)
        if "subscription_type" not in options and spec.policy.startswith("pulsar"):
            options["subscription_type"] = spec.consumer_type.value
        if spec.broadcast:
            options.setdefault("broadcast", "true")
        return self.registry.policy(spec.policy, options, spec.naming)

    async def _check_topic(self, topic: str) -> None:
        if self.config.auto_create or topic in self._known_topics:
            return
        self._known_topics.update(await self.backend.topics())
        if topic not in self._known_topics:
            raise NotFound(f"topic {topic!r} does not exist and auto-create is off")

    # -------------------------------------------------------------- publish
    async def publish(self, topic: str, messages: Sequence[OutMessage]) -> list[str]:
        """Append `messages` to `topic`, durably. Every front end comes through here, so the
        checks that do not depend on the protocol are made here (`gateway.limits`)."""
        check_name("topic", topic)
        check_batch("messages", len(messages))
        limit = self.config.max_message_bytes
        now = self.clock.now_ms()
        for i, message in enumerate(messages):
            check_message(message, i, now, limit)
        await self._check_topic(topic)
        ids = await self.backend.publish(topic, messages)
        self._known_topics.add(topic)
        return ids

    # ---------------------------------------------------------- subscribing
    def _subscription(
        self, spec: SubscriptionSpec, policy: RetryPolicy, anonymous: bool
    ) -> Subscription:
        group = spec.group
        own = policy.retries_enabled is False and bool(spec.consumer_id)
        if own:
            group = f"{spec.group}#{spec.consumer_id}"
        key = (spec.topic, group)
        sub = self.subscriptions.get(key)
        if sub is None:
            sub = Subscription(spec=spec, policy=policy, group=group, own_group=own,
                               anonymous=anonymous)
            self.subscriptions[key] = sub
        else:
            # The last consumer to subscribe sets the group's policy (document 000).
            sub.spec = spec
            sub.policy = policy
        if sub.expiry_key:
            # The broadcast consumer came back before its group was dropped.
            self.timers.cancel(sub.expiry_key)
            self._expiring.pop(sub.expiry_key, None)
            sub.expiry_key = 0
        return sub

    async def open_consumer(self, spec: SubscriptionSpec, credit: int = 0) -> Consumer:
        if not self.accepting:
            from gateway.errors import Unavailable

            raise Unavailable("the gateway is shutting down")
        policy = self.policy_for(spec)
        await self._check_topic(spec.topic)
        if credit < 0:
            raise InvalidArgument("prefetch", credit, "0 or more")
        consumer_id = spec.consumer_id or secrets.token_hex(8)
        anonymous = policy.retries_enabled is False and not spec.consumer_id
        if anonymous:
            spec = replace(spec, consumer_id=consumer_id)
        sub = self._subscription(spec, policy, anonymous)
        consumer = Consumer(sub, consumer_id, credit, self.config.max_unacked)
        consumer.on_close = self._consumer_closed
        sub.consumers.append(consumer)
        if sub.task is None or sub.task.done():
            sub.closed = False
            sub.task = asyncio.ensure_future(self.dispatch_loop(sub))
        sub.wake.set()
        log.info("consumer opened", topic=spec.topic, group=sub.group, policy=policy.name,
                 consumer=consumer_id)
        return consumer

    async def _consumer_closed(self, consumer: Consumer) -> None:
        sub = consumer.sub
        if consumer in sub.consumers:
            sub.consumers.remove(consumer)
        batch = _Batch()
        now, real = self._times()
        for receipt in list(consumer.receipts):
            inf = self.inflight.get(receipt)
            if inf is None or inf.consumer is not consumer:
                continue
            if inf.held:
                continue
            try:
                decision = decide(inf.record, ev.ConsumerLost(), inf.sub.policy, now)
            except GatewayError:
                continue
            self._apply(inf, decision, batch, now, real)
        for held in [h for h in self.inflight.values() if h.held and h.consumer is consumer]:
            held.consumer = None
        consumer.receipts.clear()
        await self._flush(batch)
        sub.wake.set()
        if not sub.consumers and sub.task is not None:
            sub.task.cancel()
            sub.task = None
        if not sub.consumers and sub.own_group:
            if sub.anonymous or self.config.broadcast_idle_ms == 0:
                await self._drop_group(sub)
            else:
                self._drop_later(sub)

    def _drop_later(self, sub: Subscription) -> None:
        """(Re)schedule the drop of a broadcast consumer's own group after the idle period."""
        if not sub.expiry_key:
            sub.expiry_key = next(self._expiry_keys)
            self._expiring[sub.expiry_key] = sub
        self.timers.schedule(self.clock.now_ms() + self.config.broadcast_idle_ms, sub.expiry_key)

    async def _drop_group(self, sub: Subscription) -> None:
        """Forget a broadcast consumer's own group, here and in the back end, unless a consumer
        joined it meanwhile."""
        key = (sub.topic, sub.group)
        if sub.consumers or self.subscriptions.get(key) is not sub:
            return
        del self.subscriptions[key]
        try:
            await self.backend.drop_group(sub.topic, sub.group)
        except GatewayError as exc:
            log.warning("broadcast group not dropped", topic=sub.topic, group=sub.group,
                        error=exc.message)
            return
        log.info("broadcast group dropped", topic=sub.topic, group=sub.group)

    async def _drop_idle(self, keys: list[int]) -> None:
        for key in keys:
            sub = self._expiring.pop(key, None)
            if sub is not None and sub.expiry_key == key:
                sub.expiry_key = 0
                await self._drop_group(sub)

    # ------------------------------------------------------------- delivery
    def _new_receipt(self) -> tuple[int, str]:
        n = next(self._counter)
        if not self._random:
            # One draw of random bytes serves many receipts.
            pool = secrets.token_hex(4 * RECEIPT_POOL)
            self._random = [pool[i:i + 8] for i in range(0, len(pool), 8)]
        return n, f"{self._epoch}.{n}.{self._random.pop()}"

    def _deliver(
        self,
        sub: Subscription,
        stored: StoredMessage,
        consumer: Consumer | None,
        invisible_ms: int | None,
        now: int,
        real: int,
    ) -> Delivery:
        """Lease `stored` to a delivery; `now` and `real` are the batch's policy and real times."""
        record = Record(stored.message_id, stored.properties.get(ORIGIN_TOPIC, stored.topic),
                        sub.group, READY, stored.attempt, stored.retries, now)
        n, receipt = self._new_receipt()
        decision = decide(record, ev.Deliver(receipt, invisible_ms), sub.policy, now)
        new = decision.record
        inf = InFlight(receipt, new, stored, sub, consumer, timer=n)
        self.inflight[receipt] = inf
        deadline = self._arm(n, receipt, new, now, real)
        self._emit(inf, READY, decision, real)
        return Delivery(receipt, stored.message_id, stored.topic, new.topic, stored.body,
                        visible_properties(stored.properties), stored.key, stored.tag,
                        new.attempt, new.retries, deadline, stored.publish_ms,
                        stored.deliver_at_ms, sub.group)

    def _arm(self, n: int, receipt: str, record: Record, now: int, real: int) -> int:
        if not record.deadline_ms:
            return 0
        deadline = real + int((record.deadline_ms - now) * self.config.time_scale)
        self._timer_receipts[n] = receipt
        self.timers.schedule(deadline, n)
        return deadline

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
        )

    async def _fetch(self, sub: Subscription, want: int) -> list[StoredMessage]:
        exclude = frozenset(sub.blocked_keys) if sub.policy.blocks_queue else frozenset()
        got: list[StoredMessage] = []
        now = self.clock.now_ms()
        for source in sub.sources:
            if len(got) >= want:
                break
            got.extend(
                await self.backend.fetch(source, sub.group, want - len(got), now,
                                         exclude_keys=exclude)
            )
        return await self._filter(sub, got)

    async def _filter(self, sub: Subscription, got: list[StoredMessage]) -> list[StoredMessage]:
        """Drop tag-filtered messages (acked: not for this group) and, for ordered queues,
        every message whose key already has one in flight (given back at once, in order)."""
        blocks = sub.policy.blocks_queue
        if not blocks and matches_all(sub.spec.tag_filter):
            return got  # no tag filter, no ordering: every message goes out
        keep: list[StoredMessage] = []
        skip: list[Lease] = []
        back: list[Release] = []
        now = self.clock.now_ms()
        for stored in got:
            if not matches_tag(sub.spec.tag_filter, stored.tag):
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

    async def dispatch_loop(self, sub: Subscription) -> None:
        """Move visible messages to push consumers as their credit allows."""
        backend = self.backend
        while not sub.closed and self.accepting:
            sub.wake.clear()
            credit = sub.credit()
            if credit <= 0:
                await sub.wake.wait()
                continue
            try:
                self._deliver_held(sub)
                credit = sub.credit()
                if credit <= 0:
                    continue
                got = await self._fetch(sub, min(credit, self.config.dispatch_batch))
            except asyncio.CancelledError:
                raise
            except GatewayError as exc:
                log.warning("fetch failed", topic=sub.topic, group=sub.group, error=exc.message)
                # Try again in 0.5 s, or at once when woken (a store that healed wakes it).
                sub.wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(sub.wake.wait(), 0.5)
                continue
            if not got:
                waiters: list[asyncio.Future[object] | asyncio.Task[object]] = [
                    asyncio.ensure_future(backend.wait(s, sub.group, 1.0)) for s in sub.sources
                ]
                waiters.append(asyncio.ensure_future(sub.wake.wait()))
                await wait_any(waiters)
                continue
            now, real = self._times()
            live = sub.receivers()
            with self._counted():
                for stored in got:
                    consumer = sub.pick(live, stored.key)
                    if consumer is None:
                        await backend.release([Release(stored.lease, self.clock.now_ms(),
                                                       stored.attempt, stored.retries)])
                        sub.blocked_keys.discard(stored.key)
                        now, real = self._times()
                        live = sub.receivers()
                        continue
                    try:
                        delivery = self._deliver(sub, stored, consumer, None, now, real)
                    except GatewayError as exc:
                        log.error("delivery refused", error=exc.message,
                                  message_id=stored.message_id)
                        continue
                    consumer.push(delivery)

    def _deliver_held(self, sub: Subscription) -> None:
        """Ordered retries whose interval passed go out first, to the key's consumer."""
        while sub.held:
            inf = sub.held[0]
            consumer = sub.choose(inf.stored.key)
            if consumer is None:
                return
            sub.held.popleft()
            self.inflight.pop(inf.receipt, None)
            now = self.policy_now()
            record = inf.record
            if record.state is WAITING_RETRY:
                record = decide(record, ev.RetryDue(), sub.policy, max(now, record.visible_at_ms)
                                ).record
            n, receipt = self._new_receipt()
            at = max(now, record.visible_at_ms)
            decision = decide(record, ev.Deliver(receipt), sub.policy, at)
            new = InFlight(receipt, decision.record, inf.stored, sub, consumer, timer=n)
            self.inflight[receipt] = new
            real = self.clock.now_ms()
            deadline = self._arm(n, receipt, decision.record, now, real)
            self._emit(new, READY, decision, real)
            consumer.push(self._delivery(new, deadline))

    async def receive(
        self,
        spec: SubscriptionSpec,
        max_messages: int,
        invisible_ms: int | None,
        wait_ms: int,
    ) -> list[Delivery]:
        """Pull: lease up to `max_messages`, waiting up to `wait_ms` for the first."""
        from gateway.errors import Unavailable

        if not self.accepting:
            raise Unavailable("the gateway is shutting down")
        if not 1 <= max_messages <= MAX_RECEIVE:
            raise InvalidArgument("max_messages", max_messages, f"1..{MAX_RECEIVE}")
        if not 0 <= wait_ms <= MAX_WAIT_MS:
            raise InvalidArgument("wait_ms", wait_ms, f"0..{MAX_WAIT_MS} ms")
        policy = self.policy_for(spec)
        if policy.invisible_range_ms is not None and invisible_ms is None:
            low, high = policy.invisible_range_ms
            invisible_ms = min(max(DEFAULT_INVISIBLE_MS, low), high)
        if invisible_ms is not None:
            # Validate before anything is leased.
            decide(Record("check", spec.topic, spec.group), ev.Deliver("check", invisible_ms),
                   policy, self.policy_now())
        await self._check_topic(spec.topic)
        sub = self._subscription(spec, policy, anonymous=False)
        if sub.own_group and not sub.consumers:
            self._drop_later(sub)  # a pull consumer's own group lasts while it keeps receiving
        loop = asyncio.get_running_loop()
        give_up = loop.time() + wait_ms / 1000
        while True:
            got = await self._fetch(sub, max_messages)
            if got:
                now, real = self._times()
                return [self._deliver(sub, s, None, invisible_ms, now, real) for s in got]
            left = give_up - loop.time()
            if left <= 0 or not self.accepting:
                return []
            waiters: list[asyncio.Future[object] | asyncio.Task[object]] = [
                asyncio.ensure_future(self.backend.wait(s, sub.group, left)) for s in sub.sources
            ]
            await wait_any(waiters)

    # ------------------------------------------------------------- settling
    async def settle(
        self, settlements: Sequence[Settlement], *, atomic: bool = False,
        guard: SettleGuard | None = None,
    ) -> list[SettleResult]:
        """Settle deliveries. Each result says what went wrong for its item; with `atomic` the
        first bad item raises its error and nothing is applied. `guard` (the caller's access
        check, None when auth is off) is asked about each delivery's topic and group first."""
        batch = _Batch()
        results: list[SettleResult] = []
        now, real = self._times()
        # Atomic: every item is decided before any is applied, and the first bad one raises.
        decided = self._decide_all(settlements, now, guard) if atomic else None
        with self._counted():
            for i, item in enumerate(settlements):
                try:
                    one = decided[i] if decided is not None else self._decide(item, now, guard)
                    results.append(self._carry_out(*one, batch, now, real))
                except GatewayError as exc:
                    results.append(SettleResult(item.receipt, False, exc.code, exc.message))
        try:
            await self._flush(batch)
        except GatewayError as exc:
            return [
                r if not r.ok else SettleResult(r.receipt, False, exc.code, exc.message)
                for r in results
            ]
        return results

    async def ack(
        self, receipts: Sequence[str], *, guard: SettleGuard | None = None
    ) -> dict[int, SettleResult]:
        """Ack deliveries by receipt: what `settle` does with ACK settlements, without building
        a settlement or a result for each. Returns the failures by position in `receipts`."""
        batch = _Batch()
        failed: dict[int, SettleResult] = {}
        now, real = self._times()
        inflight = self.inflight
        with self._counted():
            for i, receipt in enumerate(receipts):
                inf = inflight.get(receipt)
                try:
                    if inf is None or inf.held:
                        raise StaleReceipt(receipt)
                    if guard is not None:
                        guard(inf.sub.spec.topic, inf.sub.spec.group)
                    decision = decide(inf.record, ev.Ack(receipt), inf.sub.policy, now)
                    self._apply(inf, decision, batch, now, real)
                except GatewayError as exc:
                    failed[i] = SettleResult(receipt, False, exc.code, exc.message)
        try:
            await self._flush(batch)
        except GatewayError as exc:
            return {i: failed.get(i) or SettleResult(r, False, exc.code, exc.message)
                    for i, r in enumerate(receipts)}
        return failed

    def _decide_all(
        self, settlements: Sequence[Settlement], now: int, guard: SettleGuard | None
    ) -> list[_Decided]:
        seen: set[str] = set()
        decided: list[_Decided] = []
        for item in settlements:
            if item.receipt in seen:
                raise StaleReceipt(item.receipt)
            seen.add(item.receipt)
            decided.append(self._decide(item, now, guard))
        return decided

    def _event(self, item: Settlement) -> tuple[ev.Event, int, str]:
        match item.action:
            case SettleAction.ACK:
                return ev.Ack(item.receipt), 0, ""
            case SettleAction.FAIL:
                return ev.Fail(item.receipt, item.delay_ms, item.delay_level, item.reason), 0, ""
            case SettleAction.DEAD_LETTER:
                return ev.DeadLetterNow(item.receipt, item.reason), 0, ""
            case SettleAction.EXTEND:
                if item.invisible_ms is None:
                    raise InvalidArgument("invisible_ms", None, "required to change it")
                n, receipt = self._new_receipt()
                return ev.Extend(item.receipt, item.invisible_ms, receipt), n, receipt
        raise InvalidArgument("action", item.action, "ack, fail, extend or dead_letter")

    def _decide(self, item: Settlement, now: int, guard: SettleGuard | None) -> _Decided:
        """What settling `item` would do; nothing changes yet."""
        inf = self.inflight.get(item.receipt)
        if inf is None or inf.held:
            raise StaleReceipt(item.receipt)
        if guard is not None:
            guard(inf.sub.spec.topic, inf.sub.spec.group)
        if item.action is ACK:
            event: ev.Event = ev.Ack(item.receipt)
            new_n, new_receipt = 0, ""
        else:
            event, new_n, new_receipt = self._event(item)
        return item, inf, decide(inf.record, event, inf.sub.policy, now), new_n, new_receipt

    def _carry_out(
        self,
        item: Settlement,
        inf: InFlight,
        decision: Decision,
        new_n: int,
        new_receipt: str,
        batch: _Batch,
        now: int,
        real: int,
    ) -> SettleResult:
        self._apply(inf, decision, batch, now, real)
        if decision.outcome is EXTEND:
            moved = self.inflight[new_receipt]
            moved.timer = new_n
            deadline = self._arm(new_n, new_receipt, moved.record, now, real)
            return SettleResult(item.receipt, True, new_receipt=new_receipt, deadline_ms=deadline)
        return SettleResult(item.receipt, True)

    def _apply(
        self, inf: InFlight, decision: Decision, batch: _Batch, now: int, real: int
    ) -> None:
        """Carry out a decision: update tables now, queue back-end work in `batch`. `now` and
        `real` are the batch's policy and real times."""
        before = inf.record.state
        record = decision.record
        stored = inf.stored
        sub = inf.sub
        policy = sub.policy
        outcome = decision.outcome
        self._emit(inf, before, decision, real)
        if outcome is NO_CHANGE:
            return
        self._disarm(inf)
        if outcome is EXTEND:
            self.inflight.pop(inf.receipt, None)
            moved = InFlight(record.receipt, record, stored, sub, inf.consumer)
            self.inflight[record.receipt] = moved
            if inf.consumer is not None:
                inf.consumer.receipts.discard(inf.receipt)
                inf.consumer.receipts.add(record.receipt)
            return
        self.inflight.pop(inf.receipt, None)
        if inf.consumer is not None:
            inf.consumer.settled(inf.receipt)
        if outcome is REDELIVER and policy.blocks_queue and inf.consumer is not None:
            self._hold(inf, decision)
            return
        if policy.blocks_queue:
            sub.blocked_keys.discard(stored.key)
            sub.wake.set()
        if outcome is COMMIT or outcome is DISCARD:
            batch.acks.append(stored.lease)
            return
        scale = self.config.time_scale
        if outcome is REDELIVER:
            batch.releases.append(
                Release(stored.lease, real + int(decision.delay_ms * scale), record.attempt,
                        record.retries)
            )
            return
        dialect = self.registry.dialect(policy.dialect)
        props = dict(stored.properties)
        props.setdefault(ORIGIN_TOPIC, record.topic)
        if outcome is RETRY and decision.destination:
            copy = dialect.retry_properties(
                props, topic=record.topic, retry_topic=decision.destination,
                message_id=record.message_id, retries=record.retries,
            )
            batch.copies[decision.destination].append(
                OutMessage(stored.body, copy, stored.key, stored.tag,
                           real + int(decision.delay_ms * scale), record.message_id,
                           record.attempt, record.retries)
            )
            batch.acks.append(stored.lease)
        elif outcome is DEAD_LETTER and decision.destination:
            copy = dialect.dead_letter_properties(
                props, topic=record.topic, dead_letter_topic=decision.destination,
                message_id=record.message_id, retries=record.retries, reason=decision.reason,
            )
            copy[DEAD_REASON] = decision.reason
            copy[DEAD_AT] = str(real)
            batch.copies[decision.destination].append(
                OutMessage(stored.body, copy, stored.key, stored.tag, 0, record.message_id,
                           record.attempt, record.retries)
            )
            batch.acks.append(stored.lease)

    def _disarm(self, inf: InFlight) -> None:
        """Cancel the deadline of a delivery that is settled (or moves on under a new receipt),
        so settled deliveries do not keep timer entries until their deadlines."""
        n = inf.timer
        if n:
            self.timers.cancel(n)
            self._timer_receipts.pop(n, None)

    def _hold(self, inf: InFlight, decision: Decision) -> None:
        """Ordered queue: keep the failed message (and its key blocked) until its retry is due."""
        n, receipt = self._new_receipt()
        held = InFlight(receipt, decision.record, inf.stored, inf.sub, inf.consumer,
                        held=True, timer=n)
        self.inflight[receipt] = held
        self._timer_receipts[n] = receipt
        self.timers.schedule(self.real_after(decision.delay_ms), n)

    async def _flush(self, batch: _Batch) -> None:
        if batch.empty():
            return
        if batch.copies:
            await asyncio.gather(
                *(self.backend.publish(topic, msgs) for topic, msgs in batch.copies.items())
            )
        if batch.acks:
            await self.backend.ack(batch.acks)
        if batch.releases:
            await self.backend.release(batch.releases)

    # --------------------------------------------------------------- timers
    def _on_due(self, keys: list[int]) -> None:
        if self._expiring:
            groups = [k for k in keys if k >= GROUP_KEYS]
            keys = [k for k in keys if k < GROUP_KEYS]
            self._spawn(self._drop_idle(groups))
            if not keys:
                return
        self._spawn(self._expire(keys))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _expire(self, keys: list[int]) -> None:
        batch = _Batch()
        for n in keys:
            receipt = self._timer_receipts.pop(n, None)
            inf = self.inflight.get(receipt) if receipt else None
            if inf is None:
                continue
            if inf.held:
                inf.sub.held.append(inf)
                inf.sub.wake.set()
                continue
            if not inf.record.deadline_ms:
                continue
            policy_now, real = self._times()
            now = max(policy_now, inf.record.deadline_ms)
            try:
                decision = decide(inf.record, ev.DeadlinePassed(), inf.sub.policy, now)
            except GatewayError as exc:
                log.warning("deadline not applied", error=exc.message)
                continue
            self._apply(inf, decision, batch, now, real)
        try:
            await self._flush(batch)
        except GatewayError as exc:
            log.error("timeout handling failed", error=exc.message)

    # ------------------------------------------------------------ observers
    @contextlib.contextmanager
    def _counted(self) -> Iterator[None]:
        """Within the block, transitions are counted in one dict, handed to the counting
        observers at its end. A batch that starts while this one awaits takes the dict's place;
        this one's later transitions then go into that batch's dict, or are counted one by one
        once it has ended: each is counted once."""
        tally: Tally = {}
        self._tally = tally
        try:
            yield
        finally:
            if self._tally is tally:
                self._tally = None
            if tally:
                self.observers.count_all(tally)

    def _emit(self, inf: InFlight, before: State, decision: Decision, ts_ms: int) -> None:
        """Tell observers (and the debug log) about a state change made at real time `ts_ms`.
        Nothing is built when nobody listens."""
        record = decision.record
        to_state = record.state
        outcome = decision.outcome
        if before is to_state and outcome is not REDELIVER:
            return
        observers = self.observers
        full = observers.full or self._trace_debug
        if not full and not observers.counters:
            return
        policy = inf.sub.policy
        if outcome is REDELIVER and to_state is INFLIGHT:
            to_state = WAITING_RETRY
        to_name: str = to_state._value_
        if observers.counters:
            tally = self._tally
            if tally is None:
                observers.count(to_name, record.topic, record.group, policy.name, record.attempt)
            else:
                key = (to_name, record.topic, record.group, policy.name, record.attempt)
                tally[key] = tally.get(key, 0) + 1
        if not full:
            return
        transition = Transition(
            ts_ms, policy.dialect, policy.name, self.config.backend_name, record.topic,
            record.group, record.message_id, record.attempt, before._value_, to_name,
            decision.delay_ms, decision.reason, decision.destination or "",
        )
        if self._trace_debug:
            self._trace.debug("transition", message_id=record.message_id, topic=record.topic,
                              group=record.group, attempt=record.attempt, state=to_name)
        observers.emit_full(transition)


def _debug_enabled(logger: Any) -> bool:
    """False only when the bound logger surely drops debug lines (structlog's level filter)."""
    is_enabled = getattr(logger, "is_enabled_for", None)
    if is_enabled is None:
        return True
    try:
        return bool(is_enabled(10))
    except Exception:  # an unexpected logger: keep logging
        return True

