"""The engine runs at most `--max-groups` (topic, group) subscriptions: made-up group names
cannot grow the gateway's memory without bound (about 8 KB a group). A new group beyond the cap
is refused on every front end with each protocol's resource error, naming the setting; groups
already running go on, and a group that is dropped makes room again."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import aio_pika
import grpc
import pulsar
import pytest

from adapters.amqp.backend import RabbitMQBackend
from gateway.client import GatewayClient
from gateway.engine.clock import SystemClock
from gateway.errors import InvalidArgument
from gateway.server.app import running_gateway
from gateway.server.config import ServeConfig

RABBITMQ_URL = os.environ.get("GATEWAY_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")


async def _in_thread(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    return await asyncio.get_running_loop().run_in_executor(None, lambda: fn(*args, **kwargs))


async def _ignore(message: aio_pika.abc.AbstractIncomingMessage) -> None:
    pass


async def test_a_new_group_beyond_the_cap_is_refused_on_every_front_end(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data", max_groups=3, pulsar_listen="127.0.0.1:0",
                               amqp_listen="127.0.0.1:0") as app:
        target = f"127.0.0.1:{app.grpc_port}"
        async with GatewayClient(target) as client:
            await client.publish("capped", [b"one"])
            for group in ("g1", "g2", "g3"):
                got = await client.receive("capped", group, policy="rocketmq", wait_ms=2000)
                assert [m.body for m in got] == [b"one"]
            assert len(app.engine.subscriptions) == 3
            # gRPC: Receive and Consume of a fourth group.
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await client.receive("capped", "g4", policy="rocketmq", wait_ms=0)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "max_groups" in (refused.value.details() or "")
            assert "3" in (refused.value.details() or "")
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                async with client.consume("capped", "g5", policy="rocketmq") as stream:
                    await stream.next(1.0)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            # Pulsar: the subscribe fails (not retried for ever).
            url = f"pulsar://127.0.0.1:{app.front_ends['pulsar'].port}"
            pc = pulsar.Client(url, operation_timeout_seconds=10)
            try:
                with pytest.raises(pulsar.PulsarException):
                    await _in_thread(pc.subscribe, "capped", "p-new")
            finally:
                await _in_thread(pc.close)
            # AMQP: consuming from a new queue closes that channel with 506; the connection and
            # its other channels go on.
            amqp = await aio_pika.connect(
                f"amqp://guest:guest@127.0.0.1:{app.front_ends['amqp'].port}/")
            async with amqp:
                channel = await amqp.channel()
                with pytest.raises(aio_pika.exceptions.ChannelClosed) as closed:
                    queue = await channel.declare_queue("amqp-new")
                    await queue.consume(_ignore)
                assert closed.value.args[0] == 506
                other = await amqp.channel()
                assert not other.is_closed
            # The running groups are not affected.
            await client.publish("capped", [b"two"])
            for group in ("g1", "g2", "g3"):
                got = await client.receive("capped", group, policy="rocketmq", wait_ms=2000)
                assert [m.body for m in got] == [b"two"]
            assert len(app.engine.subscriptions) == 3
            # A dropped group makes room.
            assert await app.engine.drop_group("capped", "g3")
            got = await client.receive("capped", "g4", policy="rocketmq", wait_ms=2000)
            assert sorted(m.body for m in got) == [b"one", b"two"]


def test_the_cap_is_range_checked() -> None:
    from gateway.engine.config import EngineConfig

    with pytest.raises(InvalidArgument, match="max_groups"):
        EngineConfig(max_groups=0)
    with pytest.raises(InvalidArgument, match="max_groups"):
        ServeConfig(max_groups=10_000_001)
    assert ServeConfig(max_groups=7).max_groups == 7


@pytest.mark.parametrize("backend", ["embedded", "rabbitmq"])
async def test_deleted_amqp_queues_give_their_groups_back(tmp_path: Path, backend: str) -> None:
    """An AMQP queue that goes (queue.delete, an auto-delete queue's last consumer leaving, an
    exclusive queue's connection closing) drops its engine group: every RPC client's reply
    queue would otherwise leave a dead group behind until `--max-groups` refused everyone.
    (Each deleted queue's group stayed: the fourth queue below was refused 506.)"""
    settings: dict[str, object] = {}
    if backend == "rabbitmq":
        settings["backend"] = RabbitMQBackend(RABBITMQ_URL, clock=SystemClock())
    prefix = uuid.uuid4().hex[:8]
    async with running_gateway(tmp_path / "data", max_groups=3, amqp_listen="127.0.0.1:0",
                               **settings) as app:
        url = f"amqp://guest:guest@127.0.0.1:{app.front_ends['amqp'].port}/"
        for i in range(4):
            async with await aio_pika.connect(url) as amqp:
                channel = await amqp.channel()
                exclusive = await channel.declare_queue("", exclusive=True)
                await exclusive.consume(_ignore)
                auto = await channel.declare_queue(f"{prefix}-auto-{i}", auto_delete=True)
                tag = await auto.consume(_ignore)
                await auto.cancel(tag)
                named = await channel.declare_queue(f"{prefix}-named-{i}")
                await channel.default_exchange.publish(aio_pika.Message(b"x"), named.name)
                assert await named.get(timeout=5) is not None  # a basic.get leaves it unacked
                await named.delete(if_unused=False, if_empty=False)
        # The closing connections' exclusive queues go as the server sees them close.
        for _ in range(100):
            if not app.engine.subscriptions:
                break
            await asyncio.sleep(0.05)
        assert list(app.engine.subscriptions) == []
        async with await aio_pika.connect(url) as amqp:
            channel = await amqp.channel()
            for i in range(3):
                queue = await channel.declare_queue(f"{prefix}-after-{i}", auto_delete=True)
                await queue.consume(_ignore)
            assert len(app.engine.subscriptions) == 3
