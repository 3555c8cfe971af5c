"""Group handover between client kinds on one gateway (issue 19), with real unmodified clients:
the RocketMQ 5 Python SDK and pulsar-client, against the gateway's RocketMQ and Pulsar front
ends on the embedded store.

A consumer group fails a message twice under one client and stops; the same group, consumed by
the other client, gets that message when its retry falls due, with the count carried over in
its own terms, plus every message not yet consumed; after it acks, nothing comes again.

The clients are blocking and run their own threads; the gateway runs in a thread with its own
event loop, policy time shortened by TIME_SCALE. Tests block on queues and receives with
deadlines; nothing sleeps for a timer.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pulsar
import pytest
from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
)

from adapters.rocketmq.frontend import FrontendSettings
from gateway.engine.api import GroupView
from gateway.server.app import GatewayApp, running_gateway
from tests.e2e.sdk_cleanup import close_rocketmq_clients

pytestmark = pytest.mark.slow

TIME_SCALE = 0.25
"""Policy time runs 4 times faster: RocketMQ's 10 s and 30 s back-off steps take 2.5 s and
7.5 s, long enough to stop one client and start the other in between."""
WAIT_S = 30.0
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
T = TypeVar("T")


class Gateway:
    """The real gateway with its RocketMQ (gRPC port) and Pulsar front ends, in a thread."""

    def __init__(self, data_dir: Path) -> None:
        self._data_dir = data_dir
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self.app: GatewayApp | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(WAIT_S) or self._error is not None:
            raise RuntimeError(f"gateway did not start: {self._error!r}")

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as error:  # reported to the starting test
            self._error = error
            self._ready.set()
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        settings = FrontendSettings(long_polling_timeout_s=2, renew_interval_ms=50)
        async with running_gateway(self._data_dir, time_scale=TIME_SCALE, grace_s=0.5,
                                   pulsar_listen="127.0.0.1:0",
                                   front_end_settings={"rocketmq": settings}) as app:
            self.app = app
            self._ready.set()
            await self._stop.wait()

    @property
    def rocketmq(self) -> ClientConfiguration:
        assert self.app is not None
        return ClientConfiguration(f"127.0.0.1:{self.app.grpc_port}", Credentials("", ""))

    @property
    def pulsar_url(self) -> str:
        assert self.app is not None
        return f"pulsar://127.0.0.1:{self.app.front_ends['pulsar'].port}"

    def call(self, work: Callable[[GatewayApp], Coroutine[Any, Any, T]]) -> T:
        """Run `work(app)` on the gateway's loop and wait for it."""
        assert self.app is not None
        return asyncio.run_coroutine_threadsafe(work(self.app), self._loop).result(WAIT_S)

    def describe(self, topic: str, group: str) -> GroupView:
        return self.call(lambda app: app.engine.admin.describe(topic, group))

    def stop(self) -> None:
        if self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(WAIT_S)


@dataclass(frozen=True)
class Seen:
    body: bytes
    message_id: str
    attempt: int
    properties: dict[str, str]
    at: float


class Listener(MessageListener):  # type: ignore[misc]
    """Records every delivery; fails those whose body is in `failing`."""

    def __init__(self, failing: frozenset[bytes] = frozenset()) -> None:
        self.failing = failing
        self.seen: queue.Queue[Seen] = queue.Queue()

    def consume(self, message: Any) -> Any:
        self.seen.put(Seen(message.body, message.message_id, message.delivery_attempt,
                           dict(message.properties), time.monotonic()))
        return ConsumeResult.FAILURE if message.body in self.failing else ConsumeResult.SUCCESS

    def take(self, count: int) -> list[Seen]:
        return [self.seen.get(timeout=WAIT_S) for _ in range(count)]


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    running = Gateway(tmp_path / "data")
    yield running
    running.stop()


@pytest.fixture
def clients() -> Iterator[list[Any]]:
    """RocketMQ clients to shut down and Pulsar clients to close at the end."""
    started: list[Any] = []
    yield started
    for client in reversed(started):
        if isinstance(client, pulsar.Client):
            with contextlib.suppress(Exception):  # a client of a stopped gateway may fail
                client.close()
    close_rocketmq_clients(c for c in reversed(started) if not isinstance(c, pulsar.Client))


def _names() -> tuple[str, str]:
    return f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"


def _rocketmq_send(clients: list[Any], gateway: Gateway, topic: str, *bodies: bytes) -> list[str]:
    producer = Producer(gateway.rocketmq, (topic,))
    producer.startup()
    clients.append(producer)
    ids = []
    for body in bodies:
        message = Message()
        message.topic = topic
        message.body = body
        ids.append(producer.send(message).message_id)
    return ids


def _push(clients: list[Any], gateway: Gateway, group: str, topic: str,
          listener: Listener) -> PushConsumer:
    consumer = PushConsumer(gateway.rocketmq, group, listener, {topic: FilterExpression("*")})
    consumer.startup()
    clients.append(consumer)
    return consumer


def _pulsar(clients: list[Any], gateway: Gateway) -> pulsar.Client:
    client = pulsar.Client(gateway.pulsar_url, logger=QUIET)
    clients.append(client)
    return client


def _nothing_pending(gateway: Gateway, topic: str, group: str) -> None:
    view = gateway.describe(topic, group)
    assert (view.ready, view.delayed, view.inflight, view.waiting_retry, view.dead_letters) == (
        0, 0, 0, 0, 0), view


def test_rocketmq_sdk_to_pulsar_client(gateway: Gateway, clients: list[Any]) -> None:
    """The retry RocketMQ scheduled on %RETRY%G comes to the Pulsar Shared subscription of the
    same name when due, with redelivery count 2: the count pulsar-client shows and its own
    dead-letter policy counts against (the message also keeps RocketMQ's RECONSUME_TIME)."""
    topic, group = _names()
    _rocketmq_send(clients, gateway, topic, b"first")
    listener = Listener(failing=frozenset({b"first"}))
    rocket = _push(clients, gateway, group, topic, listener)
    failures = listener.take(2)
    assert [(s.body, s.attempt) for s in failures] == [(b"first", 1), (b"first", 2)]
    rocket.shutdown()  # the group's RocketMQ consumer stops
    clients.remove(rocket)
    assert listener.seen.empty()
    later = _rocketmq_send(clients, gateway, topic, b"m1", b"m2", b"m3")

    client = _pulsar(clients, gateway)
    consumer = client.subscribe(f"persistent://public/default/{topic}", group,
                                consumer_type=pulsar.ConsumerType.Shared)
    got: dict[bytes, tuple[pulsar.Message, float]] = {}
    while len(got) < 4:
        msg = consumer.receive(timeout_millis=int(WAIT_S * 1000))
        got[msg.data()] = (msg, time.monotonic())
        consumer.acknowledge(msg)
    assert set(got) == {b"first", b"m1", b"m2", b"m3"}
    first, first_at = got[b"first"]
    assert first.redelivery_count() == 2
    assert first.properties()["RECONSUME_TIME"] == "2"
    # It kept the schedule RocketMQ gave it: 30 s (scaled) after the second failure.
    assert first_at - failures[1].at >= 0.8 * 30 * TIME_SCALE
    assert all(got[body][0].redelivery_count() == 0 for body in (b"m1", b"m2", b"m3"))
    assert len(later) == 3
    # After the acks nothing comes again, and the gateway holds nothing for the group.
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=3000)
    _nothing_pending(gateway, topic, group)


def test_pulsar_client_to_rocketmq_sdk(gateway: Gateway, clients: list[Any]) -> None:
    """A Pulsar Shared subscription nacks a message and leaves holding it after the second
    failure; the RocketMQ push consumer of the same group gets it with delivery attempt 3 (two
    failures counted: RocketMQ's reconsume times 2), plus the message nobody consumed yet."""
    topic, group = _names()
    client = _pulsar(clients, gateway)
    producer = client.create_producer(f"persistent://public/default/{topic}",
                                      batching_enabled=False)
    producer.send(b"first")
    consumer = client.subscribe(f"persistent://public/default/{topic}", group,
                                consumer_type=pulsar.ConsumerType.Shared,
                                initial_position=pulsar.InitialPosition.Earliest,
                                negative_ack_redelivery_delay_ms=2000)
    one = consumer.receive(timeout_millis=int(WAIT_S * 1000))
    assert (one.data(), one.redelivery_count()) == (b"first", 0)
    consumer.negative_acknowledge(one)  # failure 1: the client asks again after 2 s
    two = consumer.receive(timeout_millis=int(WAIT_S * 1000))
    assert (two.data(), two.redelivery_count()) == (b"first", 1)
    # Failure 2: Pulsar counts a redelivery when the consumer leaves holding the message.
    consumer.close()
    producer.send(b"second")

    listener = Listener()
    _push(clients, gateway, group, topic, listener)
    seen = {s.body: s for s in listener.take(2)}
    assert set(seen) == {b"first", b"second"}
    assert seen[b"first"].attempt == 3
    assert seen[b"second"].attempt == 1
    with pytest.raises(queue.Empty):
        listener.seen.get(timeout=3)
    _nothing_pending(gateway, topic, group)


def test_rocketmq_sdk_to_pulsar_client_across_a_restart(tmp_path: Path,
                                                         clients: list[Any]) -> None:
    """The gateway restarts between the two kinds of consumer: the retry RocketMQ left on
    %RETRY%G (on disk) still reaches the Pulsar subscription, on time and with its count."""
    topic, group = _names()
    first = Gateway(tmp_path / "data")
    try:
        _rocketmq_send(clients, first, topic, b"first")
        listener = Listener(failing=frozenset({b"first"}))
        rocket = _push(clients, first, group, topic, listener)
        failures = listener.take(2)
        rocket.shutdown()
        clients.remove(rocket)
    finally:
        first.stop()
    second = Gateway(tmp_path / "data")
    try:
        client = _pulsar(clients, second)
        consumer = client.subscribe(f"persistent://public/default/{topic}", group,
                                    consumer_type=pulsar.ConsumerType.Shared)
        msg = consumer.receive(timeout_millis=int(WAIT_S * 1000))
        assert (msg.data(), msg.redelivery_count()) == (b"first", 2)
        assert time.monotonic() - failures[1].at >= 0.8 * 30 * TIME_SCALE
        consumer.acknowledge(msg)
        with pytest.raises(pulsar.Timeout):
            consumer.receive(timeout_millis=3000)
        _nothing_pending(second, topic, group)
    finally:
        second.stop()
