"""`gateway migrate copy` from a gateway whose group keeps its retries in place (in the topic
itself: no retry topic): each waiting retry arrives with its due time and counts, and leaves the
source entirely.

Two kinds of in-place retry: one the store keeps, released to come again later (RabbitMQ's
requeue), and an ordered retry the engine holds while its key stays blocked (RocketMQ orderly).
The store lists the second as the plain message it keeps, leased: ExportMessages gave it as
ready now, with no due time and no counts, and RemoveExported removed it from the store but left
it held in the engine, still counted as a waiting retry there (its key blocked) and due to come
again, removed. ExportMessages now gives the engine's due time and counts, and RemoveExported
forgets it in the engine too."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from migrate_procs import migrate, read_part, start_gateway, stop

from gateway.client import GatewayClient
from gateway.v1 import admin_pb2, admin_pb2_grpc


def _describe(target: str) -> admin_pb2.DescribeGroupResponse:
    with grpc.insecure_channel(target) as channel:
        view: admin_pb2.DescribeGroupResponse = admin_pb2_grpc.AdminStub(channel).DescribeGroup(
            admin_pb2.DescribeGroupRequest(topic="orders", group="g"), timeout=10)
    return view


@pytest.mark.parametrize("policy, options, wait_s", [
    ("rabbitmq", {"x_retry_interval_s": "60"}, 60),  # released, kept by the store
    ("rocketmq-orderly", {"suspend_ms": "30000"}, 30),  # held by the engine (the most it takes)
])
async def test_in_place_retries_move_with_their_due_times(
        tmp_path: Path, policy: str, options: dict[str, str], wait_s: int) -> None:
    source = start_gateway(tmp_path / "a")
    destination = start_gateway(tmp_path / "b")
    try:
        async with GatewayClient(source.target) as client:
            for i in range(3):
                await client.publish("orders", [f"m{i}".encode()], key="k")
            async with client.consume("orders", "g", policy=policy, options=options,
                                      prefetch=1) as stream:
                msg = await stream.next(10)
                assert msg is not None and msg.body == b"m0"
                failed_at = time.time() * 1000
                assert (await msg.fail()).ok
        view = _describe(source.target)
        assert view.waiting_retry + view.delayed == 1, view

        listed = {m.body: m for m in await read_part(source.target, "orders", "g", "ready")}
        assert set(listed) == {b"m0", b"m1", b"m2"}
        due = listed[b"m0"].deliver_at_ms
        assert failed_at + (wait_s - 5) * 1000 < due < failed_at + (wait_s + 5) * 1000, due
        assert (listed[b"m0"].attempt, listed[b"m0"].retries) == (1, 1)

        done = migrate("copy", "--from", f"gateway://{source.target}/orders?group=g",
                       "--to", f"gateway://{destination.target}/orders?group=g",
                       timeout_s=120)
        assert done.returncode == 0, done.stderr
        assert "copied 3 message(s)" in done.stdout, done.stdout

        # Nothing stays at the source, in the store or in the engine.
        assert await read_part(source.target, "orders", "g", "ready") == []
        view = _describe(source.target)
        assert (view.ready, view.delayed, view.waiting_retry, view.inflight) == (0, 0, 0, 0), view

        # The retry waits at the destination until its due time, with its counts.
        copies = {m.body: m for m in await read_part(destination.target, "orders", "g",
                                                     "ready")}
        assert set(copies) == {b"m0", b"m1", b"m2"}
        assert copies[b"m0"].deliver_at_ms == due
        assert (copies[b"m0"].attempt, copies[b"m0"].retries) == (1, 1)
        assert copies[b"m0"].message_id == listed[b"m0"].message_id

        async with GatewayClient(destination.target) as client, client.consume(
                "orders", "g", policy=policy, options=options, prefetch=10) as stream:
            got = []
            for _ in range(2):
                msg = await stream.next(10)
                assert msg is not None
                got.append(msg.body)
                await msg.ack()
            assert sorted(got) == [b"m1", b"m2"]
            assert await stream.next(1) is None  # m0 waits for its due time

        # The source delivers nothing more (the held retry came again before, removed).
        async with GatewayClient(source.target) as client, client.consume(
                "orders", "g", policy=policy, options=options, prefetch=10) as stream:
            assert await stream.next(1) is None
    finally:
        stop(source)
        stop(destination)
