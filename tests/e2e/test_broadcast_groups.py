"""A broadcast consumer's own group (`group#consumer`) does not outlive it for good: it holds its
topic's messages back only while the consumer can still come back for them."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.client import GatewayClient
from gateway.engine.clock import ManualClock
from gateway.server.app import GatewayApp, running_gateway
from gateway.store import EmbeddedStore

T0 = 1_700_000_000_000
IDLE_S = 60


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[GatewayApp]:
    clock = ManualClock(T0)
    async with running_gateway(tmp_path / "data", clock=clock,
                               broadcast_idle_s=IDLE_S) as running:
        running.test_clock = clock  # type: ignore[attr-defined]
        yield running


@pytest.fixture
async def client(app: GatewayApp) -> AsyncIterator[GatewayClient]:
    async with GatewayClient(f"127.0.0.1:{app.grpc_port}") as c:
        yield c


def store(app: GatewayApp) -> EmbeddedStore:
    assert isinstance(app.backend, EmbeddedStore)
    return app.backend


async def until(check: object, timeout_s: float = 10.0) -> None:
    """Poll `check()` (sync or async) until it is true; the server settles closes on its own."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()  # type: ignore[operator]
        if asyncio.iscoroutine(got):
            got = await got
        if got:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"not true within {timeout_s} s: {check}")


async def everything_acked_by(client: GatewayClient, topic: str, group: str, n: int) -> None:
    async with client.consume(topic, group, policy="rocketmq", prefetch=n) as stream:
        for _ in range(n):
            msg = await stream.next(5)
            assert msg is not None
            assert (await msg.ack()).ok


def consumers(app: GatewayApp, topic: str, group: str) -> int:
    """Push consumers open on a subscription (0 when the engine runs none)."""
    state = app.engine.group_state(topic, group)
    return 0 if state is None else state.consumers


async def read_one(client: GatewayClient, topic: str, group: str, **kw: object) -> bytes:
    async with client.consume(topic, group, policy="rocketmq", broadcast=True, prefetch=1,
                              **kw) as stream:
        msg = await stream.next(5)
        assert msg is not None
        assert (await msg.ack()).ok
        return msg.body


async def test_an_anonymous_broadcast_consumer_takes_its_group_along(
    app: GatewayApp, client: GatewayClient
) -> None:
    await client.publish("news", [b"1", b"2", b"3"])
    await everything_acked_by(client, "news", "archive", 3)
    assert await read_one(client, "news", "screens") == b"1"
    # No consumer id: nobody can resume that group, so it goes with the consumer and the
    # messages the other group acked are deleted (all but the newest row).
    await until(lambda: not any(g.group.startswith("screens#") for g in app.engine.groups()))
    assert await store(app).trim() == 2


async def test_a_named_broadcast_consumer_resumes_until_its_group_expires(
    app: GatewayApp, client: GatewayClient
) -> None:
    clock: ManualClock = app.test_clock  # type: ignore[attr-defined]
    await client.publish("news", [b"1", b"2", b"3", b"4"])
    await everything_acked_by(client, "news", "archive", 4)
    assert await read_one(client, "news", "screens", consumer_id="lobby") == b"1"
    assert app.engine.group_state("news", "screens#lobby") is not None
    await until(lambda: consumers(app, "news", "screens#lobby") == 0)
    # Only what "lobby" acked too goes: the rest is kept for the consumer's return.
    assert await store(app).trim() == 1

    clock.advance((IDLE_S - 1) * 1000)
    await app.engine.run_due_timers()
    assert await read_one(client, "news", "screens", consumer_id="lobby") == b"2"  # resumed
    await until(lambda: consumers(app, "news", "screens#lobby") == 0)
    # The idle period starts again from the last time the consumer left.
    clock.advance((IDLE_S - 1) * 1000)
    await app.engine.run_due_timers()
    await asyncio.sleep(0.1)
    assert app.engine.group_state("news", "screens#lobby") is not None
    assert await store(app).trim() == 1  # "2", acked by both groups

    clock.advance(1000)
    await app.engine.run_due_timers()
    await until(lambda: app.engine.group_state("news", "screens#lobby") is None)
    assert await store(app).trim() == 1  # "3": "4", the newest, always stays
    # The same id later is a new consumer: it starts at the earliest message kept.
    assert await read_one(client, "news", "screens", consumer_id="lobby") == b"4"


@pytest.mark.parametrize("value", ["-1", "2592001"])
def test_broadcast_idle_flag_is_checked(tmp_path: Path, value: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(tmp_path),
         "--broadcast-idle-s", value],
        capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 2
    assert f"broadcast_idle_s={value}" in run.stderr and "0..2592000 s" in run.stderr
