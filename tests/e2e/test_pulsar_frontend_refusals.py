"""A send the gateway refuses fails that one send of the official `pulsar-client`, at once.

The C++ library under pulsar-client (Python, Node) fails a single send only on a ChecksumError
reply; on any other SEND_ERROR it reconnects and sends the same frame again, for ever, and its
`send()` never returns. So a refused message (too many properties, a reserved property key, a
delivery time beyond 400 days) must be answered so that the client gives up that message, keeps
its connection and producer, and goes on with the next one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from adapters.pulsar.frontend import PulsarFrontEnd
from adapters.pulsar.frontend.replies import send_failure
from adapters.pulsar.wire import wire_pb2 as pb
from gateway.engine.clock import SystemClock
from gateway.server.app import running_gateway
from tests.e2e.pulsar_stack import client_for, receive_all, run

DAY_MS = 86_400_000


@pytest.fixture
async def front(tmp_path: Path) -> AsyncIterator[PulsarFrontEnd]:
    async with running_gateway(
        data_dir=tmp_path / "data", listen="127.0.0.1:0", clock=SystemClock()
    ) as app:
        front = PulsarFrontEnd(app.engine, "127.0.0.1", 0)
        await front.start()
        yield front
        await front.stop()


REFUSED: list[tuple[str, dict[str, Any]]] = [
    ("too-many-properties", {"properties": {f"p{i}": "v" for i in range(1100)}}),
    ("reserved-property", {"properties": {"x-gateway-attempt": "7"}}),
    ("too-far-ahead", {"deliver_at": int(time.time() * 1000) + 500 * DAY_MS}),
]


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
@pytest.mark.parametrize("case, fields", REFUSED, ids=[c for c, _ in REFUSED])
async def test_a_refused_send_fails_once_and_the_producer_goes_on(
    front: PulsarFrontEnd, case: str, fields: dict[str, Any], batching: bool
) -> None:
    client = client_for(f"pulsar://127.0.0.1:{front.port}")
    topic = f"refused-{case}-{batching}"
    try:
        consumer = await run(client.subscribe, topic, "s",
                             initial_position=pulsar.InitialPosition.Earliest)
        producer = await run(client.create_producer, topic, batching_enabled=batching,
                             send_timeout_millis=60_000)
        with pytest.raises(pulsar.PulsarException):
            await asyncio.wait_for(run(producer.send, b"bad", **fields), 20)
        await asyncio.wait_for(run(producer.send, b"good"), 20)
        got = [m.data() for m in await receive_all(consumer)]
        assert got == [b"good"]
        await run(producer.close)
    finally:
        await run(client.close)


def test_only_cures_a_resend_cannot_keep_their_code() -> None:
    cpp = "Pulsar-CPP-v4.2.0"
    assert send_failure(pb.NotAllowedError, cpp) == pb.ChecksumError
    assert send_failure(pb.AuthorizationError, cpp) == pb.ChecksumError
    assert send_failure(pb.ServiceNotReady, cpp) == pb.ServiceNotReady  # reconnect and resend
    assert send_failure(pb.NotAllowedError, "Pulsar-Java-v3.3.0") == pb.NotAllowedError


async def test_a_refused_send_among_pipelined_ones_fails_alone(front: PulsarFrontEnd) -> None:
    """Sends queued behind each other are stored together; the bad one among them is refused
    at the edge, so the others are stored and acknowledged."""
    client = client_for(f"pulsar://127.0.0.1:{front.port}")
    try:
        consumer = await run(client.subscribe, "pipelined", "s",
                             initial_position=pulsar.InitialPosition.Earliest)
        producer = await run(client.create_producer, "pipelined", batching_enabled=False,
                             send_timeout_millis=60_000)
        results: dict[bytes, Any] = {}
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        bodies = [f"good-{i}".encode() for i in range(20)]
        bodies.insert(10, b"bad")

        def sent(body: bytes) -> Any:
            def callback(result: Any, _id: Any) -> None:
                results[body] = result
                if len(results) == len(bodies):
                    loop.call_soon_threadsafe(done.set)
            return callback

        for body in bodies:
            props = {f"p{i}": "v" for i in range(1100)} if body == b"bad" else {}
            producer.send_async(body, sent(body), properties=props)
        await asyncio.wait_for(done.wait(), 20)
        assert results.pop(b"bad") != pulsar.Result.Ok
        assert set(results.values()) == {pulsar.Result.Ok}
        got = sorted(m.data() for m in await receive_all(consumer))
        assert got == sorted(b for b in bodies if b != b"bad")
        await run(producer.close)
    finally:
        await run(client.close)
