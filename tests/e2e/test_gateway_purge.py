"""Purge through the public admin surfaces: the `gateway purge` command and the admin Purge
call, against a running gateway."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.client import GatewayClient
from gateway.server.app import running_gateway
from gateway.v1 import admin_pb2


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def test_purge_leaves_messages_in_flight(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """`gateway purge` (the admin Purge call) drops what waits for the group and leaves what
    its consumers hold, as RabbitMQ's queue.purge leaves unacknowledged messages: the count is
    what was dropped, an ack of a held message settles it, a failure retries it under the
    policy. (Purge dropped the held ones too and counted them; the failed one never came back.)
    Time runs 10x faster: RocketMQ's 1 min consume timeout is 6 s, its first retry 1 s."""
    async with (
        running_gateway(tmp_path / "data", time_scale=0.1) as running,
        GatewayClient(f"127.0.0.1:{running.grpc_port}") as c,
    ):
        topic, group = name("t"), name("g")
        await c.publish(topic, [b"a", b"b", b"c", b"d", b"e"])
        acked, failed = await c.receive(topic, group, policy="rocketmq", max_messages=2)
        capsys.readouterr()
        code = await asyncio.to_thread(main, ["purge", topic, group, "--yes", "--json",
                                              "--target", f"127.0.0.1:{running.grpc_port}"])
        assert (code, json.loads(capsys.readouterr().out)) == (0, {"purged": 3})
        view = await c.describe(topic, group)
        assert (view.ready, view.inflight, view.waiting_retry) == (0, 2, 0)
        assert (await acked.ack()).ok
        assert (await failed.fail()).ok
        (again,) = await c.receive(topic, group, policy="rocketmq", wait_ms=5000)
        assert (again.body, again.retries) == (failed.body, 1)
        purged = await c.admin.Purge(admin_pb2.PurgeRequest(topic=topic, group=group))
        assert purged.purged == 0
        assert (await again.ack()).ok
        view = await c.describe(topic, group)
        assert (view.ready, view.inflight, view.waiting_retry) == (0, 0, 0)
