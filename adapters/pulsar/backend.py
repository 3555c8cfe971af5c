"""The Pulsar back end: gateway topics as Pulsar topics, driven through pulsar-client.

Mapping (Pulsar's own mechanisms, so native clients see the same topics and messages):

* a gateway *topic* is a persistent Pulsar topic (`orders` is `persistent://public/default/orders`,
  `tenant/ns/orders` keeps its namespace); one producer per topic, cached, batching off;
* `publish` sends every message with `send_async` and returns once every send receipt arrived
  (the receipt is Pulsar's durability promise). Message id, tag, counters, first publish time and
  deliver-at travel as properties (`backend_codec`); the key is the partition and ordering key; a
  future deliver-at is Pulsar delayed delivery (`deliver_at`);
* a *group* is a Shared subscription of that name, starting at the earliest message; one consumer
  per (topic, group) whose listener (a client thread) hands messages to the event loop, where they
  wait in a buffer of at most `prefetch` (`backend_buffer`); the listener pauses while it is full;
* `ack` acknowledges; `release` gives a message back: visible now with unchanged counters it
  goes back to the front of the buffer (the broker still holds it unacked); otherwise a copy with
  the new counters is published to the same topic, delayed to the visible time, and the original
  is acknowledged, which is how Pulsar's `reconsumeLater` works;
* attempts: `x-gateway-attempt` reconciled with the redelivery count (`backend_codec`).

Broker trouble: the client reconnects producers and consumers by itself with back-off. While a
producer or consumer is disconnected, or the periodic lookup probe fails, `healthy()` is False
and `publish` raises `Unavailable` at once (a send still in flight fails after `send_timeout_ms`).

Limits of a client-only back end (there is no admin API here): `stats`, `peek` and `remove` see
the messages this back end holds for the group (received, buffered or leased) plus the delayed
messages it published since it opened; the backlog still on the broker is not counted. `purge`
acknowledges what is buffered and moves the subscription to the end with `seek` where the broker
allows it; leased messages stay leased, but in this process only (see `purge`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import pulsar as pulsar_client

from adapters.pulsar.backend_buffer import Held, SubState
from adapters.pulsar.backend_codec import decode, id_text, pulsar_topic, reconcile_attempt
from adapters.pulsar.backend_handoff import Handoff
from adapters.pulsar.backend_send import Item, Publisher
from adapters.pulsar.client_log import native_logger
from adapters.pulsar.service_url import check_service_url
from gateway.backend.base import (
    Backend,
    Lease,
    OutMessage,
    Release,
    StoredMessage,
    TopicStats,
)
from gateway.engine.clock import Clock, SystemClock
from gateway.errors import BackendUnreachable, InvalidArgument, Unavailable

pulsar: Any = pulsar_client
"""pulsar-client ships no type information: its classes are used untyped."""

PROBE_TOPIC = "gateway-health-probe"
CATCH_UP_S = 0.5
"""Longest `catch_up` waits for the consumer to receive up to the topic's last message."""


class PulsarBackend(Backend):
    """`Backend` on a Pulsar cluster (see the module docstring for the mapping).

    `prefetch` is the consumer receiver queue and the most messages buffered per subscription;
    `send_timeout_ms` bounds a publish while the broker is away; `operation_timeout_s` bounds
    lookups, producer creation and subscribing; `probe_interval_s` paces the health probe, a
    partition lookup of `probe_topic` (with token auth the role needs lookup rights on it);
    `clock` is the engine's (default: the system clock; Pulsar delivery times are absolute wall
    times, so in production it is the wall clock).
    """

    name = "pulsar"
    capabilities = frozenset({"delayed-delivery", "independent-groups", "per-key-order",
                              "catch-up"})
    """The client library sees only what a subscription has received: no broker backlog view
    for `peek`, `remove`, `purge` or `stats` (that needs Pulsar's admin API). No
    "purge-keeps-inflight": a purge's seek moves the subscription past leased messages too, so
    they survive it in this process only (see `purge`). `last_id` is None: a topic's newest
    message id is the broker's (a consumer's GET_LAST_MESSAGE_ID), not one this back end made;
    `properties_after` is None too (it cannot read a topic apart from a subscription)."""

    def __init__(
        self,
        service_url: str = "pulsar://127.0.0.1:6650",
        *,
        token: str = "",
        prefetch: int = 1000,
        send_timeout_ms: int = 5000,
        operation_timeout_s: int = 5,
        probe_interval_s: float = 1.0,
        probe_topic: str = PROBE_TOPIC,
        clock: Clock | None = None,
    ) -> None:
        check_service_url(service_url)
        if not 1 <= prefetch <= 100_000:
            raise InvalidArgument("prefetch", prefetch, "1..100000")
        if send_timeout_ms < 100:
            raise InvalidArgument("send_timeout_ms", send_timeout_ms, ">= 100 ms")
        if operation_timeout_s < 1:
            raise InvalidArgument("operation_timeout_s", operation_timeout_s, ">= 1 s")
        self._url = service_url
        self._token = token
        self._prefetch = prefetch
        self._operation_timeout_s = operation_timeout_s
        self._probe_interval_s = probe_interval_s
        self._probe_topic = pulsar_topic(probe_topic)
        self._clock: Clock = clock or SystemClock()
        self._client: Any = None
        self._handoff: Handoff | None = None
        """Send receipts and received messages from the client's threads to the loop
        (`backend_handoff`)."""
        self._publisher = Publisher(send_timeout_ms, operation_timeout_s, self._clock)
        self._subs: dict[tuple[str, str], SubState] = {}
        self._sub_locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._topics: set[str] = set()
        self._probe_ok = False
        self._probe_task: asyncio.Task[None] | None = None
        self._instance = uuid.uuid4().hex[:12]
        self._seq = itertools.count(1)

    # -- lifecycle -------------------------------------------------------------------------

    async def open(self) -> None:
        """Create the client and check the broker answers a lookup; `Unavailable` if not."""
        if self._client is not None:
            return
        self._handoff = Handoff(asyncio.get_running_loop())
        auth = pulsar.AuthenticationToken(self._token) if self._token else None
        client = pulsar.Client(
            self._url,
            authentication=auth,
            operation_timeout_seconds=self._operation_timeout_s,
            connection_timeout_ms=min(self._operation_timeout_s * 1000, 10_000),
            logger=native_logger(),
        )
        try:
            await asyncio.to_thread(client.get_topic_partitions, self._probe_topic)
        except pulsar.PulsarException as exc:
            await asyncio.to_thread(_quietly, client.close)
            raise BackendUnreachable(f"cannot reach Pulsar at {self._url}: {exc}") from exc
        self._client = client
        self._probe_ok = True
        self._probe_task = asyncio.create_task(self._probe(), name="pulsar-health-probe")

    async def close(self) -> None:
        """Close consumers, producers and the client; unacked messages stay on the broker."""
        client, self._client = self._client, None
        if self._probe_task is not None:
            self._probe_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe_task
            self._probe_task = None
        subs = list(self._subs.values())
        for sub in subs:
            sub.arrived.set()
        self._subs.clear()
        self._publisher.clear()
        self._probe_ok = False
        if client is not None:
            await asyncio.to_thread(_quietly, client.close)

    def healthy(self) -> bool:
        if self._client is None or not self._probe_ok:
            return False
        links = [*self._publisher.producers.values(), *(s.consumer for s in self._subs.values())]
        return all(link.is_connected() for link in links if link is not None)

    async def _probe(self) -> None:
        """Look a topic up every `probe_interval_s`: detects a broker gone while nothing is
        connected, and its return."""
        while self._client is not None:
            client = self._client
            for sub in list(self._subs.values()):
                self._check_link(sub)
            try:
                await asyncio.to_thread(client.get_topic_partitions, self._probe_topic)
                self._probe_ok = True
            except pulsar.PulsarException:
                self._probe_ok = False
            await asyncio.sleep(self._probe_interval_s)

    def _check_link(self, sub: SubState) -> None:
        """Notice a consumer that lost its connection: what it buffered comes again later."""
        if sub.consumer is None:
            return
        connected = bool(sub.consumer.is_connected())
        if sub.connected and not connected:
            sub.drop_buffered()
            self._resume(sub)
        sub.connected = connected

    def _up(self) -> Any:
        """The client, or `Unavailable` while closed or the broker is known to be away."""
        if self._client is None:
            raise Unavailable("the Pulsar back end is not open")
        if not self._probe_ok:
            raise Unavailable(f"Pulsar at {self._url} is not reachable")
        return self._client

    # -- publishing ------------------------------------------------------------------------

    async def _send(self, topic: str, items: Sequence[Item]) -> None:
        if self._handoff is None:
            raise Unavailable("the Pulsar back end is not open")
        await self._publisher.send(self._up, self._handoff, topic, items)
        self._topics.add(topic)

    async def publish(self, topic: str, messages: Sequence[OutMessage]) -> list[str]:
        """Send all messages; return their ids once Pulsar sent a receipt for each."""
        now_ms = self._clock.now_ms()
        ids = [message.message_id or uuid.uuid4().hex for message in messages]
        if messages:
            await self._send(topic, [(m, i, now_ms) for m, i in zip(messages, ids, strict=True)])
        return ids

    # -- consuming -------------------------------------------------------------------------

    def _listener(self, sub: SubState, consumer: Any, message: Any) -> None:
        """Client thread: hand a received message to the event loop."""
        handoff = self._handoff
        if handoff is not None:
            handoff.call(self._arrive, sub, message)

    def _arrive(self, sub: SubState, message: Any) -> None:
        """Event loop: decode, count, buffer; pause the listener while the buffer is full."""
        if self._subs.get((sub.topic, sub.group)) is not sub:
            return  # closed meanwhile: the broker redelivers it to the next consumer
        seq = next(self._seq)
        mid = message.message_id()
        sub.received = max(sub.received, (mid.ledger_id(), mid.entry_id()))
        env = decode(
            message.properties(),
            message.partition_key() or "",
            id_text(mid),
            message.publish_timestamp(),
        )
        attempt = reconcile_attempt(
            env.stated_attempt, message.redelivery_count(), sub.remembered.get(env.message_id)
        )
        self._publisher.seen(sub.topic, env.message_id, env.deliver_at_ms)
        sub.add(Held(message, seq, f"{self._instance}:{seq}", env, attempt, env.retries))
        if len(sub.buffer) >= self._prefetch and not sub.paused and sub.consumer is not None:
            sub.paused = True
            with contextlib.suppress(pulsar.PulsarException):
                sub.consumer.pause_message_listener()

    async def _sub(self, topic: str, group: str) -> SubState:
        """The subscription state of (topic, group), subscribing on first use."""
        key = (topic, group)
        sub = self._subs.get(key)
        if sub is not None and sub.consumer is not None:
            return sub
        lock = self._sub_locks.setdefault(key, asyncio.Lock())
        async with lock:
            sub = self._subs.get(key)
            if sub is not None and sub.consumer is not None:
                return sub
            client = self._up()
            sub = SubState(topic, group)
            self._subs[key] = sub
            try:
                sub.consumer = await asyncio.to_thread(
                    client.subscribe,
                    pulsar_topic(topic),
                    group,
                    consumer_type=pulsar.ConsumerType.Shared,
                    message_listener=partial(self._listener, sub),
                    receiver_queue_size=self._prefetch,
                    initial_position=pulsar.InitialPosition.Earliest,
                    consumer_name=f"gateway-{self._instance}",
                )
            except pulsar.PulsarException as exc:
                self._subs.pop(key, None)
                raise Unavailable(f"cannot subscribe {group!r} to {topic!r}: {exc}") from exc
            self._topics.add(topic)
            return sub

    def _resume(self, sub: SubState) -> None:
        if sub.paused and len(sub.buffer) < self._prefetch // 2 + 1:
            sub.paused = False
            with contextlib.suppress(pulsar.PulsarException):
                sub.consumer.resume_message_listener()

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
        """Lease received messages in arrival order (the first call subscribes and usually
        returns nothing yet). Messages whose deliver-at has not come are left buffered; the
        broker holds delayed messages on the back end's Shared subscriptions until their time
        for every group (`publish_delays` cannot change that: `skips_delays` is False)."""
        sub = await self._sub(topic, group)
        self._check_link(sub)
        taken = sub.take(max_messages, now_ms, exclude_keys)
        self._resume(sub)
        return [held.stored(topic, group) for held in taken]

    async def catch_up(self, topic: str, group: str) -> bool:
        """Let what the broker dealt the consumer reach the buffer (a confirmed publish may be on
        its way): up to the topic's last message id (one round trip), waiting at most
        `CATCH_UP_S` (`SubState.receive_up_to`); whether the buffer holds anything now."""
        sub = await self._sub(topic, group)
        try:
            last = await asyncio.to_thread(sub.consumer.get_last_message_id)
        except pulsar.PulsarException:
            return bool(sub.buffer)
        await sub.receive_up_to((last.ledger_id(), last.entry_id()), CATCH_UP_S)
        return bool(sub.buffer)

    async def wait(self, topic: str, group: str, timeout_s: float) -> None:
        """Wait for a message received after the last fetch, or a buffered one coming due."""
        try:
            sub = await self._sub(topic, group)
        except Unavailable:
            await asyncio.sleep(min(timeout_s, self._probe_interval_s))
            return
        due = sub.next_due_ms(self._clock.now_ms())
        if due is not None:
            timeout_s = min(timeout_s, max(0.0, (due - self._clock.now_ms()) / 1000))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(sub.arrived.wait(), timeout_s)

    async def _acknowledge(self, sub: SubState, helds: Sequence[Held]) -> None:
        """Acknowledge on the subscription's consumer (a closed consumer is skipped: the broker
        delivers those messages again)."""
        for held in helds:
            sub.forget(held)
        consumer = sub.consumer
        if not helds or consumer is None:
            return
        await asyncio.to_thread(_ack_all, consumer, [held.message for held in helds])

    async def ack(self, leases: Sequence[Lease]) -> None:
        """Acknowledge leased messages; unknown or settled leases are ignored."""
        for sub, helds in self._taken(leases).items():
            await self._acknowledge(sub, helds)

    def _taken(self, leases: Sequence[Lease]) -> dict[SubState, list[Held]]:
        out: dict[SubState, list[Held]] = {}
        for lease in leases:
            sub = self._subs.get((lease.topic, lease.group))
            held = sub.unlease(lease.token) if sub is not None else None
            if sub is not None and held is not None:
                out.setdefault(sub, []).append(held)
        return out

    async def release(self, releases: Sequence[Release]) -> None:
        """Give leased messages back.

        Visible now with unchanged counters (a message the engine did not hand to anyone): back
        to the front of the buffer, in order; the broker still holds it unacked, so nothing
        changes there (unless a purge moved the subscription past it: then it is copied).
        Otherwise Pulsar's reconsume-later: publish a copy with the new counters to the same
        topic, delayed to the visible time (none when visible now), then acknowledge the
        original; the copy queues behind what the topic already holds. If the copies cannot be
        sent, the originals stay leased and `Unavailable` is raised.
        """
        now_ms = self._clock.now_ms()
        back: dict[SubState, list[Held]] = {}
        copies: dict[SubState, list[tuple[Held, Release]]] = {}
        for release in releases:
            sub = self._subs.get((release.lease.topic, release.lease.group))
            held = sub.unlease(release.lease.token) if sub is not None else None
            if sub is None or held is None:
                continue
            unchanged = (release.attempt, release.retries) == (held.attempt, held.retries)
            if release.visible_at_ms <= now_ms and unchanged and not held.passed:
                back.setdefault(sub, []).append(held)
            else:
                copies.setdefault(sub, []).append((held, release))
        for sub, helds in back.items():
            sub.put_back(helds)
        for sub, pending in copies.items():
            items = [held.retry_copy(release, now_ms) for held, release in pending]
            try:
                await self._send(sub.topic, items)
            except Unavailable:
                for held, _ in pending:
                    sub.leased[held.token] = held
                raise
            await self._acknowledge(sub, [held for held, _ in pending])

    # -- admin -----------------------------------------------------------------------------

    async def stats(
        self, topic: str, group: str, now_ms: int, *, publish_delays: bool = True
    ) -> TopicStats:
        """Counts of what this back end holds for the group, plus delayed messages it published
        (the broker's backlog is not visible to a client); `publish_delays` changes nothing
        (`skips_delays` is False)."""
        sub = self._subs.get((topic, group))
        buffered = list(sub.buffer) if sub is not None else []
        ready = [h for h in buffered if h.envelope.deliver_at_ms <= now_ms]
        early = [h.envelope.deliver_at_ms for h in buffered if h.envelope.deliver_at_ms > now_ms]
        early += self._publisher.waiting(topic, now_ms)
        return TopicStats(
            ready=len(ready),
            delayed=len(early),
            leased=len(sub.leased) if sub is not None else 0,
            oldest_ready_ms=min((h.envelope.publish_ms for h in ready), default=None),
            next_visible_ms=min(early, default=None),
        )

    async def peek(
        self, topic: str, group: str, limit: int, after_position: int = -1
    ) -> list[StoredMessage]:
        """Messages held for the group, in arrival order; a first page `catch_up`s first."""
        sub = self._subs.get((topic, group))
        if sub is None:
            return []
        if after_position < 0:
            with contextlib.suppress(Unavailable, BackendUnreachable):  # list what is held
                await self.catch_up(topic, group)
        listing = [h for h in sub.all_held() if h.seq > after_position]
        return [held.stored(topic, group) for held in listing[: max(limit, 0)]]

    async def remove(self, leases: Sequence[Lease], *, keep_leased: bool = False) -> int:
        """Acknowledge held messages by lease, buffered or leased (not leased ones, with
        `keep_leased`); return how many."""
        removed = 0
        for lease in leases:
            sub = self._subs.get((lease.topic, lease.group))
            if sub is not None and keep_leased and lease.token in sub.leased:
                continue
            held = sub.pull(lease.token) if sub is not None else None
            if sub is not None and held is not None:
                await self._acknowledge(sub, [held])
                removed += 1
        return removed

    async def purge(self, topic: str, group: str, *, leased: bool = False) -> int:
        """Acknowledge what is buffered for the group, then seek the subscription to its end
        where the broker allows it; returns how many buffered messages were removed.

        Leased messages stay leased (with `leased`, they go too): an ack of one settles it, a
        release sends a copy (the seek moved the subscription past the original, so the broker
        no longer holds it). Until then they live in this process only: a restart before they
        are settled loses them, which is why the back end lacks "purge-keeps-inflight"."""
        sub = self._subs.get((topic, group))
        if sub is None:
            return 0
        helds = list(sub.buffer)
        sub.buffer.clear()
        if leased:
            helds += sub.leased.values()
            sub.leased.clear()
        for held in sub.leased.values():
            held.passed = True
        self._resume(sub)
        await self._acknowledge(sub, helds)
        self._publisher.forget(topic)
        if sub.consumer is not None:
            with contextlib.suppress(pulsar.PulsarException):
                await asyncio.to_thread(sub.consumer.seek, pulsar.MessageId.latest)
        return len(helds)

    async def drop_group(self, topic: str, group: str) -> bool:
        """Unsubscribe: the broker deletes the subscription and stops keeping its backlog."""
        sub = self._subs.pop((topic, group), None)
        if sub is None or sub.consumer is None:
            return False
        sub.buffer.clear()
        sub.leased.clear()
        sub.arrived.set()
        try:
            await asyncio.to_thread(sub.consumer.unsubscribe)
        except pulsar.PulsarException as exc:
            raise Unavailable(f"cannot unsubscribe {group!r} from {topic!r}: {exc}") from exc
        return True

    async def topics(self) -> list[str]:
        """Topics this back end published to or subscribed to since it opened."""
        return sorted(self._topics)


def _ack_all(consumer: Any, messages: Sequence[Any]) -> None:
    """Worker thread: acknowledge messages one by one, skipping failures."""
    for message in messages:
        with contextlib.suppress(pulsar.PulsarException):
            consumer.acknowledge(message)


def _quietly(call: Callable[[], object]) -> None:
    with contextlib.suppress(pulsar.PulsarException):
        call()
