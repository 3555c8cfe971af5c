"""The official Python `pulsar-client` against the gateway's Pulsar front end.

Each test starts the real gateway (embedded store in tmp_path) plus the Pulsar front end on a free
port and drives the unmodified client. The client's own timers run in real time, so its delays are
kept short and the bounds generous; client calls block, so they run in worker threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import pulsar
import pulsar.asyncio
import pytest

from adapters.pulsar.frontend import PulsarFrontEnd
from gateway.engine.clock import SystemClock
from gateway.server.app import running_gateway
from gateway.server.auth import Authorizer, Principal

T = TypeVar("T")
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
NACK_DELAY_MS = 100
SUB_TYPES = {
    "exclusive": pulsar.ConsumerType.Exclusive,
    "shared": pulsar.ConsumerType.Shared,
    "failover": pulsar.ConsumerType.Failover,
    "key_shared": pulsar.ConsumerType.KeyShared,
}


async def run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking client call off the event loop."""
    return await asyncio.to_thread(fn, *args, **kwargs)


class Stack:
    """The gateway plus the Pulsar front end, restartable on the same data dir and port."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = 0
        self.front: PulsarFrontEnd | None = None
        self._exit: contextlib.AsyncExitStack | None = None

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._exit = contextlib.AsyncExitStack()
        app = await self._exit.enter_async_context(
            running_gateway(data_dir=self.data_dir, listen="127.0.0.1:0", clock=SystemClock())
        )
        self.front = PulsarFrontEnd(app.engine, "127.0.0.1", self.port)
        await self.front.start()
        self.port = self.front.port

    async def stop(self) -> None:
        if self.front is not None:
            await self.front.stop()
            self.front = None
        if self._exit is not None:
            await self._exit.aclose()
            self._exit = None


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    instance = Stack(tmp_path / "data")
    await instance.start()
    yield instance
    await instance.stop()


@pytest.fixture
async def client(stack: Stack) -> AsyncIterator[pulsar.Client]:
    instance = pulsar.Client(stack.url, operation_timeout_seconds=10, logger=QUIET)
    yield instance
    await run(instance.close)


async def receive_all(consumer: pulsar.Consumer, quiet_ms: int = 700) -> list[pulsar.Message]:
    """Receive until nothing arrives for `quiet_ms`."""
    out: list[pulsar.Message] = []
    while True:
        try:
            out.append(await run(consumer.receive, quiet_ms))
        except pulsar.Timeout:
            return out


async def send_sync(producer: pulsar.Producer, count: int, prefix: str, **kwargs: Any) -> None:
    for i in range(count):
        await run(producer.send, f"{prefix}{i}".encode(), properties={"i": str(i)}, **kwargs)


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
@pytest.mark.parametrize("sub_type", sorted(SUB_TYPES))
async def test_produce_and_consume(client: pulsar.Client, sub_type: str, batching: bool) -> None:
    topic = f"orders-{sub_type}-{batching}"
    consumer = await run(client.subscribe, topic, "sub", consumer_type=SUB_TYPES[sub_type])
    producer = await run(
        client.create_producer,
        topic,
        batching_enabled=batching,
        batching_max_publish_delay_ms=5,
    )
    results: list[Any] = []
    for i in range(20):
        producer.send_async(
            f"m{i}".encode(),
            lambda res, _mid: results.append(res),
            properties={"i": str(i), "kind": "order"},
            partition_key=f"k{i % 3}",
        )
    await run(producer.flush)
    assert results == [pulsar.Result.Ok] * 20
    got = []
    for _ in range(20):
        msg = await run(consumer.receive, 5000)
        got.append(msg)
        await run(consumer.acknowledge, msg)
    assert sorted(m.data() for m in got) == sorted(f"m{i}".encode() for i in range(20))
    if sub_type != "key_shared":
        assert [m.data() for m in got] == [f"m{i}".encode() for i in range(20)]
    for msg in got:
        index = int(msg.data()[1:])
        assert msg.properties() == {"i": str(index), "kind": "order"}
        assert msg.partition_key() == f"k{index % 3}"
        assert msg.redelivery_count() == 0
        assert msg.topic_name() == f"persistent://public/default/{topic}"
    assert await receive_all(consumer) == []


async def test_shared_nack_counts_rise_and_client_dead_letters(client: pulsar.Client) -> None:
    consumer = await run(
        client.subscribe,
        "payments",
        "billing",
        consumer_type=pulsar.ConsumerType.Shared,
        negative_ack_redelivery_delay_ms=NACK_DELAY_MS,
        dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(max_redeliver_count=2),
    )
    producer = await run(client.create_producer, "payments")
    await run(producer.send, b"poison", properties={"origin": "test"})
    counts = []
    for msg in await _nack_everything(consumer):
        counts.append(msg.redelivery_count())
    assert counts == [0, 1, 2]
    dlq = await run(
        client.subscribe,
        "payments-billing-DLQ",
        "inspect",
        initial_position=pulsar.InitialPosition.Earliest,
    )
    dead = await run(dlq.receive, 5000)
    assert dead.data() == b"poison"
    assert dead.properties()["origin"] == "test"
    assert dead.properties()["REAL_TOPIC"] == "persistent://public/default/payments"
    await run(dlq.acknowledge, dead)
    assert await receive_all(consumer) == []


async def _nack_everything(consumer: pulsar.Consumer) -> list[pulsar.Message]:
    seen = []
    while True:
        try:
            msg = await run(consumer.receive, 2000)
        except pulsar.Timeout:
            return seen
        seen.append(msg)
        consumer.negative_acknowledge(msg)


@pytest.mark.parametrize("sub_type", ["exclusive", "failover"])
async def test_exclusive_nack_redelivers_once_with_count_zero(
    client: pulsar.Client, sub_type: str
) -> None:
    consumer = await run(
        client.subscribe,
        f"ledger-{sub_type}",
        "sub",
        consumer_type=SUB_TYPES[sub_type],
        negative_ack_redelivery_delay_ms=NACK_DELAY_MS,
    )
    producer = await run(client.create_producer, f"ledger-{sub_type}", batching_enabled=False)
    await send_sync(producer, 2, "e")
    first = await run(consumer.receive, 5000)
    assert first.data() == b"e0"
    consumer.negative_acknowledge(first)
    deliveries = [first]
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        try:
            msg = await run(consumer.receive, 500)
        except pulsar.Timeout:
            continue
        deliveries.append(msg)
        await run(consumer.acknowledge, msg)
    bodies = [m.data() for m in deliveries]
    assert sorted(bodies) == [b"e0", b"e0", b"e1"] or sorted(bodies) == [b"e0", b"e0", b"e1", b"e1"]
    assert bodies.count(b"e0") == 2
    assert all(m.redelivery_count() == 0 for m in deliveries)


async def test_deliver_after_is_honoured(client: pulsar.Client) -> None:
    consumer = await run(
        client.subscribe, "scheduled", "sub", consumer_type=pulsar.ConsumerType.Shared
    )
    producer = await run(client.create_producer, "scheduled", batching_enabled=False)
    started = time.monotonic()
    await run(producer.send, b"later", deliver_after=datetime.timedelta(milliseconds=1500))
    await run(producer.send, b"now")
    first = await run(consumer.receive, 10_000)
    assert first.data() == b"now"
    await run(consumer.acknowledge, first)
    second = await run(consumer.receive, 10_000)
    elapsed = time.monotonic() - started
    assert second.data() == b"later"
    assert 1.4 <= elapsed < 10


@pytest.mark.slow
async def test_ack_timeout_redelivers(client: pulsar.Client) -> None:
    consumer = await run(
        client.subscribe,
        "slowpoke",
        "sub",
        consumer_type=pulsar.ConsumerType.Shared,
        unacked_messages_timeout_ms=10_000,
    )
    producer = await run(client.create_producer, "slowpoke")
    await run(producer.send, b"forgotten")
    first = await run(consumer.receive, 5000)
    started = time.monotonic()
    assert first.redelivery_count() == 0
    again = await run(consumer.receive, 30_000)
    assert again.data() == b"forgotten"
    assert again.redelivery_count() == 1
    assert time.monotonic() - started >= 9
    await run(consumer.acknowledge, again)
    assert await receive_all(consumer) == []


async def test_closed_consumer_gives_everything_back(client: pulsar.Client) -> None:
    first = await run(client.subscribe, "handoff", "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = await run(client.create_producer, "handoff")
    await send_sync(producer, 5, "h")
    held = [await run(first.receive, 5000) for _ in range(2)]
    await run(first.acknowledge, held[0])
    await run(first.close)
    second = await run(client.subscribe, "handoff", "sub", consumer_type=pulsar.ConsumerType.Shared)
    got = await receive_all(second)
    assert sorted(m.data() for m in got) == [b"h1", b"h2", b"h3", b"h4"]


async def test_second_exclusive_consumer_is_refused(client: pulsar.Client) -> None:
    await run(client.subscribe, "solo", "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        await run(client.subscribe, "solo", "sub", consumer_type=pulsar.ConsumerType.Exclusive)


async def test_key_shared_keeps_a_key_on_one_consumer(client: pulsar.Client) -> None:
    kind = pulsar.ConsumerType.KeyShared
    one = await run(client.subscribe, "keyed", "sub", consumer_type=kind, receiver_queue_size=100)
    two = await run(client.subscribe, "keyed", "sub", consumer_type=kind, receiver_queue_size=100)
    producer = await run(client.create_producer, "keyed", batching_enabled=False)
    for i in range(30):
        await run(producer.send, f"{i}".encode(), partition_key=f"key-{i % 5}")
    owners: dict[str, set[int]] = {}
    total = 0
    for index, consumer in enumerate((one, two)):
        for msg in await receive_all(consumer):
            owners.setdefault(msg.partition_key(), set()).add(index)
            total += 1
            await run(consumer.acknowledge, msg)
    assert total == 30
    assert all(len(found) == 1 for found in owners.values())


@pytest.mark.slow
async def test_restart_loses_nothing_acknowledged_as_sent(stack: Stack) -> None:
    client = pulsar.Client(stack.url, operation_timeout_seconds=30, logger=QUIET)
    try:
        consumer = await run(
            client.subscribe, "durable", "sub", consumer_type=pulsar.ConsumerType.Shared
        )
        producer = await run(
            client.create_producer,
            "durable",
            batching_enabled=True,
            batching_max_publish_delay_ms=5,
            send_timeout_millis=60_000,
        )
        sent: list[int] = []

        def track(i: int) -> Callable[[Any, Any], None]:
            return lambda res, _mid: sent.append(i) if res == pulsar.Result.Ok else None

        for i in range(50):
            producer.send_async(f"{i}".encode(), track(i))
        await run(producer.flush)
        before = await run(consumer.receive, 5000)  # received, never acked
        await stack.stop()
        for i in range(50, 80):
            producer.send_async(f"{i}".encode(), track(i))
        await stack.start()
        await run(producer.flush)
        assert sorted(sent) == list(range(80))
        got = set()
        for msg in await receive_all(consumer, quiet_ms=3000):
            got.add(int(msg.data()))
            await run(consumer.acknowledge, msg)
        assert int(before.data()) in got
        assert got == set(range(80))
    finally:
        await run(client.close)


async def test_asyncio_client_batches_and_acks_cumulatively(stack: Stack) -> None:
    client = pulsar.asyncio.Client(stack.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        consumer = await client.subscribe(
            "ticks", "sub", consumer_type=pulsar.ConsumerType.Exclusive
        )
        producer = await client.create_producer("ticks")  # batching on by default
        ids = await asyncio.gather(*(producer.send(f"t{i}".encode()) for i in range(10)))
        assert len({(m.ledger_id(), m.entry_id()) for m in ids}) == 1  # one batch, one entry
        got = [await consumer.receive() for _ in range(10)]
        assert [m.data() for m in got] == [f"t{i}".encode() for i in range(10)]
        await consumer.acknowledge_cumulative(got[5])
        await consumer.close()
        again = await client.subscribe("ticks", "sub", consumer_type=pulsar.ConsumerType.Exclusive)
        rest = [await asyncio.wait_for(again.receive(), 10) for _ in range(4)]
        assert [m.data() for m in rest] == [b"t6", b"t7", b"t8", b"t9"]
        for msg in rest:
            await again.acknowledge(msg)
    finally:
        await client.close()


async def test_asyncio_client_nack_of_one_batched_message_redelivers_only_it(
    stack: Stack,
) -> None:
    client = pulsar.asyncio.Client(stack.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        consumer = await client.subscribe(
            "bursts",
            "sub",
            consumer_type=pulsar.ConsumerType.Shared,
            negative_ack_redelivery_delay_ms=NACK_DELAY_MS,
        )
        producer = await client.create_producer("bursts")
        await asyncio.gather(*(producer.send(f"b{i}".encode()) for i in range(5)))
        for _ in range(5):
            msg = await consumer.receive()
            if msg.data() == b"b2":
                await consumer.negative_acknowledge(msg)
            else:
                await consumer.acknowledge(msg)
        again = await asyncio.wait_for(consumer.receive(), 10)
        assert (again.data(), again.redelivery_count()) == (b"b2", 1)
        await consumer.acknowledge(again)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(consumer.receive(), 1.0)
    finally:
        await client.close()


async def test_gateway_serves_pulsar_when_asked(tmp_path: Path) -> None:
    async with running_gateway(
        data_dir=tmp_path / "data", clock=SystemClock(), pulsar_listen="127.0.0.1:0"
    ) as app:
        url = f"pulsar://127.0.0.1:{app.front_ends['pulsar'].port}"
        client = pulsar.asyncio.Client(url, operation_timeout_seconds=10, logger=QUIET)
        try:
            consumer = await client.subscribe("wired", "sub")
            producer = await client.create_producer("wired")
            await producer.send(b"through the gateway")
            msg = await asyncio.wait_for(consumer.receive(), 10)
            assert msg.data() == b"through the gateway"
            await consumer.acknowledge(msg)
        finally:
            await client.close()


async def test_announced_size_limit_is_enforced_by_the_client(tmp_path: Path) -> None:
    async with running_gateway(data_dir=tmp_path / "data", clock=SystemClock()) as app:
        front = PulsarFrontEnd(app.engine, "127.0.0.1", 0, max_message_size=64 * 1024)
        await front.start()
        client = pulsar.Client(f"pulsar://127.0.0.1:{front.port}", logger=QUIET)
        try:
            producer = await run(client.create_producer, "limited", batching_enabled=False)
            await run(producer.send, b"x" * 1000)
            with pytest.raises(pulsar.MessageTooBig):
                await run(producer.send, b"x" * (100 * 1024))
        finally:
            await run(client.close)
            await front.stop()


async def test_tokens_and_topic_permissions(tmp_path: Path) -> None:
    principal = Principal(
        "app",
        hashlib.sha256(b"s3cret").hexdigest(),
        publish=("orders*",),
        consume=("orders*",),
        groups=("billing",),
    )
    async with running_gateway(data_dir=tmp_path / "data", clock=SystemClock()) as app:
        authorizer = Authorizer([principal], app.engine.registry.schemes.values())
        front = PulsarFrontEnd(app.engine, "127.0.0.1", 0, authorizer=authorizer)
        await front.start()
        url = f"pulsar://127.0.0.1:{front.port}"
        try:
            for auth in (None, pulsar.AuthenticationToken("wrong")):
                stranger = pulsar.Client(
                    url, authentication=auth, operation_timeout_seconds=2, logger=QUIET
                )
                with pytest.raises((pulsar.Timeout, pulsar.AuthenticationError)):
                    await run(stranger.create_producer, "orders")
                await run(stranger.close)
            client = pulsar.Client(
                url, authentication=pulsar.AuthenticationToken("s3cret"), logger=QUIET
            )
            consumer = await run(client.subscribe, "orders", "billing")
            producer = await run(client.create_producer, "orders")
            await run(producer.send, b"allowed")
            assert (await run(consumer.receive, 5000)).data() == b"allowed"
            with pytest.raises(pulsar.AuthorizationError):
                await run(client.create_producer, "payroll")
            with pytest.raises(pulsar.AuthorizationError):
                await run(client.subscribe, "orders", "marketing")
            await run(client.close)
        finally:
            await front.stop()
