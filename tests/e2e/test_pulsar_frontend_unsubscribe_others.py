"""UNSUBSCRIBE while a consumer of another front end (a gRPC `Consume` stream) is on the same
subscription (third attack round). The per-name lock orders Pulsar's own commands only: a gRPC
consumer that attached after the front end had closed the unsubscribing consumer, and before
the group was dropped, left the UNSUBSCRIBE refused (ConsumerBusy) with its consumer closed on
the gateway's side and the client never told: it received nothing more. Now the consumer is
taken out of its subscription with no await after the check, and when the delete is refused
all the same the client is told its consumer closed (CLOSE_CONSUMER), as a broker whose
subscription delete fails does, and subscribes again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pulsar
import pytest

import tests.pulsar_raw as raw
from adapters.pulsar.frontend import PulsarFrontEnd
from gateway.client import GatewayClient
from gateway.engine.api import SubscriptionSpec
from gateway.engine.clock import SystemClock
from gateway.server.app import GatewayApp, running_gateway
from tests.e2e.test_pulsar_frontend import QUIET
from tests.e2e.test_pulsar_frontend_attacks_consumers import SHARED, subscribed
from tests.pulsar_raw import Cmd

TOPIC, SUB = "u-topic", "u-sub"
POLICY, OPTIONS = "pulsar-nack", {"nack_delay_ms": "0"}


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[tuple[PulsarFrontEnd, GatewayApp]]:
    async with running_gateway(data_dir=tmp_path / "data", clock=SystemClock()) as app:
        front = PulsarFrontEnd(app.engine, "127.0.0.1", 0)
        await front.start()
        try:
            yield front, app
        finally:
            await front.stop()


class Session:
    """A pulsar-client consumer and producer, driven from the test's loop."""

    def __init__(self, port: int) -> None:
        self.client = pulsar.Client(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=5,
                                    logger=QUIET)
        self.consumer: Any = None
        self.producer: Any = None

    def open(self) -> None:
        self.consumer = self.client.subscribe(TOPIC, SUB, consumer_type=pulsar.ConsumerType.Shared)
        self.producer = self.client.create_producer(TOPIC, batching_enabled=False)

    def unsubscribe(self) -> str:
        try:
            self.consumer.unsubscribe()
        except Exception as exc:
            return type(exc).__name__
        return "ok"

    def round_trip(self, body: bytes) -> bytes:
        """Send `body` and receive it on the consumer (acked)."""
        self.producer.send(body)
        msg = self.consumer.receive(10_000)
        self.consumer.acknowledge(msg)
        data: bytes = msg.data()
        return data


async def consumers(app: GatewayApp) -> int:
    state = app.engine.group_state(TOPIC, SUB)
    return 0 if state is None else state.consumers


async def wait_for(check: Callable[[], Awaitable[bool]]) -> None:
    for _ in range(500):
        if await check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition never held")


async def test_unsubscribe_is_refused_while_a_grpc_consumer_is_attached(
    stack: tuple[PulsarFrontEnd, GatewayApp],
) -> None:
    front, app = stack
    session = Session(front.port)
    try:
        await asyncio.to_thread(session.open)
        async with GatewayClient(f"127.0.0.1:{app.grpc_port}") as grpc_client, \
                grpc_client.consume(TOPIC, SUB, policy=POLICY, options=OPTIONS, prefetch=1):
            await wait_for(lambda: _equal(consumers(app), 2))
            assert await asyncio.to_thread(session.unsubscribe) == "ConsumerBusy"
            assert await consumers(app) == 2
        await wait_for(lambda: _equal(consumers(app), 1))
        # The Pulsar consumer was never closed: it receives what is sent now.
        assert await asyncio.to_thread(session.round_trip, b"after") == b"after"
        assert await asyncio.to_thread(session.unsubscribe) == "ok"
        assert app.engine.group_state(TOPIC, SUB) is None
    finally:
        await asyncio.to_thread(session.client.close)


async def test_a_grpc_consumer_attaching_during_the_unsubscribe_leaves_the_consumer_usable(
    stack: tuple[PulsarFrontEnd, GatewayApp],
) -> None:
    """The race made deterministic: another front end's consumer attaches when the group is
    about to be dropped, after the check that found none."""
    front, app = stack
    engine = app.engine
    session = Session(front.port)
    drop = engine.drop_group
    other: list[Any] = []

    async def attach_first(topic: str, group: str) -> bool:
        if (topic, group) == (TOPIC, SUB) and not other:
            spec = SubscriptionSpec(topic=TOPIC, group=SUB, policy=POLICY, options=OPTIONS,
                                    consumer_id="grpc-consumer")
            other.append(await engine.open_consumer(spec))  # no credit: takes nothing
        return await drop(topic, group)

    try:
        await asyncio.to_thread(session.open)
        engine.drop_group = attach_first  # type: ignore[method-assign]
        assert await asyncio.to_thread(session.unsubscribe) == "ConsumerBusy"
        engine.drop_group = drop  # type: ignore[method-assign]
        assert other
        # The client was told its consumer closed and subscribed again: it is served.
        assert await asyncio.to_thread(session.round_trip, b"after") == b"after"
        assert await consumers(app) == 2
        await other[0].close()
        assert await asyncio.to_thread(session.unsubscribe) == "ok"
    finally:
        engine.drop_group = drop  # type: ignore[method-assign]
        await asyncio.to_thread(session.client.close)


async def _equal(value: Awaitable[int], wanted: int) -> bool:
    return await value == wanted


def force_unsubscribe(consumer_id: int, request_id: int) -> raw.pb.BaseCommand:
    cmd = Cmd(type=Cmd.UNSUBSCRIBE)
    cmd.unsubscribe.consumer_id, cmd.unsubscribe.request_id = consumer_id, request_id
    cmd.unsubscribe.force = True
    return cmd


async def test_a_forced_unsubscribe_closes_the_other_consumers(
    stack: tuple[PulsarFrontEnd, GatewayApp],
) -> None:
    """UNSUBSCRIBE with `force` (Java's unsubscribe(true)) was refused like a plain one while
    other consumers were attached: the flag was ignored. A broker closes them and deletes."""
    front, app = stack
    one = await subscribed(front.port, 1, SHARED)
    two = await subscribed(front.port, 1, SHARED)
    one.send(force_unsubscribe(1, 7))
    assert (await two.expect(Cmd.CLOSE_CONSUMER)).command.close_consumer.consumer_id == 1
    assert (await one.expect(Cmd.SUCCESS)).command.success.request_id == 7
    assert app.engine.group_state("raw", "s") is None
    await one.close()
    await two.close()


async def test_a_forced_unsubscribe_with_a_grpc_consumer_is_refused_and_closes_nobody(
    stack: tuple[PulsarFrontEnd, GatewayApp],
) -> None:
    """A consumer of another front end cannot be closed from the Pulsar front end: refused
    before anything is closed."""
    front, app = stack
    one = await subscribed(front.port, 1, SHARED)
    two = await subscribed(front.port, 1, SHARED)
    other = await app.engine.open_consumer(SubscriptionSpec(
        topic="raw", group="s", policy=POLICY, options=OPTIONS, consumer_id="grpc-consumer"))
    one.send(force_unsubscribe(1, 7))
    error = (await one.expect(Cmd.ERROR)).command.error
    assert (error.request_id, error.error) == (7, raw.pb.ConsumerBusy)
    ask = Cmd(type=Cmd.GET_LAST_MESSAGE_ID)
    ask.getLastMessageId.consumer_id, ask.getLastMessageId.request_id = 1, 8
    two.send(ask)  # still open: its next frame is the answer, not a CLOSE_CONSUMER
    await two.expect(Cmd.GET_LAST_MESSAGE_ID_RESPONSE)
    state = app.engine.group_state("raw", "s")
    assert state is not None and state.consumers == 3
    await other.close()
    await one.close()
    await two.close()
