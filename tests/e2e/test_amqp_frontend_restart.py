"""kill -9 a `gateway serve` with the AMQP front end: durable exchanges, queues (with their
arguments), bindings and pending retries are all there afterwards; non-durable ones are gone.
The journal keeping them stays bounded while durable entities churn."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import aio_pika
import aiormq
import pytest

from adapters.amqp.frontend import journal
from tests.amqp_front import amqp_gateway, free_port, unique

SCALE = 0.01
INTERVAL_S = 300
"""3 s at time scale 0.01: long enough to be pending across the restart."""


def start(data_dir: Path, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(data_dir),
         "--listen", "127.0.0.1:0", "--amqp-listen", f"127.0.0.1:{port}",
         "--time-scale", str(SCALE), "--log-level", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def connect(port: int, timeout: float = 30.0) -> aio_pika.abc.AbstractConnection:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{port}/")
        except (ConnectionError, aiormq.exceptions.AMQPConnectionError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def test_durable_topology_and_pending_retries_survive_kill_9(tmp_path: Path) -> None:
    data, port = tmp_path / "data", free_port()
    work, dead, temp = unique("work"), unique("dead"), unique("temp")
    exchange, dlx = unique("events"), unique("dlx")
    arguments = {"x-retry-interval": INTERVAL_S, "x-dead-letter-exchange": dlx}
    proc = start(data, port)
    try:
        connection = await connect(port)
        ch = await connection.channel()
        events = await ch.declare_exchange(exchange, aio_pika.ExchangeType.TOPIC, durable=True)
        dead_x = await ch.declare_exchange(dlx, aio_pika.ExchangeType.FANOUT, durable=True)
        work_q = await ch.declare_queue(work, durable=True, arguments=arguments)
        dead_q = await ch.declare_queue(dead, durable=True)
        await ch.declare_queue(temp, durable=False)
        await work_q.bind(events, routing_key="orders.#")
        await dead_q.bind(dead_x)
        await events.publish(aio_pika.Message(b"retry-me"), routing_key="orders.new")
        first = await work_q.get(timeout=5)
        await first.nack(requeue=True)  # pending: due 3 s from now
        nacked_at = time.monotonic()
        await asyncio.sleep(0.2)  # the failure is stored
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()

    proc = start(data, port)
    try:
        connection = await connect(port)
        ch = await connection.channel()
        # Durable entities are back, with their kinds and arguments (redeclaring the same is
        # fine; a different argument is refused as inequivalent).
        await ch.declare_exchange(exchange, aio_pika.ExchangeType.TOPIC, durable=True)
        work_q = await ch.declare_queue(work, durable=True, arguments=arguments)
        with pytest.raises(aio_pika.exceptions.ChannelPreconditionFailed):
            await (await connection.channel()).declare_queue(
                work, durable=True, arguments={"x-retry-interval": 10})
        ch = await connection.channel()
        with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity):
            await ch.declare_queue(temp, passive=True)  # non-durable: gone
        ch = await connection.channel()
        work_q = await ch.declare_queue(work, passive=True)
        # The pending retry comes at its time, not before, counted.
        got: list[tuple[float, aio_pika.abc.AbstractIncomingMessage]] = []
        arrived = asyncio.Event()

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            got.append((time.monotonic(), message))
            arrived.set()

        await work_q.consume(on_message)
        await asyncio.wait_for(arrived.wait(), 30)
        at, retry = got[0]
        assert retry.body == b"retry-me" and retry.redelivered
        assert retry.headers["x-delivery-count"] == 1
        assert at - nacked_at >= INTERVAL_S * SCALE - 0.05
        # The binding is back: a new message through the exchange reaches the queue; the
        # dead-letter exchange and its binding too.
        events = await ch.get_exchange(exchange)
        await events.publish(aio_pika.Message(b"after"), routing_key="orders.paid")
        for _ in range(100):
            if len(got) == 2:
                break
            await asyncio.sleep(0.05)
        assert [m.body for _, m in got] == [b"retry-me", b"after"]
        await got[0][1].reject(requeue=False)
        await got[1][1].ack()
        dead_q = await ch.declare_queue(dead, passive=True)
        for _ in range(100):
            letter = await dead_q.get(fail=False)
            if letter is not None:
                break
            await asyncio.sleep(0.05)
        assert letter is not None and letter.body == b"retry-me"
        await connection.close()
    finally:
        proc.terminate()
        proc.wait(30)


async def test_the_topology_journal_is_compacted_as_durable_entities_churn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Durable queues declared and deleted in a loop: the journal is rewritten as a snapshot
    whenever what was appended outnumbers it (kept small here), and a restart finds exactly
    what is declared."""
    monkeypatch.setattr(journal, "COMPACT_MIN", 50)
    async with amqp_gateway(tmp_path / "data") as gw:
        path = tmp_path / "data" / "amqp" / journal.FILE
        connection = await aio_pika.connect(gw.url)
        try:
            ch = await connection.channel()
            keep = await ch.declare_queue(unique("keep"), durable=True,
                                          arguments={"x-retry-interval": 20})
            exchange = await ch.declare_exchange(unique("x"), aio_pika.ExchangeType.TOPIC,
                                                 durable=True)
            await keep.bind(exchange, "a.#")
            sizes = []
            for i in range(200):
                churn = await ch.declare_queue(f"churn-{i % 3}", durable=True)
                await churn.bind(exchange, "b")
                await churn.delete(if_unused=False, if_empty=False)
                sizes.append(path.stat().st_size)
            assert max(sizes[100:]) < 3 * max(sizes[:20]) + 4096, sizes[::20]
        finally:
            await connection.close()
        await gw.restart()
        connection = await aio_pika.connect(gw.url)
        try:
            ch = await connection.channel()
            await ch.declare_queue(keep.name, durable=True, arguments={"x-retry-interval": 20})
            x = await ch.declare_exchange(exchange.name, aio_pika.ExchangeType.TOPIC,
                                          durable=True, passive=True)
            await x.publish(aio_pika.Message(b"routed"), routing_key="a.b")
            queue = await ch.declare_queue(keep.name, passive=True)
            assert (await queue.get(timeout=5)).body == b"routed"
            for i in range(3):
                with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity):
                    await (await connection.channel()).declare_queue(f"churn-{i}", passive=True)
        finally:
            await connection.close()
