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

The parts: the connection (`backend_link`), publishing (`backend_send`), consuming
(`backend_consume`) and the admin verbs (`backend_admin`); here they are put together, and
`release` uses them all.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from adapters.amqp import backend_admin
from adapters.amqp.backend_consume import Consumer, Held
from adapters.amqp.backend_link import Link
from adapters.amqp.backend_send import Publisher, Send
from adapters.amqp.counters import DELIVERY_COUNT_HEADER
from adapters.amqp.delays import DEFAULT_TEMPLATE, check_template
from adapters.amqp.naming import RABBITMQ
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


class RabbitMQBackend(Backend):
    """`Backend` on a RabbitMQ broker (see the module docstring for the mapping).

    `prefetch` bounds the unacked deliveries per queue (buffered plus leased); `quorum` declares
    topic queues as quorum queues; `delay_queue_template` names delay queues from `{queue}` and
    `{ms}`; `confirm_timeout_s` bounds a publish including its confirms; `clock` is the engine's
    (delays are deliver-at times minus its now; default: the system clock); `naming` names the
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
        self._link = Link(
            url,
            prefetch=prefetch,
            connect_timeout_s=connect_timeout_s,
            reconnect_interval_s=reconnect_interval_s,
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

    # -- publishing and consuming ----------------------------------------------------------

    async def publish(self, topic: str, messages: Sequence[OutMessage]) -> list[str]:
        """Persistent publish with confirms: returns once RabbitMQ confirmed every message."""
        now_ms = self._clock.now_ms()
        ids = [message.message_id or uuid.uuid4().hex for message in messages]
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
    ) -> list[StoredMessage]:
        """Lease buffered deliveries in arrival order; excluded keys stay buffered in order.

        The first call for a topic starts its consumer and usually returns nothing yet. Everything
        in the queue is visible: delayed messages are still in delay queues until their time.
        """
        return await self._consumer.fetch(topic, group, max_messages, exclude_keys)

    async def wait(self, topic: str, group: str, timeout_s: float) -> None:
        """Wait for a delivery that arrived after the last fetch drained what it could take."""
        await self._consumer.wait(topic, group, timeout_s)

    async def ack(self, leases: Sequence[Lease]) -> None:
        """`basic.ack` each leased delivery. Leases whose channel closed are already requeued by
        RabbitMQ (they will be delivered again) and, like unknown ones, are ignored."""
        taken = [self._consumer.take(lease) for lease in leases]
        await self._consumer.ack_all([held for held in taken if held is not None])

    def _requeue_keeps_count(self, held: Held, release: Release) -> bool:
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
        now_ms = self._clock.now_ms()
        by_topic: dict[str, list[tuple[Held, Release]]] = {}
        for release in releases:
            held = self._consumer.take(release.lease)
            if held is None or not held.alive():
                continue
            if release.visible_at_ms <= now_ms and self._requeue_keeps_count(held, release):
                await self._consumer.requeue(held)
                continue
            by_topic.setdefault(release.lease.topic, []).append((held, release))
        for topic, pending in by_topic.items():
            copies: list[Send] = []
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
                await self._publisher.send(topic, copies)
            except Unavailable:
                state = self._consumer.topics.get(topic)
                if state is not None:
                    for held, release in pending:
                        state.leased[held.token] = (held, release.lease.group)
                raise
            await self._consumer.ack_all([held for held, _ in pending])

    # -- admin -----------------------------------------------------------------------------

    async def stats(self, topic: str, group: str, now_ms: int) -> TopicStats:
        """See `backend_admin.stats`."""
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

    async def remove(self, leases: Sequence[Lease]) -> int:
        """See `backend_admin.remove`."""
        connection = self._link.up()
        return await backend_admin.remove(connection, self._consumer, leases)

    async def purge(self, topic: str, group: str) -> int:
        """See `backend_admin.purge`."""
        connection = self._link.up()
        return await backend_admin.purge(connection, self._consumer, self._publisher, topic)

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
