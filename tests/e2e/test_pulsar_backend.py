"""The Pulsar back end through pulsar-client, against a broker.

The broker is `$PULSAR_SERVICE_URL` when set (a real cluster); otherwise a gateway on the embedded
store serving the Pulsar binary protocol. Native Pulsar clients check what the back end leaves
on the topics. The outage test always runs its own gateway broker, which it can stop and start.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pulsar
import pytest

from adapters.pulsar.backend import PulsarBackend
from gateway.backend.base import OutMessage, Release, StoredMessage
from gateway.engine.clock import ManualClock, SystemClock
from gateway.errors import Unavailable
from gateway.server.app import running_gateway

wall_clock_ms = SystemClock().now_ms
"""The engine's clock in production: what `fetch` and `stats` get as now."""

GROUP = "g1"


@pytest.fixture
async def url(tmp_path: Path) -> AsyncIterator[str]:
    """A Pulsar service URL: the real cluster if configured, else a gateway's Pulsar port."""
    configured = os.environ.get("PULSAR_SERVICE_URL", "")
    if configured:
        yield configured
        return
    async with running_gateway(tmp_path / "broker", pulsar_listen="127.0.0.1:0") as upstream:
        yield f"pulsar://127.0.0.1:{upstream.front_ends['pulsar'].port}"


@pytest.fixture
async def backend(url: str) -> AsyncIterator[PulsarBackend]:
    instance = PulsarBackend(url, prefetch=100)
    await instance.open()
    yield instance
    await instance.close()


def unique(prefix: str = "pb") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def collect(
    backend: PulsarBackend, topic: str, group: str, count: int, timeout_s: float = 10.0
) -> list[StoredMessage]:
    """Fetch until `count` messages arrived or `timeout_s` passed."""
    got: list[StoredMessage] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        got += await backend.fetch(topic, group, count - len(got), wall_clock_ms())
        if len(got) < count:
            await backend.wait(topic, group, 0.2)
    return got


class Native:
    """A plain pulsar-client on the same broker, run in a worker thread."""

    def __init__(self, url: str) -> None:
        self.client = pulsar.Client(url, operation_timeout_seconds=10)

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def audit(self, topic: str, subscription: str = "audit") -> Any:
        """A Shared subscription from the earliest message, for reading what a topic holds."""
        return await self.call(
            self.client.subscribe,
            topic,
            subscription,
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
        )

    async def drain(self, consumer: Any, count: int, timeout_s: float = 10.0) -> list[Any]:
        """Receive and ack `count` messages (fewer if they do not come within `timeout_s`)."""

        def run() -> list[Any]:
            out: list[Any] = []
            deadline = time.monotonic() + timeout_s
            while len(out) < count and time.monotonic() < deadline:
                try:
                    message = consumer.receive(timeout_millis=200)
                except pulsar.Timeout:
                    continue
                consumer.acknowledge(message)
                out.append(message)
            return out

        return await asyncio.to_thread(run)

    async def close(self) -> None:
        await asyncio.to_thread(self.client.close)


@pytest.fixture
async def native(url: str) -> AsyncIterator[Native]:
    client = Native(url)
    yield client
    await client.close()


async def test_publish_fetch_ack_and_native_view(
    backend: PulsarBackend, native: Native
) -> None:
    topic = unique()
    audit = await native.audit(topic)
    assert backend.healthy()
    ids = await backend.publish(
        topic,
        [
            OutMessage(body=b"one", properties={"color": "red"}, key="k1", tag="t1"),
            OutMessage(body=b"two", message_id="fixed-id", attempt=4, retries=3),
        ],
    )
    assert ids[1] == "fixed-id" and len(set(ids)) == 2
    got = await collect(backend, topic, GROUP, 2)
    assert [m.body for m in got] == [b"one", b"two"]
    assert [m.message_id for m in got] == ids
    assert (got[0].key, got[0].tag, dict(got[0].properties)) == ("k1", "t1", {"color": "red"})
    assert [(m.attempt, m.retries) for m in got] == [(0, 0), (4, 3)]
    stats = await backend.stats(topic, GROUP, wall_clock_ms())
    assert (stats.ready, stats.leased) == (0, 2)
    await backend.ack([m.lease for m in got])
    await backend.ack([got[0].lease])  # settled already: ignored
    assert (await backend.stats(topic, GROUP, wall_clock_ms())).leased == 0
    assert topic in await backend.topics()

    seen = await native.drain(audit, 2)
    assert [m.data() for m in seen] == [b"one", b"two"]
    first, second = (m.properties() for m in seen)
    assert first["color"] == "red" and first["gateway-id"] == ids[0]
    assert first["gateway-tag"] == "t1" and seen[0].partition_key() == "k1"
    assert (second["gateway-attempt"], second["gateway-retries"]) == ("4", "3")


async def test_native_producer_message_is_fetched(backend: PulsarBackend, native: Native) -> None:
    topic = unique()
    await backend.fetch(topic, GROUP, 1, wall_clock_ms())  # subscribes
    producer = await native.call(native.client.create_producer, topic)
    await native.call(producer.send, b"plain", properties={"region": "eu"}, partition_key="pk")
    [got] = await collect(backend, topic, GROUP, 1)
    assert (got.body, got.key, got.tag) == (b"plain", "pk", "")
    assert dict(got.properties) == {"region": "eu"}
    assert got.message_id and (got.attempt, got.retries) == (0, 0)
    assert got.publish_ms > 0
    await backend.ack([got.lease])


async def test_delayed_publish_is_held_by_the_broker(backend: PulsarBackend) -> None:
    topic = unique()
    assert await backend.fetch(topic, GROUP, 10, wall_clock_ms()) == []
    due = wall_clock_ms() + 700
    [mid] = await backend.publish(topic, [OutMessage(body=b"later", deliver_at_ms=due)])
    stats = await backend.stats(topic, GROUP, wall_clock_ms())
    assert stats.delayed == 1 or wall_clock_ms() >= due
    [got] = await collect(backend, topic, GROUP, 1)
    assert wall_clock_ms() >= due
    assert (got.message_id, got.deliver_at_ms) == (mid, due)
    await backend.ack([got.lease])
    assert (await backend.stats(topic, GROUP, wall_clock_ms())).delayed == 0


async def test_release_later_publishes_a_delayed_copy(
    backend: PulsarBackend, native: Native
) -> None:
    topic = unique()
    audit = await native.audit(topic)
    [mid] = await backend.publish(topic, [OutMessage(body=b"retry me", key="k", tag="t")])
    [got] = await collect(backend, topic, GROUP, 1)
    visible_at = wall_clock_ms() + 800
    await backend.release([Release(got.lease, visible_at, attempt=1, retries=1)])
    stats = await backend.stats(topic, GROUP, wall_clock_ms())
    assert stats.leased == 0
    assert stats.next_visible_ms == visible_at or wall_clock_ms() >= visible_at
    [again] = await collect(backend, topic, GROUP, 1)
    assert wall_clock_ms() >= visible_at
    assert (again.message_id, again.body, again.key, again.tag) == (mid, b"retry me", "k", "t")
    assert (again.attempt, again.retries) == (1, 1)
    assert again.publish_ms == got.publish_ms and again.deliver_at_ms == visible_at
    await backend.ack([again.lease])
    # The topic now holds the original and the copy: Pulsar's reconsume-later shape.
    seen = await native.drain(audit, 2)
    assert [m.properties()["gateway-id"] for m in seen] == [mid, mid]
    assert seen[1].properties()["gateway-retries"] == "1"


async def test_release_unchanged_comes_back_first_in_order(backend: PulsarBackend) -> None:
    topic = unique()
    await backend.publish(topic, [OutMessage(body=b"a", key="k"), OutMessage(body=b"b", key="k")])
    both = await collect(backend, topic, GROUP, 2)
    await backend.release(
        [Release(m.lease, wall_clock_ms(), attempt=m.attempt, retries=m.retries) for m in both]
    )
    again = await collect(backend, topic, GROUP, 2)
    assert [(m.body, m.attempt) for m in again] == [(b"a", 0), (b"b", 0)]
    assert [m.message_id for m in again] == [m.message_id for m in both]
    await backend.ack([m.lease for m in again])


async def test_release_now_with_new_counters_publishes_a_copy(
    backend: PulsarBackend, native: Native
) -> None:
    topic = unique()
    audit = await native.audit(topic)
    [mid] = await backend.publish(topic, [OutMessage(body=b"x")])
    [got] = await collect(backend, topic, GROUP, 1)
    await backend.release([Release(got.lease, wall_clock_ms(), attempt=1, retries=0)])
    [again] = await collect(backend, topic, GROUP, 1)
    assert (again.message_id, again.body, again.attempt, again.retries) == (mid, b"x", 1, 0)
    await backend.ack([again.lease])
    seen = await native.drain(audit, 2)
    assert [m.properties().get("gateway-attempt") for m in seen] == [None, "1"]


async def test_lease_of_a_closed_backend_comes_back_counted(url: str) -> None:
    topic = unique()
    first = PulsarBackend(url)
    second = PulsarBackend(url)
    await first.open()
    await second.open()
    try:
        [mid] = await first.publish(topic, [OutMessage(body=b"x", attempt=2)])
        [got] = await collect(first, topic, GROUP, 1)
        assert got.attempt == 2
        assert await second.fetch(topic, GROUP, 1, wall_clock_ms()) == []  # second subscribes
        await first.close()  # the lease is dropped: Pulsar redelivers to the other consumer
        [again] = await collect(second, topic, GROUP, 1, timeout_s=15)
        assert again.message_id == mid
        assert again.attempt == 3
        await second.ack([again.lease])
    finally:
        await first.close()
        await second.close()


async def test_remove_and_purge_act_on_held_messages(backend: PulsarBackend) -> None:
    topic = unique()
    await backend.publish(topic, [OutMessage(body=bytes([65 + i])) for i in range(4)])
    [leased] = await collect(backend, topic, GROUP, 1)
    deadline = time.monotonic() + 10
    while len(await backend.peek(topic, GROUP, 10)) < 4 and time.monotonic() < deadline:
        await backend.wait(topic, GROUP, 0.2)
    listing = await backend.peek(topic, GROUP, 10)
    assert [m.body for m in listing] == [b"A", b"B", b"C", b"D"]
    assert await backend.remove([leased.lease, listing[2].lease]) == 2
    assert [m.body for m in await backend.peek(topic, GROUP, 10)] == [b"B", b"D"]
    assert await backend.purge(topic, GROUP) == 2
    assert await backend.peek(topic, GROUP, 10) == []
    assert await backend.fetch(topic, GROUP, 10, wall_clock_ms()) == []


async def test_purge_leaves_leased_messages_to_their_consumer(backend: PulsarBackend) -> None:
    """purge acknowledges what is buffered and leaves leased messages leased (in this process:
    its seek moved the subscription past them): an ack settles one, a release with its counters
    unchanged sends a copy, which comes again."""
    topic = unique()
    await backend.publish(topic, [OutMessage(body=bytes([65 + i])) for i in range(4)])
    acked, released = await collect(backend, topic, GROUP, 2)
    deadline = time.monotonic() + 10
    while len(await backend.peek(topic, GROUP, 10)) < 4 and time.monotonic() < deadline:
        await backend.wait(topic, GROUP, 0.2)
    assert await backend.purge(topic, GROUP) == 2  # C and D
    assert (await backend.stats(topic, GROUP, wall_clock_ms())).leased == 2
    await backend.ack([acked.lease])
    await backend.release(
        [Release(released.lease, wall_clock_ms(), released.attempt, released.retries)])
    (again,) = await collect(backend, topic, GROUP, 1)
    assert (again.message_id, again.body) == (released.message_id, b"B")
    await backend.ack([again.lease])
    assert await backend.fetch(topic, GROUP, 10, wall_clock_ms()) == []


async def until(condition: Callable[[], bool], timeout_s: float) -> bool:
    """Poll an outside condition (the broker's state as the client sees it)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def test_broker_outage_refuses_publish_and_recovers(tmp_path: Path) -> None:
    data = tmp_path / "broker"
    topic = unique()
    async with running_gateway(data, pulsar_listen="127.0.0.1:0") as upstream:
        port = upstream.front_ends["pulsar"].port
        backend = PulsarBackend(f"pulsar://127.0.0.1:{port}", send_timeout_ms=2000)
        await backend.open()
        before = await backend.publish(topic, [OutMessage(body=f"b{i}".encode()) for i in range(5)])
        leased = await collect(backend, topic, GROUP, 2)
        assert len(leased) == 2
    try:
        assert await until(lambda: not backend.healthy(), 10)
        started = time.monotonic()
        with pytest.raises(Unavailable):
            await backend.publish(topic, [OutMessage(body=b"refused")])
        assert time.monotonic() - started < 5.0
        assert not backend.healthy()
        async with running_gateway(data, pulsar_listen=f"127.0.0.1:{port}"):
            assert await until(backend.healthy, 30)
            after = await backend.publish(topic, [OutMessage(body=b"after")])
            got = await collect(backend, topic, GROUP, 6, timeout_s=20)
            assert {m.message_id for m in got} == set(before) | set(after)
            assert b"refused" not in {m.body for m in got}
            by_id = {m.message_id: m for m in got}
            assert all(by_id[m.message_id].attempt >= 1 for m in leased)
            await backend.ack([m.lease for m in got])
            await backend.close()
    finally:
        await backend.close()


async def held_count_settles(backend: PulsarBackend, topic: str, quiet_s: float = 0.5) -> int:
    """How many messages the back end holds once that number stopped changing for `quiet_s`."""
    last, since = -1, time.monotonic()
    deadline = since + 10
    while time.monotonic() < deadline:
        now = len(await backend.peek(topic, GROUP, 1000))
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            break
        await asyncio.sleep(0.05)
    return last


async def test_small_prefetch_pauses_and_resumes_the_listener(url: str) -> None:
    topic = unique()
    backend = PulsarBackend(url, prefetch=4)
    await backend.open()
    try:
        ids = await backend.publish(topic, [OutMessage(body=str(i).encode()) for i in range(30)])
        got = await backend.fetch(topic, GROUP, 1, wall_clock_ms())  # subscribes
        # Without the pause the listener would take all 30 off the broker at once.
        assert await held_count_settles(backend, topic) <= 8
        deadline = time.monotonic() + 20
        while len(got) < 30 and time.monotonic() < deadline:
            batch = await collect(backend, topic, GROUP, 3, timeout_s=2)
            await backend.ack([m.lease for m in batch])
            got += batch
        assert [m.message_id for m in got] == ids
    finally:
        await backend.close()


async def test_publish_times_come_from_the_engines_clock(url: str) -> None:
    """The back end reads the time from the engine's `Clock` (one clock for every back end)."""
    clock = ManualClock(1_700_000_000_000)
    backend = PulsarBackend(url, clock=clock)
    await backend.open()
    try:
        topic = unique()
        await backend.fetch(topic, GROUP, 1, clock.now_ms())  # subscribes
        await backend.publish(topic, [OutMessage(body=b"a")])
        (got,) = await collect(backend, topic, GROUP, 1)
        assert got.publish_ms == 1_700_000_000_000
        await backend.ack([got.lease])
    finally:
        await backend.close()
