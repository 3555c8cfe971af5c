"""Consuming for the RabbitMQ back end: one `basic.consume` per topic queue, deliveries buffered
until a fetch leases them, and acks folded into `basic.ack(multiple)` where they can be.

Leases are unacked deliveries of a consumer with manual ack and a prefetch; a lease dies with its
channel (RabbitMQ requeues the message, which comes back marked redelivered). Counters travel in
headers and are reconciled with the broker's redelivery evidence (`counters.reconcile_attempt`).

The buffer is kept in the queue's order as RabbitMQ keeps it: a get that finds it empty asks the
queue first (`Consumer.catch_up`), a delivery given back untouched goes back to its place
(`put_back`), and a requeued one's redelivery takes its place again (`requeue`).
"""

from __future__ import annotations

import asyncio
import heapq
import uuid
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from functools import partial

from aiormq.abc import AbstractChannel, DeliveredMessage
from pamqp import commands as spec

from adapters.amqp import direct
from adapters.amqp.backend_link import Link, guard
from adapters.amqp.backend_send import Publisher
from adapters.amqp.backend_tx import Committer, write_frames
from adapters.amqp.codec import decode
from adapters.amqp.counters import reconcile_attempt, stated_retries
from adapters.amqp.queues import queue_name
from gateway.backend.base import Lease, StoredMessage
from gateway.backend.envelope import Envelope
from gateway.engine.clock import Clock
from gateway.errors import Unavailable

REQUEUED_KEPT = 10_000
"""How many requeued deliveries a topic remembers the places of (`Consumer.requeue`)."""


@dataclass(slots=True)
class Held:
    """One delivery received on the consuming channel, buffered or leased."""

    channel: AbstractChannel
    """The channel it came on (its acks must go there)."""
    tag: int
    """Its delivery tag on that channel."""
    body: bytes
    headers: Mapping[str, object]
    redelivered: bool
    token: str
    order: int
    """Its place in arrival order (kept when it is put back under a new token)."""
    envelope: Envelope
    attempt: int
    retries: int

    def alive(self) -> bool:
        """False once its channel closed: RabbitMQ requeued it and will deliver it again."""
        return not self.channel.is_closed

    def stored(self, topic: str, group: str) -> StoredMessage:
        env = self.envelope
        return StoredMessage(
            lease=Lease(topic, group, self.tag, self.token),
            message_id=env.message_id,
            topic=topic,
            body=self.body,
            properties=env.properties,
            key=env.key,
            tag=env.tag,
            publish_ms=env.publish_ms,
            deliver_at_ms=env.deliver_at_ms,
            attempt=self.attempt,
            retries=self.retries,
        )


@dataclass(slots=True)
class TopicState:
    """Consumption state of one queue: deliveries waiting in the prefetch buffer and leased ones."""

    name: str
    groups: set[str] = field(default_factory=set)
    buffer: deque[Held] = field(default_factory=deque)
    leased: dict[str, tuple[Held, str]] = field(default_factory=dict)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    wake: asyncio.TimerHandle | None = None
    """Pending `arrived.set()`: deliveries arriving within the wake delay wake waiters once."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    channel: AbstractChannel | None = None
    """The channel the queue is consumed on (`consumer_tag`), once consuming."""
    consumer_tag: str = ""
    paused: int = 0
    """How many `Consumer.paused` hold the queue unconsumed (a purge)."""
    requeued: dict[str, int] = field(default_factory=dict)
    """Message id -> place in arrival order of deliveries given back to the broker
    (`basic.nack(requeue)`), for their redelivery to take that place again (`Consumer.requeue`)."""

    def consuming(self) -> bool:
        """Whether the queue's consumer lives: its channel is open and the broker did not cancel
        it (a deleted queue cancels its consumers)."""
        channel = self.channel
        return channel is not None and not channel.is_closed and bool(self.consumer_tag)

    def wake_on_cancel(self, frame: spec.Basic.Cancel) -> None:
        """The broker cancelled a consumer on the channel (a deleted queue): if it was this
        queue's, wake its waiters so that the next fetch consumes it again."""
        if frame.consumer_tag == self.consumer_tag:
            self.consumer_tag = ""
            self.arrived.set()


class Consumer:
    """The topics consumed on the link's consuming channel and the deliveries held for them.

    A topic queue is declared here as the publisher declares it (its arguments, recorded in its
    `declared`), so that consuming a topic nobody published to yet works too."""

    def __init__(
        self,
        link: Link,
        publisher: Publisher,
        clock: Clock,
        *,
        confirm_timeout_s: float,
        wake_delay_s: float,
    ) -> None:
        self._link = link
        self._publisher = publisher
        self._clock = clock
        self._confirm_timeout_s = confirm_timeout_s
        self._wake_delay_s = wake_delay_s
        self.topics: dict[str, TopicState] = {}
        self._instance = uuid.uuid4().hex[:12]
        self._sequence = 0
        self.committer = Committer(confirm_timeout_s)
        """Every ack and requeue on the consuming channel is committed through it."""
        self._unsettled: dict[int, tuple[object, set[int]]] = {}
        """Per consuming channel (by id, with the channel kept alive): delivery tags not settled."""

    def clear(self) -> None:
        """Forget every topic and wake its waiters (the back end closes)."""
        for state in self.topics.values():
            if state.wake is not None:
                state.wake.cancel()
            state.arrived.set()
        self.topics.clear()
        self._unsettled.clear()

    def _on_delivery(self, state: TopicState, message: DeliveredMessage) -> None:
        """Consumer callback, called as aiormq reads the delivery (`direct`: no task, no wrapper
        object): buffer the delivery (decoded once) and wake waiters."""
        if self.topics.get(state.name) is not state:
            return  # closed meanwhile: the broker requeues it with the channel
        self._sequence += 1
        properties = message.header.properties
        headers = dict(properties.headers or {})
        redelivered = bool(message.redelivered)
        held = Held(
            channel=message.channel,
            tag=message.delivery_tag or 0,
            body=message.body,
            headers=headers,
            redelivered=redelivered,
            token=f"{self._instance}:{self._sequence}",
            order=self._sequence,
            envelope=decode(
                headers, properties.message_id, properties.timestamp, self._clock.now_ms()
            ),
            attempt=reconcile_attempt(headers, redelivered, queue_name(state.name)),
            retries=stated_retries(headers),
        )
        self._unsettled_tags(held.channel).add(held.tag)
        place = state.requeued.pop(held.envelope.message_id, None) if redelivered else None
        if place is None:
            state.buffer.append(held)
        else:
            held.order = place
            _insert(state.buffer, held)
        if state.wake is None and not state.arrived.is_set():
            state.wake = asyncio.get_running_loop().call_later(
                self._wake_delay_s, self._wake, state
            )

    @staticmethod
    def _wake(state: TopicState) -> None:
        state.wake = None
        state.arrived.set()

    def _unsettled_tags(self, channel: AbstractChannel) -> set[int]:
        """The unsettled delivery tags of a consuming channel (pruning closed ones)."""
        if channel.is_closed:
            return set()
        entry = self._unsettled.get(id(channel))
        if entry is None or entry[0] is not channel:
            for key, (known, _) in list(self._unsettled.items()):
                if getattr(known, "is_closed", True):
                    del self._unsettled[key]
            entry = self._unsettled[id(channel)] = (channel, set())
        return entry[1]

    @staticmethod
    def by_channel(helds: Sequence[Held]) -> list[list[Held]]:
        """Live deliveries grouped by the channel they came on (deliveries of a closed channel
        are left out: RabbitMQ requeued them)."""
        groups: dict[int, list[Held]] = {}
        for held in helds:
            if held.alive():
                groups.setdefault(id(held.channel), []).append(held)
        return list(groups.values())

    def ack_frames(self, group: Sequence[Held]) -> list[spec.Basic.Ack]:
        """The `basic.ack` frames for deliveries of one channel: the longest run of the channel's
        oldest unsettled tags folded into one `basic.ack(multiple)`, the rest one by one. Their
        tags stop counting as unsettled at once, so that a later unit of the same transaction
        folds past them; `unsettle` puts them back when the transaction fails."""
        ordered = sorted(group, key=lambda h: h.tag)
        if not ordered:
            return []
        unsettled = self._unsettled_tags(ordered[0].channel)
        oldest = heapq.nsmallest(len(ordered), unsettled)
        run = 0
        while run < len(oldest) and ordered[run].tag == oldest[run]:
            run += 1
        frames: list[spec.Basic.Ack] = []
        singles: Sequence[Held] = ordered
        if run > 1:
            frames.append(spec.Basic.Ack(delivery_tag=oldest[run - 1], multiple=True))
            singles = ordered[run:]
        frames += [spec.Basic.Ack(delivery_tag=h.tag) for h in singles]
        for held in ordered:
            unsettled.discard(held.tag)
        return frames

    def nack_frames(self, group: Sequence[Held]) -> list[spec.Basic.Nack]:
        """`basic.nack(requeue)` frames: the messages go back to their places in the queue."""
        unsettled = self._unsettled_tags(group[0].channel) if group else set()
        for held in group:
            unsettled.discard(held.tag)
        return [spec.Basic.Nack(delivery_tag=h.tag, requeue=True) for h in group]

    def unsettle(self, helds: Sequence[Held]) -> None:
        """A transaction that acked or requeued `helds` failed: they are unsettled again (as
        long as their channel lives)."""
        for held in helds:
            if held.alive():
                self._unsettled_tags(held.channel).add(held.tag)

    async def ack_all(self, helds: Sequence[Held]) -> None:
        """Ack deliveries, one committed transaction per channel; closed-channel ones skipped."""
        for group in self.by_channel(helds):
            try:
                await self.committer.run(group[0].channel, partial(_ack_unit, self, group))
            except BaseException:
                self.unsettle(group)
                raise

    async def topic(self, topic: str, group: str) -> TopicState:
        """The consumption state of `topic`, starting its consumer on first use and again
        whenever it died (its channel closed, or the broker cancelled it)."""
        state = self.topics.get(topic)
        if state is None:
            state = self.topics[topic] = TopicState(topic)
        state.groups.add(group)
        if state.consuming() or state.paused:
            return state
        async with state.lock:
            if state.consuming() or state.paused:
                return state
            channel = self._link.channel(self._link.consumer)
            async with guard("consume", topic), asyncio.timeout(self._confirm_timeout_s):
                await channel.declare_queue(
                    queue_name(topic),
                    durable=True,
                    arguments=self._publisher.queue_arguments(),
                )
                self._publisher.declared.add(topic)
                raw = await channel.get_underlay_channel()
                if state.wake_on_cancel not in raw.on_consumer_cancel_callbacks:
                    raw.on_consumer_cancel_callbacks.add(state.wake_on_cancel)
                direct.install(raw)
                ok = await raw.basic_consume(  # aiormq takes a synchronous callback too
                    queue_name(topic),
                    direct.Direct(partial(self._on_delivery, state)),  # type: ignore[arg-type]
                    no_ack=False,
                )
            state.channel, state.consumer_tag = raw, ok.consumer_tag or ""
        return state

    @asynccontextmanager
    async def paused(self, topic: str) -> AsyncIterator[TopicState]:
        """`topic`'s queue unconsumed for the duration: its consumer is cancelled (once the
        broker confirmed it, every delivery sent before is buffered: aiormq reads a channel's
        frames in order and the `basic.cancel-ok` comes after them), and fetches and waits
        meanwhile do not consume it again. Afterwards waiters wake and consume it anew."""
        state = self.topics.get(topic)
        if state is None:
            state = self.topics[topic] = TopicState(topic)
        state.paused += 1
        try:
            async with state.lock:
                channel, tag = state.channel, state.consumer_tag
                if state.consuming() and channel is not None:
                    state.consumer_tag = ""
                    async with (guard("cancel consumer", topic),
                                asyncio.timeout(self._confirm_timeout_s)):
                        await channel.basic_cancel(tag)
                    await asyncio.sleep(0)  # deliveries read before the cancel-ok are buffered
            yield state
        finally:
            state.paused -= 1
            state.arrived.set()

    async def fetch(
        self, topic: str, group: str, max_messages: int, exclude_keys: frozenset[str]
    ) -> list[StoredMessage]:
        """Lease buffered deliveries in arrival order; excluded keys stay buffered in order."""
        state = await self.topic(topic, group)
        out: list[StoredMessage] = []
        skipped: list[Held] = []
        while state.buffer and len(out) < max_messages:
            held = state.buffer.popleft()
            if not held.alive():
                continue
            if held.envelope.key and held.envelope.key in exclude_keys:
                skipped.append(held)
                continue
            state.leased[held.token] = (held, group)
            out.append(held.stored(topic, group))
        state.buffer.extendleft(reversed(skipped))
        if len(out) < max_messages or not state.buffer:
            state.arrived.clear()
        return out

    async def catch_up(self, topic: str, group: str) -> bool:
        """Bring into the buffer what the broker holds for `topic` that the consumer has not
        received yet; whether the buffer holds anything now (False when the topic is paused).

        A publish the broker confirmed is in the queue, but its delivery to this consumer may
        still be on its way (from the broker to the gateway, or behind other frames), or never
        come while the prefetch is full of leased deliveries or the queue deals its messages
        out to other consumers (another gateway on the broker): a get that answers from the
        buffer alone would find nothing where RabbitMQ's own `basic.get` finds the message.
        So the queue is asked on the consuming channel itself (`sync`): the broker sends a
        queue's deliveries to a channel before its answer to that channel's declare, and
        aiormq reads them in order, so every delivery already dealt to the consumer is
        buffered once the answer came. If the buffer is still empty while the queue has ready
        messages (dealt to nobody), one is taken with `basic.get` on the same channel (a
        lease like the consumer's: its tag is the channel's, acked and requeued there; a
        get is not bound by the prefetch)."""
        state = await self.topic(topic, group)
        async with state.lock:
            ready = await self._sync(state)
            if ready and not self._any_alive(state):
                raw = state.channel
                assert raw is not None  # `_sync` found it consuming
                async with guard("get", topic), asyncio.timeout(self._confirm_timeout_s):
                    message = await raw.basic_get(queue_name(topic), no_ack=False)
                if isinstance(message.delivery, spec.Basic.GetOk):
                    self._on_delivery(state, message)
        return self._any_alive(state)

    async def sync(self, topic: str) -> None:
        """Let every delivery the broker already dealt to `topic`'s consumer reach the buffer
        (see `catch_up`); nothing when the topic is not consumed."""
        state = self.topics.get(topic)
        if state is None:
            return
        async with state.lock:
            await self._sync(state)

    async def _sync(self, state: TopicState) -> int:
        """One round trip to the queue on its consuming channel (under `state.lock`): its
        ready message count, 0 when it is not consumed now (paused, or its consumer died).
        The declare is the one `topic` makes (same arguments): it fails only where consuming
        would, and a queue deleted just now is declared again as consuming would."""
        raw = state.channel
        if state.paused or not state.consuming() or raw is None:
            return 0
        async with guard("consume", state.name), asyncio.timeout(self._confirm_timeout_s):
            ok = await raw.queue_declare(
                queue_name(state.name), durable=True,
                arguments=self._publisher.queue_arguments(),  # type: ignore[arg-type]
            )
        await asyncio.sleep(0)  # deliveries read before the declare-ok are buffered
        return ok.message_count or 0

    @staticmethod
    def _any_alive(state: TopicState) -> bool:
        return any(held.alive() for held in state.buffer)

    async def wait(self, topic: str, group: str, timeout_s: float) -> None:
        """Wait for a delivery that arrived after the last fetch drained what it could take."""
        try:
            state = await self.topic(topic, group)
        except Unavailable:
            connection = self._link.connection
            if connection is None:
                return
            with suppress(TimeoutError):
                await asyncio.wait_for(connection.connected.wait(), timeout_s)
            return
        with suppress(TimeoutError):
            await asyncio.wait_for(state.arrived.wait(), timeout_s)

    def take(self, lease: Lease) -> Held | None:
        """Remove a lease from its topic; None for unknown or already settled leases."""
        state = self.topics.get(lease.topic)
        if state is None:
            return None
        entry = state.leased.pop(lease.token, None)
        return None if entry is None else entry[0]

    def held(self, topic: str) -> list[Held]:
        """Deliveries held for `topic` (buffered and leased), in arrival order."""
        state = self.topics.get(topic)
        if state is None:
            return []
        held = [h for h in state.buffer if h.alive()]
        held += [h for h, _ in state.leased.values() if h.alive()]
        return sorted(held, key=lambda h: h.order)

    def put_back(self, topic: str, held: Held) -> None:
        """A leased delivery given back untouched (handed to no client, its counters unchanged)
        goes back into the buffer at its place in arrival order under a new token (the old
        lease is void), as if it had never been fetched: before the deliveries that came after
        it, as RabbitMQ puts a requeued message back at its place. One whose channel closed
        is left out (RabbitMQ requeued it)."""
        state = self.topics.get(topic)
        if state is None or not held.alive():
            return
        self._sequence += 1
        held.token = f"{self._instance}:{self._sequence}"
        _insert(state.buffer, held)
        state.arrived.set()

    def requeue(self, topic: str, held: Held) -> None:
        """`held` is given back to the broker (`basic.nack(requeue)`): RabbitMQ puts it back at
        its place in the queue and deals it out again, here behind the deliveries buffered
        meanwhile; its redelivery takes its place in arrival order again, before them (the
        last REQUEUED_KEPT remembered, by message id)."""
        state = self.topics.get(topic)
        message_id = held.envelope.message_id
        if state is None or not message_id:
            return
        requeued = state.requeued
        requeued.pop(message_id, None)
        requeued[message_id] = held.order
        if len(requeued) > REQUEUED_KEPT:  # others' consumers took some: forget the oldest
            del requeued[next(iter(requeued))]


def _insert(buffer: deque[Held], held: Held) -> None:
    """Put `held` into `buffer` at its place in arrival order."""
    index = next((i for i, h in enumerate(buffer) if h.order > held.order), len(buffer))
    buffer.insert(index, held)


async def _ack_unit(consumer: Consumer, group: Sequence[Held], channel: AbstractChannel) -> None:
    await write_frames(channel, consumer.ack_frames(group))
