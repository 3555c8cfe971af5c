"""GET_LAST_MESSAGE_ID of a fresh subscription at Latest on a topic that already holds messages
(real pulsar-client, on the embedded store and the in-memory back end).

The front end answered it from what the consumer had sent and what its group still held, so a
consumer or reader that had sent nothing and had nothing waiting was told "no message" (entry
-1): `Consumer.get_last_message_id()` on such a subscription answered entry -1 where a broker
answers the topic's newest message id. It now asks the engine for the topic's newest message
(`EnginePort.last_id`) and answers its id as both the last id and the mark-delete position: a
reader at `latest` still has nothing available until a new message comes, and one at
`earliest` reads everything as before."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from adapters.pulsar.frontend import PulsarFrontEnd
from gateway.backend.memory import InMemoryBackend
from gateway.engine.clock import SystemClock
from gateway.server.app import running_gateway
from tests.e2e.test_pulsar_frontend import QUIET
from tests.e2e.test_pulsar_frontend_last_message_id import drain

TOPIC = "last-id-latest"
LATEST = pulsar.InitialPosition.Latest


@pytest.fixture(params=["embedded", "memory"])
async def port(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[int]:
    backend = InMemoryBackend(SystemClock()) if request.param == "memory" else None
    async with running_gateway(data_dir=tmp_path / "data", listen="127.0.0.1:0",
                               clock=SystemClock(), backend=backend) as app:
        front = PulsarFrontEnd(app.engine, "127.0.0.1", 0)
        await front.start()
        try:
            yield front.port
        finally:
            await front.stop()


def session(port: int, work: Any) -> Any:
    client = pulsar.Client(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=5,
                           logger=QUIET)
    try:
        return work(client)
    finally:
        client.close()


def key(message_id: Any) -> tuple[int, int]:
    return message_id.ledger_id(), message_id.entry_id()


async def test_a_fresh_latest_consumer_is_told_the_topics_newest_message(port: int) -> None:
    def work(client: Any) -> dict[str, Any]:
        producer = client.create_producer(TOPIC, batching_enabled=False)
        sent = [key(producer.send(f"m{i}".encode())) for i in range(3)]
        consumer = client.subscribe(TOPIC, "fresh", initial_position=LATEST)
        out: dict[str, Any] = {"sent": sent, "last": key(consumer.get_last_message_id())}
        new = key(producer.send(b"new"))
        got = consumer.receive(5000)
        consumer.acknowledge(got)
        out.update(new=new, got=(got.data(), key(got.message_id())),
                   last_after=key(consumer.get_last_message_id()))
        consumer.close()
        again = client.subscribe(TOPIC, "fresh", initial_position=LATEST)
        out["last_again"] = key(again.get_last_message_id())  # nothing sent, nothing waiting
        return out

    out = await asyncio.to_thread(session, port, work)
    assert out["last"] == out["sent"][-1]
    assert out["got"] == (b"new", out["new"])
    assert out["last_after"] == out["last_again"] == out["new"]


async def test_a_latest_reader_has_nothing_available_until_a_new_message(port: int) -> None:
    def work(client: Any) -> dict[str, Any]:
        producer = client.create_producer(TOPIC, batching_enabled=False)
        for i in range(3):
            producer.send(f"m{i}".encode())
        latest = client.create_reader(TOPIC, pulsar.MessageId.latest)
        out: dict[str, Any] = {"before": latest.has_message_available()}
        new = producer.send(b"new")
        out["after"] = latest.has_message_available()
        got = latest.read_next(5000)
        out["read"] = (got.data(), key(got.message_id()) == key(new))
        out["then"] = latest.has_message_available()
        out["earliest"] = drain(client.create_reader(TOPIC, pulsar.MessageId.earliest))
        return out

    out = await asyncio.to_thread(session, port, work)
    assert (out["before"], out["after"], out["then"]) == (False, True, False)
    assert out["read"] == (b"new", True)
    assert out["earliest"] == [b"m0", b"m1", b"m2", b"new"]


async def test_an_inclusive_latest_reader_reads_the_newest_message(port: int) -> None:
    """As on a broker: the client seeks to the last message id it is told and reads it."""

    def work(client: Any) -> dict[str, Any]:
        producer = client.create_producer(TOPIC, batching_enabled=False)
        for i in range(3):
            producer.send(f"m{i}".encode())
        reader = client.create_reader(TOPIC, pulsar.MessageId.latest,
                                      start_message_id_inclusive=True)
        out: dict[str, Any] = {"available": reader.has_message_available()}
        out["read"] = drain(reader)
        return out

    out = await asyncio.to_thread(session, port, work)
    assert out == {"available": True, "read": [b"m2"]}
