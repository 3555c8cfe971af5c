"""A flood through the RabbitMQ back end does not hold other clients' publishes behind it.

The back end writes a batch CHUNK publishes at a time, each chunk in a turn of the event loop of
its own, with at most WINDOW publishes of a channel awaiting confirms; the batches of one topic
still go out in order. Before, a batch of 10,000 tiny messages (what the AMQP front end hands on
under a flood) was marshalled in one turn and queued whole: 10,000 and more publishes awaited
their confirms, aiormq looked through all of them for every multiple ack, and another client's
confirmed publish took 0.9-2.5 s. Counted here, not timed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from pamqp import commands

from adapters.amqp import pipeline, wire
from adapters.amqp.backend import RabbitMQBackend
from adapters.amqp.pipeline import CHUNK, WINDOW
from gateway.client import GatewayClient
from gateway.server.app import running_gateway
from tests.amqp_front import (
    RABBITMQ_URL,
    AmqpGateway,
    PerTurn,
    amqp_gateway_on,
    flood_and_victim,
    stored,
    unique,
)
from tests.e2e.test_amqp_frontend_flood import message

FLOOD = 30_000


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[AmqpGateway]:
    async with amqp_gateway_on("rabbitmq", tmp_path / "data") as gateway:
        yield gateway


class Written(PerTurn):
    """Publishes the back end marshals, most in one turn of the event loop, and most awaiting
    their confirms on one channel."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__()
        self.outstanding = 0
        marshal = wire.publish_payload
        write = pipeline._write

        def counting(channel: int, items: Sequence[Any], max_content: int) -> bytes:
            self.total += len(items)
            return marshal(channel, items, max_content)

        async def writing(channel: Any, items: Sequence[Any], track: Any) -> Any:
            written = await write(channel, items, track)
            self.outstanding = max(self.outstanding, len(channel.confirmations))
            return written

        monkeypatch.setattr(wire, "publish_payload", counting)
        monkeypatch.setattr(pipeline, "_write", writing)


async def test_a_flood_is_written_a_chunk_at_a_time_within_a_window(
    gw: AmqpGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    attacker, flood_queue, victim, victim_queue = await flood_and_victim(gw.port)
    try:
        written = Written(monkeypatch)
        written.start()
        attacker.send_raw(message(flood_queue, 0) * FLOOD)
        while written.total < 2 * CHUNK:
            await asyncio.sleep(0.001)
        victim.publish(1, b"v", victim_queue)
        ack = await victim.expect(commands.Basic.Ack, timeout=60)
        assert ack.delivery_tag == 1
        assert written.total < FLOOD, "the victim's confirm came after the whole flood"

        await attacker.writer.drain()
        assert await stored(attacker, flood_queue, FLOOD) == FLOOD  # nothing lost
        assert await stored(victim, victim_queue, 1) == 1
        written.stop()
        # Before: a whole front-end batch (up to 10,000) in one turn, all awaiting confirms.
        assert written.most <= 2 * CHUNK, f"{written.most} publishes marshalled in one turn"
        assert written.outstanding <= WINDOW + CHUNK, (
            f"{written.outstanding} publishes awaited their confirms on one channel")
    finally:
        attacker.close()
        victim.close()


async def test_pipelined_batches_of_one_topic_keep_their_order_beside_a_flood(
    tmp_path: Path,
) -> None:
    """Batches of several chunks, pipelined on one publish stream, reach the queue in the order
    they were sent, while another topic's batches go out between their chunks."""
    topic, other = unique("ordered"), unique("busy")
    batches, size = 8, 3 * CHUNK + 7
    async with (
        running_gateway(tmp_path / "data", backend=RabbitMQBackend(RABBITMQ_URL)) as app,
        GatewayClient(f"127.0.0.1:{app.grpc_port}") as client,
    ):
        async with client.publisher() as stream, client.publisher() as busy:
            await asyncio.gather(
                *(stream.publish(topic, [f"{b}-{i}".encode() for i in range(size)])
                  for b in range(batches)),
                *(busy.publish(other, [b"x"] * size) for _ in range(batches)),
            )
        got: list[bytes] = []
        async with client.consume(topic, "g", policy="rabbitmq", prefetch=500) as consumer:
            async for msg in consumer:
                got.append(msg.body)
                msg.ack_quietly()
                if len(got) == batches * size:
                    break
            await consumer.drain()
    assert got == [f"{b}-{i}".encode() for b in range(batches) for i in range(size)]
