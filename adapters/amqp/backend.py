"""The RabbitMQ back end: gateway topics as durable RabbitMQ queues, driven through aio-pika.

Mapping:

* a gateway *topic* is a durable queue of the same name (classic, or quorum with `quorum=True`;
  characters AMQP names cannot hold are escaped, see `queues`),
  declared idempotently on first use; plain AMQP clients publish to it through the default exchange
  with routing key = queue name and consume it directly;
* a *group* consumes the queue with RabbitMQ competing consumers. The group name is recorded but one
  queue serves one group: two groups on one topic share its messages instead of each getting all;
* delayed messages (deliver-at in the future, how retry waits are held) wait in RabbitMQ delay
  queues (`delays`), never in gateway memory, and dead-letter back into the topic queue on time;
* leases are unacked deliveries of a `basic.consume` with manual ack and a prefetch; a lease dies
  with its channel (RabbitMQ requeues the message, which comes back marked redelivered);
* counters travel in headers and are reconciled with the broker's redelivery evidence
  (`counters.reconcile_attempt`);
* a dead-letter copy from the RabbitMQ dialect (marked with the original queue as routing key) is
  published through that queue's dead-letter exchange (a durable direct exchange named by the
  naming scheme, `{topic}.dlx` by default), to which the dead-letter queue is bound with binding
  key = the original queue: RabbitMQ's own routing by routing key and binding key puts it there,
  and plain clients may bind more queues to the exchange.

What the model cannot give is declared in `capabilities` (the contract suite skips on it).

Broker trouble: the connection is `connect_robust`; while it is down `healthy()` is False and
`publish` raises `Unavailable`; consumers, prefetch and queues come back by themselves.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from functools import partial

import aio_pika
from aio_pika.abc import (
    AbstractIncomingMessage,
    AbstractRobustChannel,
    AbstractRobustConnection,
)
from aio_pika.exceptions import AMQPError, ChannelInvalidStateError, ChannelPreconditionFailed

from adapters.amqp import admin
from adapters.amqp.codec import decode, encode
from adapters.amqp.counters import DELIVERY_COUNT_HEADER, reconcile_attempt, stated_retries
from adapters.amqp.delays import DEFAULT_TEMPLATE, DelayQueue, check_template, delay_queue
from adapters.amqp.naming import RABBITMQ, dead_letter_exchange
from adapters.amqp.pipeline import Item, publish_batch
from adapters.amqp.queues import queue_name
from gateway.backend.base import (
    Backend,
    Lease,
    OutMessage,
    Release,
    StoredMessage,
    TopicStats,
)
from gateway.backend.envelope import Envelope
from gateway.core.naming import NamingScheme
from gateway.core.properties import DEAD_LETTER_ROUTE as HEADER_DLX_ROUTING_KEY
from gateway.errors import InvalidArgument, Unavailable

_BROKER_ERRORS = (AMQPError, ChannelInvalidStateError, ConnectionError, OSError, TimeoutError)
_PEEK_TOKEN = "peek:"


def wall_clock_ms() -> int:
    """Wall-clock milliseconds (delays are absolute wall times)."""
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class _Held:
    """One delivery received on the consuming channel, buffered or leased."""

    message: AbstractIncomingMessage
    token: str
    envelope: Envelope
    attempt: int
    retries: int

    def alive(self) -> bool:
        """False once its channel closed: RabbitMQ requeued it and will deliver it again."""
        try:
            return not self.message.channel.is_closed
        except ChannelInvalidStateError:
            return False

    def stored(self, topic: str, group: str) -> StoredMessage:
        env = self.envelope
        return StoredMessage(
            lease=Lease(topic, group, self.message.delivery_tag or 0, self.token),
            message_id=env.message_id,
            topic=topic,
            body=self.message.body,
            properties=env.properties,
            key=env.key,
            tag=env.tag,
            publish_ms=env.publish_ms,
            deliver_at_ms=env.deliver_at_ms,
            attempt=self.attempt,
            retries=self.retries,
        )


@dataclass(slots=True)
class _Topic:
    """Consumption state of one queue: deliveries waiting in the prefetch buffer and leased ones."""

    name: str
    groups: set[str] = field(default_factory=set)
    buffer: deque[_Held] = field(default_factory=deque)
    leased: dict[str, tuple[_Held, str]] = field(default_factory=dict)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    wake: asyncio.TimerHandle | None = None
    """Pending `arrived.set()`: deliveries arriving within the wake delay wake waiters once."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    consuming: bool = False


class RabbitMQBackend(Backend):
    """`Backend` on a RabbitMQ broker (see the module docstring for the mapping).

    `prefetch` bounds the unacked deliveries per queue (buffered plus leased); `quorum` declares
    topic queues as quorum queues; `delay_queue_template` names delay queues from `{queue}` and
    `{ms}`; `confirm_timeout_s` bounds a publish including its confirms; `naming` names the
    dead-letter exchanges; `wake_delay_s` gathers deliveries arriving close together into one
    wake-up of `wait` (fewer, fuller fetches).
    """

    name = "rabbitmq"
    capabilities = frozenset({"delayed-delivery", "per-key-order", "backlog-view"})
    """What this back end can do, for the contract suite: one queue serves one group (no
    "independent-groups"), and the oldest ready time is unknown without consuming the queue
    head (no "oldest-ready-time")."""

    def __init__(
        self,
        url: str = "amqp://guest:guest@127.0.0.1:5672/",
        *,
        prefetch: int = 1000,
        quorum: bool = False,
        delay_queue_template: str = DEFAULT_TEMPLATE,
        confirm_timeout_s: float = 10.0,
        connect_timeout_s: float = 10.0,
        reconnect_interval_s: float = 1.0,
        clock: Callable[[], int] = wall_clock_ms,
        naming: NamingScheme = RABBITMQ,
        wake_delay_s: float = 0.002,
    ) -> None:
        if not 1 <= prefetch <= 65535:
            raise InvalidArgument("prefetch", prefetch, "1..65535")
        if confirm_timeout_s <= 0:
            raise InvalidArgument("confirm_timeout_s", confirm_timeout_s, "> 0")
        self._url = url
        self._prefetch = prefetch
        self._quorum = quorum
        self._template = check_template(delay_queue_template)
        self._confirm_timeout_s = confirm_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._reconnect_interval_s = reconnect_interval_s
        self._clock = clock
        self._naming = naming
        self._wake_delay_s = wake_delay_s
        self._routes: set[tuple[str, str, str]] = set()
        """Dead-letter routes declared while open: (exchange, queue, routing key)."""
        self._connection: AbstractRobustConnection | None = None
        self._publisher: AbstractRobustChannel | None = None
        self._consumer: AbstractRobustChannel | None = None
        self._topics: dict[str, _Topic] = {}
        self._declared: set[str] = set()
        self._delay_declared: dict[str, tuple[DelayQueue, int]] = {}
        self._instance = uuid.uuid4().hex[:12]
        self._sequence = 0
        self._unsettled: dict[int, tuple[object, set[int]]] = {}
        """Per consuming channel (by id, with the channel kept alive): delivery tags not settled."""

    # -- lifecycle -------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect (robustly: the connection, channels, prefetch and consumers come back by
        themselves after broker trouble) and open the publishing and consuming channels."""
        if self._connection is not None:
            return
        try:
            connection = await aio_pika.connect_robust(
                self._url,
                timeout=self._connect_timeout_s,
                reconnect_interval=self._reconnect_interval_s,
            )
        except _BROKER_ERRORS as exc:
            raise Unavailable(f"cannot connect to RabbitMQ: {exc!r}") from exc
        try:
            publisher = await connection.channel(publisher_confirms=True, on_return_raises=True)
            consumer = await connection.channel(publisher_confirms=False)
            await consumer.set_qos(prefetch_count=self._prefetch)
        except _BROKER_ERRORS as exc:
            with suppress(*_BROKER_ERRORS):
                await connection.close()
            raise Unavailable(f"cannot open RabbitMQ channels: {exc!r}") from exc
        self._connection = connection
        self._publisher = publisher
        self._consumer = consumer

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        self._publisher = self._consumer = None
        for state in self._topics.values():
            if state.wake is not None:
                state.wake.cancel()
            state.arrived.set()
        self._topics.clear()
        self._declared.clear()
        self._delay_declared.clear()
        self._routes.clear()
        self._unsettled.clear()
        if connection is not None:
            with suppress(*_BROKER_ERRORS):
                await connection.close()

    def healthy(self) -> bool:
        connection = self._connection
        return connection is not None and not connection.is_closed and connection.connected.is_set()

    def _up(self) -> AbstractRobustConnection:
        """The connection, or `Unavailable` while it is closed or reconnecting."""
        if self._connection is None or not self.healthy():
            raise Unavailable("RabbitMQ connection is down")
        return self._connection

    @asynccontextmanager
    async def _guard(self, what: str, queue: str = "") -> AsyncIterator[None]:
        """Turn broker, channel and timeout failures into `Unavailable`; a queue that exists with
        other arguments (queue type, TTL) is a configuration error: `InvalidArgument`."""
        try:
            yield
        except ChannelPreconditionFailed as exc:
            raise InvalidArgument(
                "topic", queue, f"a queue whose declare arguments match the back end ({exc})"
            ) from exc
        except _BROKER_ERRORS as exc:
            raise Unavailable(f"RabbitMQ {what} failed: {exc!r}") from exc

    # -- publishing ------------------------------------------------------------------------

    def _queue_arguments(self) -> dict[str, object]:
        return {"x-queue-type": "quorum"} if self._quorum else {}

    async def _declare_topic(self, channel: AbstractRobustChannel, topic: str) -> None:
        if topic in self._declared:
            return
        await channel.declare_queue(
            queue_name(topic),
            durable=True,
            arguments=self._queue_arguments(),
            robust=False,
        )
        self._declared.add(topic)

    async def _declare_delay(
        self, channel: AbstractRobustChannel, queue: DelayQueue, now_ms: int
    ) -> None:
        """Declare a delay queue unless declared lately (a declare also renews `x-expires`)."""
        seen = self._delay_declared.get(queue.name)
        if seen is not None and now_ms - seen[1] < queue.expires_ms // 4:
            return
        await channel.declare_queue(
            queue.name,
            durable=True,
            arguments=queue.arguments(),
            robust=False,
        )
        self._delay_declared[queue.name] = (queue, now_ms)

    async def _declare_dead_letter_route(
        self, channel: AbstractRobustChannel, topic: str, origin: str
    ) -> tuple[str, str]:
        """Declare the dead-letter exchange of the queue `origin` (a durable direct exchange named
        by the naming scheme) and bind the dead-letter queue `topic` to it with binding key = the
        origin queue; once per (exchange, queue, key) while open. Returns the exchange name and
        the routing key to publish with."""
        name = queue_name(dead_letter_exchange(self._naming, origin))
        queue, routing_key = queue_name(topic), queue_name(origin)
        if (name, queue, routing_key) in self._routes:
            return name, routing_key
        exchange = await channel.declare_exchange(
            name, aio_pika.ExchangeType.DIRECT, durable=True, robust=False
        )
        declared = await channel.declare_queue(
            queue, durable=True, arguments=self._queue_arguments(), robust=False
        )
        await declared.bind(exchange, routing_key=routing_key, robust=False)
        self._routes.add((name, queue, routing_key))
        return name, routing_key

    async def _send(self, topic: str, items: Sequence[tuple[OutMessage, str, int]]) -> None:
        """Publish (message, id, publish_ms) to `topic`, its delay queues or, for dead-letter
        copies, through the dead-letter exchange bound to `topic`; await all confirms."""
        self._up()
        channel = self._publisher
        if channel is None:
            raise Unavailable("RabbitMQ back end is not open")
        now_ms = self._clock()
        try:
            async with self._guard("publish", topic), asyncio.timeout(self._confirm_timeout_s):
                await self._declare_topic(channel, topic)
                routed: list[Item] = []
                for message, message_id, publish_ms in items:
                    exchange = ""
                    route = queue_name(topic)
                    dead_letter_key = message.properties.get(HEADER_DLX_ROUTING_KEY, "")
                    if message.deliver_at_ms > now_ms:
                        delay_ms = message.deliver_at_ms - now_ms
                        queue = delay_queue(self._template, queue_name(topic), delay_ms)
                        await self._declare_delay(channel, queue, now_ms)
                        route = queue.name
                    elif dead_letter_key:
                        exchange, route = await self._declare_dead_letter_route(
                            channel, topic, dead_letter_key
                        )
                    properties = encode(message, message_id, publish_ms)
                    routed.append((exchange, route, message.body, properties))
                raw = await channel.get_underlay_channel()
                await publish_batch(raw, routed)
        except (Unavailable, InvalidArgument):
            # a queue deleted behind our back makes publishes unroutable: declare again next time
            self._declared.discard(topic)
            for name in self._delay_queues(topic):
                del self._delay_declared[name]
            self._routes = {k for k in self._routes if k[1] != queue_name(topic)}
            raise

    async def publish(self, topic: str, messages: Sequence[OutMessage]) -> list[str]:
        """Persistent publish with confirms: returns once RabbitMQ confirmed every message."""
        now_ms = self._clock()
        ids = [message.message_id or uuid.uuid4().hex for message in messages]
        if messages:
            await self._send(topic, [(m, i, now_ms) for m, i in zip(messages, ids, strict=True)])
        return ids

    # -- consuming -------------------------------------------------------------------------

    async def _on_delivery(self, state: _Topic, message: AbstractIncomingMessage) -> None:
        """Consumer callback: buffer the delivery (decoded once) and wake waiters."""
        if self._topics.get(state.name) is not state:
            return  # closed meanwhile: the broker requeues it with the channel
        self._sequence += 1
        headers = dict(message.headers or {})
        held = _Held(
            message=message,
            token=f"{self._instance}:{self._sequence}",
            envelope=decode(headers, message.message_id, message.timestamp, self._clock()),
            attempt=reconcile_attempt(
                headers, bool(message.redelivered), queue_name(state.name)
            ),
            retries=stated_retries(headers),
        )
        self._unsettled_tags(message).add(message.delivery_tag or 0)
        state.buffer.append(held)
        if state.wake is None and not state.arrived.is_set():
            state.wake = asyncio.get_running_loop().call_later(
                self._wake_delay_s, self._wake, state
            )

    @staticmethod
    def _wake(state: _Topic) -> None:
        state.wake = None
        state.arrived.set()

    def _unsettled_tags(self, message: AbstractIncomingMessage) -> set[int]:
        """The unsettled delivery tags of the channel `message` came on (pruning closed ones)."""
        try:
            channel = message.channel
        except ChannelInvalidStateError:
            return set()
        entry = self._unsettled.get(id(channel))
        if entry is None or entry[0] is not channel:
            for key, (known, _) in list(self._unsettled.items()):
                if getattr(known, "is_closed", True):
                    del self._unsettled[key]
            entry = self._unsettled[id(channel)] = (channel, set())
        return entry[1]

    async def _ack_all(self, helds: Sequence[_Held]) -> None:
        """Ack deliveries, folding the longest run of the channel's oldest unsettled tags into
        one `basic.ack(multiple)`; the rest are acked one by one; closed-channel ones skipped."""
        by_channel: dict[int, list[_Held]] = {}
        for held in helds:
            if held.alive():
                by_channel.setdefault(id(held.message.channel), []).append(held)
        for group in by_channel.values():
            group.sort(key=lambda h: h.message.delivery_tag or 0)
            unsettled = self._unsettled_tags(group[0].message)
            oldest = sorted(unsettled)[: len(group)]
            run = 0
            while run < len(group) and group[run].message.delivery_tag == oldest[run]:
                run += 1
            async with self._guard("ack"):
                if run > 1:
                    await group[run - 1].message.ack(multiple=True)
                    singles = group[run:]
                else:
                    singles = group
                for held in singles:
                    await held.message.ack()
            for held in group:
                unsettled.discard(held.message.delivery_tag or 0)

    async def _requeue(self, held: _Held) -> None:
        """`basic.nack(requeue)`: the message goes back to its place in the queue."""
        if not held.alive():
            return
        async with self._guard("requeue"):
            await held.message.nack(requeue=True)
        self._unsettled_tags(held.message).discard(held.message.delivery_tag or 0)

    async def _topic(self, topic: str, group: str) -> _Topic:
        """The consumption state of `topic`, starting its consumer on first use."""
        state = self._topics.get(topic)
        if state is None:
            state = self._topics[topic] = _Topic(topic)
        state.groups.add(group)
        if state.consuming:
            return state
        async with state.lock:
            if state.consuming:
                return state
            self._up()
            channel = self._consumer
            if channel is None:
                raise Unavailable("RabbitMQ back end is not open")
            async with self._guard("consume", topic), asyncio.timeout(self._confirm_timeout_s):
                queue = await channel.declare_queue(
                    queue_name(topic),
                    durable=True,
                    arguments=self._queue_arguments(),
                )
                self._declared.add(topic)
                await queue.consume(partial(self._on_delivery, state), no_ack=False)
            state.consuming = True
        return state

    async def fetch(
        self,
        topic: str,
        group: str,
        max_messages: int,
        now_ms: int,
        *,
        exclude_keys: frozenset[str] = frozenset(),
    ) -> list[StoredMessage]:
        """Lease buffered deliveries in arrival order; excluded keys stay buffered in order.

        The first call for a topic starts its consumer and usually returns nothing yet. Everything
        in the queue is visible: delayed messages are still in delay queues until their time.
        """
        state = await self._topic(topic, group)
        out: list[StoredMessage] = []
        skipped: list[_Held] = []
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

    async def wait(self, topic: str, group: str, timeout_s: float) -> None:
        """Wait for a delivery that arrived after the last fetch drained what it could take."""
        try:
            state = await self._topic(topic, group)
        except Unavailable:
            connection = self._connection
            if connection is None:
                return
            with suppress(TimeoutError):
                await asyncio.wait_for(connection.connected.wait(), timeout_s)
            return
        with suppress(TimeoutError):
            await asyncio.wait_for(state.arrived.wait(), timeout_s)

    def _take(self, lease: Lease) -> _Held | None:
        """Remove a lease from its topic; None for unknown or already settled leases."""
        state = self._topics.get(lease.topic)
        if state is None:
            return None
        entry = state.leased.pop(lease.token, None)
        return None if entry is None else entry[0]

    async def ack(self, leases: Sequence[Lease]) -> None:
        """`basic.ack` each leased delivery. Leases whose channel closed are already requeued by
        RabbitMQ (they will be delivered again) and, like unknown ones, are ignored."""
        taken = [self._take(lease) for lease in leases]
        await self._ack_all([held for held in taken if held is not None])

    def _requeue_keeps_count(self, held: _Held, release: Release) -> bool:
        """Whether `nack(requeue)` makes the next delivery count exactly `release.attempt`."""
        if release.retries != held.retries or release.attempt != held.attempt + 1:
            return False
        headers = held.message.headers or {}
        return self._quorum or DELIVERY_COUNT_HEADER in headers or not held.message.redelivered

    async def release(self, releases: Sequence[Release]) -> None:
        """Give deliveries back: requeue in place when that yields the asked counters and the
        message is visible now; otherwise publish a copy with the new counters (through a delay
        queue when visible later), wait for its confirm, then ack the original.

        A lease whose channel closed meanwhile is skipped: RabbitMQ already requeued that message,
        which comes back at once counted as redelivered (the release is lost, never the message).
        If the copies cannot be confirmed, the originals stay leased and `Unavailable` is raised.
        """
        now_ms = self._clock()
        by_topic: dict[str, list[tuple[_Held, Release]]] = {}
        for release in releases:
            held = self._take(release.lease)
            if held is None or not held.alive():
                continue
            if release.visible_at_ms <= now_ms and self._requeue_keeps_count(held, release):
                await self._requeue(held)
                continue
            by_topic.setdefault(release.lease.topic, []).append((held, release))
        for topic, pending in by_topic.items():
            copies = []
            for held, release in pending:
                env = held.envelope
                copy = OutMessage(
                    body=held.message.body,
                    properties=env.properties,
                    key=env.key,
                    tag=env.tag,
                    deliver_at_ms=release.visible_at_ms if release.visible_at_ms > now_ms else 0,
                    message_id=env.message_id,
                    attempt=release.attempt,
                    retries=release.retries,
                )
                copies.append((copy, env.message_id or uuid.uuid4().hex, env.publish_ms))
            try:
                await self._send(topic, copies)
            except Unavailable:
                state = self._topics.get(topic)
                if state is not None:
                    for held, release in pending:
                        state.leased[held.token] = (held, release.lease.group)
                raise
            await self._ack_all([held for held, _ in pending])

    # -- admin -----------------------------------------------------------------------------

    def _delay_queues(self, topic: str) -> list[str]:
        target = queue_name(topic)
        return [name for name, (queue, _) in self._delay_declared.items() if queue.target == target]

    def _held(self, topic: str) -> list[_Held]:
        """Deliveries this back end holds for `topic` (buffered and leased), in arrival order."""
        state = self._topics.get(topic)
        if state is None:
            return []
        held = [h for h in state.buffer if h.alive()]
        held += [h for h, _ in state.leased.values() if h.alive()]
        return sorted(held, key=lambda h: int(h.token.rsplit(":", 1)[1]))

    async def stats(self, topic: str, group: str, now_ms: int) -> TopicStats:
        """Counts from passive declares plus what this back end holds.

        ready = the queue's ready count plus deliveries buffered here; delayed = messages in the
        delay queues this back end declared for `topic` since it opened; next visible = the
        earliest deliver-at among the heads of those delay queues (a head read there changes
        nothing: a requeued message keeps its expiry, and dead-lettering starts a fresh delivery
        count). The oldest ready time is known only for deliveries buffered here: reading the head
        of the topic queue would count as a delivery of that message.
        """
        connection = self._up()
        state = self._topics.get(topic)
        next_visible: int | None = None
        async with self._guard("stats"):
            ready = await admin.ready_count(connection, queue_name(topic)) or 0
            delayed = 0
            for name in self._delay_queues(topic):
                waiting = await admin.ready_count(connection, name) or 0
                delayed += waiting
                if waiting:
                    due = await self._head_due_ms(connection, name)
                    if due is not None and (next_visible is None or due < next_visible):
                        next_visible = due
        buffered = [h for h in state.buffer if h.alive()] if state else []
        leased = sum(1 for h, _ in state.leased.values() if h.alive()) if state else 0
        oldest = min((h.envelope.publish_ms for h in buffered), default=None)
        return TopicStats(
            ready=ready + len(buffered),
            delayed=delayed,
            leased=leased,
            oldest_ready_ms=oldest,
            next_visible_ms=next_visible,
        )

    async def _head_due_ms(self, connection: AbstractRobustConnection, queue: str) -> int | None:
        """Deliver-at time of the head of a delay queue (its earliest message), if any."""
        head = await admin.scan(connection, queue, 1)
        if not head:
            return None
        message = head[0]
        env = decode(message.headers, message.message_id, message.timestamp, self._clock())
        if env.deliver_at_ms:
            return env.deliver_at_ms
        entry = self._delay_declared.get(queue)
        return env.publish_ms + entry[0].delay_ms if entry else None

    async def peek(
        self, topic: str, group: str, limit: int, after_position: int = -1
    ) -> list[StoredMessage]:
        """Held deliveries first, then the queue's ready messages (`basic.get`, then requeued by
        closing the channel). Positions number that listing from 0: stable for paging only while
        the queue does not change. On a classic queue a peeked message comes back marked
        redelivered, so its next delivery may count one attempt more."""
        connection = self._up()
        start = after_position + 1
        listing: list[StoredMessage] = []
        for held in self._held(topic):
            listing.append(held.stored(topic, group))
        wanted = start + limit - len(listing)
        if wanted > 0:
            async with self._guard("peek"):
                scanned = await admin.scan(connection, queue_name(topic), wanted)
            now_ms = self._clock()
            for message in scanned:
                headers = dict(message.headers or {})
                env = decode(headers, message.message_id, message.timestamp, now_ms)
                listing.append(
                    StoredMessage(
                        lease=Lease(topic, group, 0, _PEEK_TOKEN + env.message_id),
                        message_id=env.message_id,
                        topic=topic,
                        body=message.body,
                        properties=env.properties,
                        key=env.key,
                        tag=env.tag,
                        publish_ms=env.publish_ms,
                        deliver_at_ms=env.deliver_at_ms,
                        attempt=reconcile_attempt(headers, False, queue_name(topic)),
                        retries=stated_retries(headers),
                    )
                )
        return [
            StoredMessage(
                lease=Lease(m.lease.topic, m.lease.group, index, m.lease.token),
                message_id=m.message_id,
                topic=m.topic,
                body=m.body,
                properties=m.properties,
                key=m.key,
                tag=m.tag,
                publish_ms=m.publish_ms,
                deliver_at_ms=m.deliver_at_ms,
                attempt=m.attempt,
                retries=m.retries,
            )
            for index, m in enumerate(listing)
            if start <= index < start + limit
        ]

    async def remove(self, leases: Sequence[Lease]) -> int:
        """Ack held deliveries by token; for leases from `peek` of ready messages, scan the queue
        and ack every ready message with that message id."""
        connection = self._up()
        removed = 0
        by_id: dict[str, set[str]] = {}
        helds: list[_Held] = []
        for lease in leases:
            if lease.token.startswith(_PEEK_TOKEN):
                by_id.setdefault(lease.topic, set()).add(lease.token[len(_PEEK_TOKEN) :])
                continue
            state = self._topics.get(lease.topic)
            held = self._take(lease)
            if held is None and state is not None:
                held = next((h for h in state.buffer if h.token == lease.token), None)
                if held is not None:
                    state.buffer.remove(held)
            if held is not None and held.alive():
                helds.append(held)
        await self._ack_all(helds)
        removed += len(helds)
        for topic, ids in by_id.items():
            async with self._guard("remove"):
                removed += await admin.remove_matching(
                    connection, queue_name(topic), ids, lambda m: m.message_id or ""
                )
        return removed

    async def purge(self, topic: str, group: str) -> int:
        """Ack every held delivery and purge the queue and its known delay queues."""
        connection = self._up()
        removed = 0
        state = self._topics.get(topic)
        if state is not None:
            held = [h for h in state.buffer] + [h for h, _ in state.leased.values()]
            state.buffer.clear()
            state.leased.clear()
            alive = [h for h in held if h.alive()]
            await self._ack_all(alive)
            removed += len(alive)
        async with self._guard("purge"):
            removed += await admin.purge_queue(connection, queue_name(topic))
            for name in self._delay_queues(topic):
                removed += await admin.purge_queue(connection, name)
        return removed

    async def drop_group(self, topic: str, group: str) -> bool:
        """Forget the group's name; the topic's queue keeps nothing per group."""
        state = self._topics.get(topic)
        if state is None or group not in state.groups:
            return False
        state.groups.discard(group)
        return True

    async def topics(self) -> list[str]:
        """Topic queues this back end declared or consumed since it opened."""
        return sorted(self._declared)
