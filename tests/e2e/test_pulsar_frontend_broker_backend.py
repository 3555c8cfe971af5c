"""The Pulsar front end over a back end that places groups itself (the real RabbitMQ on this
machine): message ids still increase in delivery order (the broker's are random), a cumulative
ack loses nothing, a Latest subscription starts where the broker starts it (its queue), and
seek is refused with NotAllowedError instead of hanging or moving nothing silently."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pulsar
import pytest

from adapters.amqp.backend import RabbitMQBackend
from adapters.pulsar.frontend import PulsarFrontEnd
from gateway.engine.clock import SystemClock
from gateway.server.app import running_gateway
from tests.e2e.pulsar_stack import client_for, receive_all, run

URL = os.environ.get("GATEWAY_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")


@pytest.fixture
async def url(tmp_path: Path) -> AsyncIterator[str]:
    async with running_gateway(
        tmp_path / "data", clock=SystemClock(), backend=RabbitMQBackend(URL)
    ) as app:
        front = PulsarFrontEnd(app.engine, "127.0.0.1", 0, state_dir=tmp_path / "pulsar")
        await front.start()
        yield f"pulsar://127.0.0.1:{front.port}"
        await front.stop()


async def test_ids_increase_and_seek_is_refused_on_a_broker_back_end(url: str) -> None:
    topic = f"pf-broker-{uuid.uuid4().hex[:8]}"
    client = client_for(url)
    try:
        consumer = await run(client.subscribe, topic, "sub")  # the queue is the group
        producer = await run(client.create_producer, topic, batching_enabled=False)
        for i in range(6):
            await run(producer.send, f"m{i}".encode())
        got = await receive_all(consumer)
        assert [m.data() for m in got] == [f"m{i}".encode() for i in range(6)]
        keys = [(m.message_id().ledger_id(), m.message_id().entry_id()) for m in got]
        assert keys == sorted(keys)
        await run(consumer.acknowledge_cumulative, got[2])
        for i in range(6, 9):
            await run(producer.send, f"m{i}".encode())
        assert [m.data() for m in await receive_all(consumer)] == [
            f"m{i}".encode() for i in range(6, 9)
        ]
        with pytest.raises(pulsar.NotAllowedError):
            await run(consumer.seek, 0)
    finally:
        await run(client.close)
