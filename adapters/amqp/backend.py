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

Broker trouble: the connection is aio-pika's robust connection, reconnecting with back-off
(`backend_link`); while it is down `healthy()` is False and `publish` raises `Unavailable`;
consumers, prefetch and queues come back by themselves.

Settling: every ack, requeue and retry or dead-letter copy goes out on the consuming channel in
AMQP transactions (`backend_tx`), a copy in the same transaction as the ack of the delivery it
replaces, so a gateway killed mid-settle never leaves a message twice (several gateways may
share the broker).

The parts: the connection (`backend_link`), publishing (`backend_send`), consuming
(`backend_consume`), transactions (`backend_tx`) and the admin verbs (`backend_admin`); here they
are put together, and `carry_out` uses them all.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Mapping, Sequence
from contextlib import suppress

import structlog
from aiormq.abc import AbstractChannel
from pamqp.base import Frame

from adapters.amqp import backend_admin
from adapters.amqp.backend_consume import Consumer, Held
from adapters.amqp.backend_link import Link
from adapters.amqp.backend_send import Publisher, Send
from adapters.amqp.backend_tx import returned, write_frames, write_publishes
from adapters.amqp.counters import DELIVERY_COUNT_HEADER
from adapters.amqp.delays import DEFAULT_TEMPLATE, check_template
from adapters.amqp.link_rules import RECONNECT, Backoff
from adapters.amqp.naming import RABBITMQ
from adapters.amqp.pipeline import Item, Written
from gateway.backend.base import (
    Backend,
    Lease,
    OutMessage,
    Release,
    StoredMessage,
    TopicStats,
)
from gateway.core.naming import NamingScheme
from gateway.engine.clock import Clock, SystemClock
from gateway.errors import InvalidArgument, Unavailable

log = structlog.get_logger("gateway.rabbitmq")


class RabbitMQBackend(Backend):
    """`Backend` on a RabbitMQ broker (see the module docstring for the mapping).

    `prefetch` bounds the unacked deliveries per queue (buffered plus leased); `quorum` declares
    topic queues as quorum queues; `delay_queue_template` names delay queues from `{queue}` and
    `{ms}`; `confirm_timeout_s` bounds a publish including its confirms; `reconnect` spaces
    connection attempts; `start_wait_s` is how long `open` lets a broker that cannot be reached
    yet come (0: `BackendUnreachable` at once; see `backend_link`); `clock` is the engine's
    (delays are deliver-at times minus its now; default: the system clock); `naming` names the
    dead-letter exchanges; `wake_delay_s` gathers deliveries arriving close together into one
    wake-up of `wait` (fewer, fuller fetches).
    """

    name = "rabbitmq"
    capabilities = frozenset({"delayed-delivery", "per-key-order", "backlog-view",
                              "purge-keeps-inflight", "catch-up"})
    """What this back end can do, for the contract suite: one queue serves one group (no
    "independent-groups"), and the oldest ready time is unknown without consuming the queue
    head (no "oldest-ready-time"). Nor is a queue's newest message: `last_id`
    is None; nor can it read a queue without consuming it: `properties_after` is None."""
    independent_groups = False
    quiet_peeks = False  # a peek is basic.get and a requeue: the message comes back redelivered

    def __init__(
        self,
        url: str = "amqp://guest:guest@127.0.0.1:5672/",
        *,
        prefetch: int = 1000,
        quorum: bool = False,
        delay_queue_template: str = DEFAULT_TEMPLATE,
        confirm_timeout_s: float = 10.0,
        connect_timeout_s: float = 10.0,
        reconnect: Backoff = RECONNECT,
        start_wait_s: float = 0.0,
        clock: Clock | None = None,
        naming: NamingScheme = RABBITMQ,
        wake_delay_s: float = 0.002,
    ) -> None:
        if not 1 <= prefetch <= 65535:
            raise InvalidArgument("prefetch", prefetch, "1..65535")
        if confirm_timeout_s <= 0:
            raise InvalidArgument("confirm_timeout_s", confirm_timeout_s, "> 0")
        self._quorum = quorum
        self._clock: Clock = clock or SystemClock()
        self._id_prefix = uuid.uuid4().hex[:16]
        self._id_sequence = itertools.count(1)
        self._link = Link(
            url,
            prefetch=prefetch,
            connect_timeout_s=connect_timeout_s,
            reconnect=reconnect,
            start_wait_s=start_wait_s,
        )
        self._publisher = Publisher(
            self._link,
            self._clock,
            quorum=quorum,
            delay_queue_template=check_template(delay_queue_template),
            naming=naming,
            confirm_timeout_s=confirm_timeout_s,
        )
        self._consumer = Consumer(
            self._link,
            self._publisher,
            self._clock,
            confirm_timeout_s=confirm_timeout_s,
            wake_delay_s=wake_delay_s,
        )

    # -- lifecycle -------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect (robustly: the connection, channels, prefetch and consumers come back by
        themselves after broker trouble) and open the publishing and consuming channels."""
        await self._link.open()

    async def close(self) -> None:
        self._consumer.clear()
        self._publisher.clear()
        await self._link.close()

    def healthy(self) -> bool:
        return self._link.healthy()

    def fatal(self) -> str | None:
        """Why no connection attempt can work (credentials refused; no broker within
        `start_wait_s` of the start), or None."""
        return self._link.fatal

    # -- publishing and consuming ----------------------------------------------------------

    def _new_id(self) -> str:
        """A message id: 32 hex digits like a uuid4's, this back end's random half and a
        sequence (a uuid4 reads the system's random source each time)."""
        return f"{self._id_prefix}{next(self._id_sequence) & 0xFFFFFFFFFFFFFFFF:016x}"

    async def publish(self, topic: str, messages: Sequence[OutMessage]) -> list[str]:
        """Persistent publish with confirms: returns once RabbitMQ confirmed every message."""
        now_ms = self._clock.now_ms()
        ids = [message.message_id or self._new_id() for message in messages]
        if messages:
            await self._publisher.send(
                topic, [(m, i, now_ms) for m, i in zip(messages, ids, strict=True)]
            )
        return ids

    async def fetch(
        self,
        topic: str,
        group: str,
        max_messages: int,
        now_ms: int,
        *,
        exclude_keys: frozenset[str] = frozenset(),
        max_bytes: int | None = None,
        publish_delays: bool = True,
    ) -> list[StoredMessage]:
        """Lease buffered deliveries in arrival order; excluded keys stay buffered in order.

        The first call for a topic starts its consumer and usually returns nothing yet. Everything
        in the queue is visible: delayed messages are still in delay queues until their time,
        for every group (`publish_delays` cannot change that: `skips_delays` is False).
        """
        return await self._consumer.fetch(topic, group, max_messages, exclude_keys)

    async def wait(self, topic: str, group: str, timeout_s: float) -> None:
        """Wait for a delivery that arrived after the last fetch drained what it could take."""
        await self._consumer.wait(topic, group, timeout_s)

    async def catch_up(self, topic: str, group: str) -> bool:
        """Buffer what the broker dealt to the consumer before this call, or take a ready
        message the consumer was not given (`Consumer.catch_up`)."""
        return await self._consumer.catch_up(topic, group)

    async def ack(self, leases: Sequence[Lease]) -> None:
        """`basic.ack` each leased delivery. Leases whose channel closed are already requeued by
        RabbitMQ (they will be delivered again) and, like unknown ones, are ignored."""
        taken = [self._consumer.take(lease) for lease in leases]
        await self._consumer.ack_all([held for held in taken if held is not None])

    def _requeue_keeps_count(self, held: Held, release: Release) -> bool:
        """Whether `nack(requeue)` makes the next delivery count exactly `release.attempt`."""
        if release.retries != held.retries or release.attempt != held.attempt + 1:
            return False
        return self._quorum or DELIVERY_COUNT_HEADER in held.headers or not held.redelivered

    async def release(self, releases: Sequence[Release]) -> None:
        """Give deliveries back (see `carry_out`)."""
        await self.carry_out({}, (), releases)

    async def carry_out(
        self,
        copies: Mapping[str, Sequence[OutMessage]],
        acks: Sequence[Lease],
        releases: Sequence[Release],
    ) -> None:
        """One settle batch, all or nothing per consuming channel (`backend_tx`): the retry and
        dead-letter copies are published on the channel the originals came on, in the AMQP
        transaction that acks them. A release visible now with the counters unchanged (a
        delivery handed to no client: more than its consumers had room for, a key held back)
        goes back into the buffer at its place (`Consumer.put_back`), without a word to the
        broker; otherwise it is a requeue in place when that yields the asked counters and the
        message is visible now, else a copy with the new counters (through a delay queue when
        visible later) in place of the original.

        A copy replaces the acked lease with its message id; the lease of an original whose
        channel closed meanwhile is skipped with its copy: RabbitMQ already requeued that
        message, which comes back at once counted as redelivered (a release or retry is lost,
        never the message, and never doubled). If the transaction cannot be committed nothing
        of it took effect: the leases stay held and `Unavailable` is raised."""
        now_ms = self._clock.now_ms()
        taken: list[tuple[Held, Lease]] = []
        acked: list[Held] = []
        for lease in acks:
            held = self._consumer.take(lease)
            if held is not None:
                taken.append((held, lease))
                acked.append(held)
        requeued: list[Held] = []
        moves: list[tuple[str, Send, Held]] = []
        for release in releases:
            held = self._consumer.take(release.lease)
            if held is None:
                continue
            if release.visible_at_ms <= now_ms and (release.attempt, release.retries) == (
                held.attempt, held.retries
            ):
                self._consumer.put_back(release.lease.topic, held)  # handed to nobody
                continue
            taken.append((held, release.lease))
            if release.visible_at_ms <= now_ms and self._requeue_keeps_count(held, release):
                requeued.append(held)
                self._consumer.requeue(release.lease.topic, held)
                continue
            env = held.envelope
            copy = env.released_copy(held.body, release, now_ms)
            moves.append((release.lease.topic, (copy, env.message_id or self._new_id(),
                                                env.publish_ms), held))
            acked.append(held)
        by_id = {held.envelope.message_id: held for held in acked if held.envelope.message_id}
        loose: dict[str, list[Send]] = {}
        for topic, messages in copies.items():
            for message in messages:
                send = (message, message.message_id or self._new_id(), now_ms)
                original = by_id.get(message.message_id)
                if original is None:
                    loose.setdefault(topic, []).append(send)
                else:
                    moves.append((topic, send, original))
        try:
            for topic, sends in loose.items():  # no original here: published on their own
                await self._publisher.send(topic, sends)
            await self._commit(moves, acked, requeued)
        except Unavailable:
            for held, lease in taken:
                state = self._consumer.topics.get(lease.topic)
                if state is not None and held.alive():
                    state.leased[held.token] = (held, lease.group)
            raise
        again = {id(held) for held in requeued}
        for topic in {lease.topic for held, lease in taken if id(held) in again}:
            # The broker deals a requeued delivery out again at once: have it back in the
            # buffer, at its place, before anything after it is fetched (best effort).
            with suppress(Unavailable):
                await self._consumer.sync(topic)

    async def _commit(
        self, moves: list[tuple[str, Send, Held]], acked: list[Held], requeued: list[Held]
    ) -> None:
        """Per channel: publish its copies, ack its originals and requeue its requeues in one
        transaction; copies the broker returned (a queue deleted meanwhile) are published again
        after declaring their queues anew."""
        channels: dict[int, tuple[list[tuple[str, Send]], list[Held], list[Held]]] = {}

        def of(held: Held) -> tuple[list[tuple[str, Send]], list[Held], list[Held]]:
            return channels.setdefault(id(held.channel), ([], [], []))

        for topic, send, held in moves:
            if held.alive():
                of(held)[0].append((topic, send))
        for held in acked:
            if held.alive():
                of(held)[1].append(held)
        for held in requeued:
            if held.alive():
                of(held)[2].append(held)
        for sends, acks, requeues in channels.values():
            by_topic: dict[str, list[Send]] = {}
            for topic, send in sends:
                by_topic.setdefault(topic, []).append(send)
            sends = [(topic, send) for topic, group in by_topic.items() for send in group]
            items: list[Item] = []
            for topic, group in by_topic.items():
                items += await self._publisher.route(topic, group)
            written: Written = []

            async def unit(channel: AbstractChannel, items: list[Item] = items,
                           acks: list[Held] = acks, requeues: list[Held] = requeues) -> None:
                nonlocal written
                written = await write_publishes(channel, items)
                frames: list[Frame] = [*self._consumer.ack_frames(acks),
                                       *self._consumer.nack_frames(requeues)]
                await write_frames(channel, frames)

            channel = (acks or requeues)[0].channel
            try:
                await self._consumer.committer.run(channel, unit)
            except BaseException:
                self._consumer.unsettle([*acks, *requeues])
                raise
            for position in returned(channel, written):
                topic, send = sends[position]
                log.warning("copy returned by RabbitMQ: publishing it again", topic=topic,
                            message_id=send[1])
                self._publisher.forget(topic)
                await self._publisher.send(topic, [send])

    # -- admin -----------------------------------------------------------------------------

    async def stats(
        self, topic: str, group: str, now_ms: int, *, publish_delays: bool = True
    ) -> TopicStats:
        """See `backend_admin.stats` (`publish_delays` changes nothing: `skips_delays` is
        False)."""
        connection = self._link.up()
        return await backend_admin.stats(
            connection, self._consumer, self._publisher, self._clock, topic
        )

    async def peek(
        self, topic: str, group: str, limit: int, after_position: int = -1
    ) -> list[StoredMessage]:
        """See `backend_admin.peek`."""
        connection = self._link.up()
        return await backend_admin.peek(
            connection, self._consumer, self._clock, topic, group, limit, after_position
        )

    async def remove(self, leases: Sequence[Lease], *, keep_leased: bool = False) -> int:
        """See `backend_admin.remove`."""
        connection = self._link.up()
        return await backend_admin.remove(connection, self._consumer, leases, keep_leased)

    async def purge(self, topic: str, group: str, *, leased: bool = False) -> int:
        """See `backend_admin.purge`."""
        connection = self._link.up()
        return await backend_admin.purge(connection, self._consumer, self._publisher, topic,
                                         leased)

    async def drop_group(self, topic: str, group: str) -> bool:
        """Forget the group's name; the topic's queue keeps nothing per group."""
        state = self._consumer.topics.get(topic)
        if state is None or group not in state.groups:
            return False
        state.groups.discard(group)
        return True

    async def topics(self) -> list[str]:
        """Topic queues this back end declared or consumed since it opened."""
        return sorted(self._publisher.declared)
