"""The RabbitMQ back end's connection (`backend_reconnect.BackoffConnection`) in front of the real
broker through a TCP proxy that the test cuts and restores: after a lost connection it tries
again at once, then waits per the back-off schedule (doubling to its cap), and a connection made
resets the schedule. Before, it tried every second for ever. The schedule here is a short one
(and the random part 0) so that the test runs quickly: what is asserted is the sequence of
attempts and waits, never how long anything took."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amqp_node import URL
from tcp_proxy import TcpProxy

from adapters.amqp.backend_reconnect import BackoffConnection, quiet_library_logs
from adapters.amqp.link_rules import Backoff

SHORT = Backoff(first_s=0.02, cap_s=0.08)


class Recorder:
    """A `Watcher` that keeps what it heard."""

    def __init__(self) -> None:
        self.events: list[tuple[object, ...]] = []

    def lost(self, exc: BaseException | None) -> None:
        self.events.append(("lost",))

    def failed(self, exc: BaseException | None, failures: int, delay_s: float) -> None:
        self.events.append(("failed", failures, delay_s))

    def connected(self, failures: int) -> None:
        self.events.append(("connected", failures))


async def until(condition: Callable[[], bool], timeout_s: float = 30) -> None:
    """Poll what the connection heard until `condition` holds (or fail after `timeout_s`)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def test_back_off_doubles_to_its_cap_and_resets_once_connected(
        caplog: pytest.LogCaptureFixture) -> None:
    quiet_library_logs()
    caplog.set_level(logging.INFO)
    proxy = TcpProxy(urlsplit(URL).port or 5672)
    proxy.start()
    recorder = Recorder()
    connection = BackoffConnection(proxy.url(), backoff=SHORT, watcher=recorder,
                                   draw=lambda: 0.0)
    try:
        await connection.connect(timeout=10)
        assert recorder.events == [("connected", 0)]

        def failures() -> list[tuple[object, ...]]:
            return [e for e in recorder.events if e[0] == "failed"]

        proxy.cut()
        await until(lambda: len(failures()) >= 5)
        proxy.start()
        await until(lambda: recorder.events[-1][0] == "connected")
        run = recorder.events[1:]
        assert run[0] == ("lost",)
        waits = [e for e in run if e[0] == "failed"]
        assert waits[:5] == [("failed", 1, 0.02), ("failed", 2, 0.04), ("failed", 3, 0.08),
                             ("failed", 4, 0.08), ("failed", 5, 0.08)]
        assert run[-1] == ("connected", len(waits))
        assert connection.connected.is_set()

        # A connection made resets the schedule: the next outage starts again at first_s.
        seen = len(recorder.events)
        proxy.cut()
        await until(lambda: len(failures()) >= len(waits) + 2)
        again = [e for e in recorder.events[seen:] if e[0] == "failed"]
        assert recorder.events[seen] == ("lost",)
        assert again[:2] == [("failed", 1, 0.02), ("failed", 2, 0.04)]
        proxy.start()
        await until(lambda: recorder.events[-1][0] == "connected")

        # and it works: channels open on the connection made again
        channel = await connection.channel()
        queue = await channel.declare_queue("", exclusive=True)
        assert queue.name
        await channel.close()
    finally:
        await connection.close()
        proxy.cut()
    # The libraries' own lines for each attempt are gone (the back end writes one instead).
    noisy = [r.getMessage() for r in caplog.records
             if r.name in ("aiormq.connection", "aio_pika.robust_connection")
             and ("creating transport" in r.getMessage() or "Reconnecting" in r.getMessage()
                  or r.exc_info)]
    assert noisy == []
