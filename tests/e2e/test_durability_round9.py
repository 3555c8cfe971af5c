"""Durability of what AMQP clients publish without confirms and then close the connection:
the close-ok promises that everything published before the close is stored. When the store
cannot take those messages (its writer process stopped answering, so the commit times out),
the client must not get a close-ok: the gateway closes the connection with an error instead."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from pathlib import Path

import aiormq
import pytest

from gateway.client import GatewayClient
from tests.e2e.test_store_outage import gateway, writer_pid

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def stored_bodies(target: str, queue: str) -> list[bytes]:
    """Every message the queue's group holds (acked as read), once nothing more comes."""
    got: list[bytes] = []
    async with (
        GatewayClient(target) as client,
        client.consume(queue, queue, policy="rocketmq", prefetch=512) as stream,
    ):
        while (msg := await stream.next(3)) is not None:
            got.append(msg.body)
            msg.ack_quietly()
    return got


async def until_logged(log: Path, text: bytes, timeout_s: float = 60.0) -> None:
    for _ in range(int(timeout_s * 10)):
        if text in log.read_bytes():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{text!r} never logged: {log.read_text(errors='replace')[-3000:]}")


async def test_a_close_after_unstored_publishes_is_not_answered_close_ok(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="aiormq.connection")
    port = free_port()
    log = tmp_path / "gateway.log"
    with gateway(tmp_path / "data", log, "--amqp-listen", f"127.0.0.1:{port}",
                 "--commit-timeout-s", "1") as (proc, target):
        conn = await aiormq.connect(f"amqp://guest:guest@127.0.0.1:{port}/")
        channel = await conn.channel(publisher_confirms=False)
        await channel.queue_declare("unstored", durable=True)
        await channel.basic_publish(b"before", routing_key="unstored")
        await channel.basic_qos(prefetch_count=1)  # a round trip: "before" was routed
        await until_stored(target, b"before")
        writer = writer_pid(proc.pid)
        os.kill(writer, signal.SIGSTOP)  # its next commit never comes: the store fails it
        try:
            for i in range(20):
                await channel.basic_publish(f"lost-{i}".encode(), routing_key="unstored")
            # Answered within aiormq's wait for the close-ok (2 s): the commit times out
            # after 1 s (while the close waits), and the gateway says so.
            await conn.close()
            await until_logged(log, b"stopped or hung")
        finally:
            with contextlib.suppress(ProcessLookupError):  # the store killed it by now
                os.kill(writer, signal.SIGCONT)
        await until_logged(log, b"embedded store recovered")
        bodies = await stored_bodies(target, "unstored")
        lost = [b for b in bodies if b.startswith(b"lost-")]
        # Either the messages are stored or the client was told, never a silent close-ok.
        # (aiormq's close() returns all the same; what the server said, it logs.)
        told = [r.getMessage() for r in caplog.records if r.name == "aiormq.connection"]
        if len(lost) < 20:
            assert any("541" in t and "not stored" in t for t in told), (told, len(lost))


async def until_stored(target: str, body: bytes, timeout_s: float = 30.0) -> None:
    """Wait until a gateway consumer of another group sees `body` (so it is committed)."""
    async with (
        GatewayClient(target) as client,
        client.consume("unstored", "probe", policy="rocketmq") as stream,
    ):
        deadline = asyncio.get_running_loop().time() + timeout_s
        while asyncio.get_running_loop().time() < deadline:
            msg = await stream.next(1)
            if msg is not None and msg.body == body:
                assert (await msg.ack()).ok  # committed: no write of it waits on the writer
                return
    raise AssertionError(f"{body!r} never stored")
