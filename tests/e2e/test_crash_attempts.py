"""kill -9 the gateway while deliveries are in flight: they come again counted as delivered once
more. Before, a delivery was not written down, so a message in flight at the crash came back with
the attempt count it had before that delivery: attempt 1 again, and an AMQP consumer got it
without `redelivered` where RabbitMQ marks it redelivered. The embedded store now writes the
count of each lease with the lease's position (not awaited: a lease taken within the last
commit, a few milliseconds, may still be lost, as before)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import aio_pika

from gateway.client import GatewayClient
from tests.amqp_front import free_port, unique
from tests.e2e.test_amqp_frontend_restart import connect
from tests.e2e.test_gateway_crash import start_gateway

OPTIONS = {"x_retry_interval_s": "10"}
"""The shortest interval: 2 s at the crash test's time scale (0.2)."""
SETTLE_S = 0.5
"""Time for the writer to commit what the fetch sent it (it commits within milliseconds)."""


def _kill(proc: subprocess.Popen[str] | subprocess.Popen[bytes]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)


async def test_deliveries_in_flight_at_a_crash_count_as_delivered(tmp_path: Path) -> None:
    data = tmp_path / "data"
    proc, target = start_gateway(data)
    try:
        async with GatewayClient(target) as client:
            first, second = await client.publish("attempts", [b"1", b"2"])
            # "rabbitmq" keeps a failed message in the topic (10 s of policy time: 2 s here).
            async with client.consume("attempts", "g", policy="rabbitmq", prefetch=1,
                                      options=OPTIONS) as stream:
                msg = await stream.next(10)
                assert msg is not None and (msg.message_id, msg.attempt) == (first, 1)
                assert (await msg.fail()).ok
                msg = await stream.next(10)
                assert msg is not None and (msg.message_id, msg.attempt) == (second, 1)
                assert (await msg.ack()).ok
                msg = await stream.next(10)  # the first again, leased a second time
                assert msg is not None and (msg.message_id, msg.attempt) == (first, 2)
                (third,) = await client.publish("attempts", [b"3"])  # no room: not delivered
                await asyncio.sleep(SETTLE_S)
                _kill(proc)
    finally:
        if proc.poll() is None:
            proc.kill()

    proc, target = start_gateway(data)
    try:
        async with (
            GatewayClient(target) as client,
            client.consume("attempts", "g", policy="rabbitmq", prefetch=10,
                           options=OPTIONS) as stream,
        ):
            seen = {}
            for _ in range(2):
                msg = await stream.next(10)
                assert msg is not None
                seen[msg.message_id] = msg.attempt
                assert (await msg.ack()).ok
            assert seen == {first: 3, third: 1}  # the third was never delivered
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


def _start_amqp(data: Path, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(data),
         "--listen", "127.0.0.1:0", "--amqp-listen", f"127.0.0.1:{port}",
         "--log-level", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def test_an_amqp_delivery_in_flight_at_a_crash_comes_back_redelivered(
    tmp_path: Path,
) -> None:
    data, port, queue = tmp_path / "data", free_port(), unique("work")
    proc = _start_amqp(data, port)
    try:
        connection = await connect(port)
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=1)
        work = await channel.declare_queue(queue, durable=True)
        for body in (b"a", b"b"):
            await channel.default_exchange.publish(
                aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT), queue)
        got = await work.get(timeout=10)  # not acked
        assert got.body == b"a" and not got.redelivered
        await asyncio.sleep(SETTLE_S)
        _kill(proc)
    finally:
        if proc.poll() is None:
            proc.kill()

    proc = _start_amqp(data, port)
    try:
        connection = await connect(port)
        channel = await connection.channel()
        work = await channel.declare_queue(queue, durable=True)
        deadline = time.monotonic() + 10
        seen: list[tuple[bytes, bool]] = []
        while len(seen) < 2 and time.monotonic() < deadline:
            got = await work.get(timeout=10, fail=False)
            if got is None:
                await asyncio.sleep(0.05)
                continue
            seen.append((got.body, got.redelivered))
            await got.ack()
        assert seen == [(b"a", True), (b"b", False)]
        await connection.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
