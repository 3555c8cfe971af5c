"""`gateway migrate copy` between two gateways keys each source message by where it is stored,
not by its message id alone: distinct messages may share an id (a RabbitMQ queue's copies keep
the ids their producers chose, two orders' events may carry one order number), and each of them
arrives once, none is taken for another and removed at the source uncopied."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from migrate_procs import Proc, migrate, migrate_killed, read_part, two_gateways

from gateway.admin_client import AdminClient, Target, connect
from gateway.v1 import admin_pb2 as pb


async def _seed(target: str, topic: str, group: str, copies: list[pb.MovedMessage]) -> None:
    channel = connect(Target(target))
    try:
        client = AdminClient(channel, timeout_s=60)
        answer = await client.import_messages(pb.ImportMessagesRequest(
            topic=topic, group=group, ledger="seed", messages=copies))
        assert answer.stored == len(copies)
    finally:
        await channel.close()


def _ready(count: int, ids: int) -> list[pb.MovedMessage]:
    """`count` ready messages "ready {i}" whose message ids repeat: order-0 .. order-{ids - 1}."""
    return [pb.MovedMessage(source_key=f"r{i}", part=pb.MESSAGE_PART_READY,
                            body=f"ready {i}".encode(), message_id=f"order-{i % ids}")
            for i in range(count)]


def _copy_args(source: Proc, destination: Proc, batch: int) -> list[str]:
    """`migrate copy` of orders/billing from one gateway to the other."""
    url_a = f"gateway://{source.target}/orders?group=billing&new-group=true"
    url_b = f"gateway://{destination.target}/orders?group=billing"
    return ["copy", "--from", url_a, "--to", url_b, "--batch", str(batch)]


async def test_messages_that_share_an_id_are_each_copied_once(tmp_path: Path) -> None:
    ready = _ready(300, ids=3)
    dead = [pb.MovedMessage(source_key=f"d{i}", part=pb.MESSAGE_PART_DEAD_LETTER,
                            body=f"dead {i}".encode(), message_id="order-0")
            for i in range(40)]
    with two_gateways(tmp_path) as (source, destination):
        await _seed(source.target, "orders", "billing", ready + dead)
        args = _copy_args(source, destination, batch=7)
        done = migrate(*args)
        assert done.returncode == 0, done.stderr

        got = {part: sorted(m.body for m in await read_part(destination.target, "orders",
                                                            "billing", part))
               for part in ("ready", "dead-letter")}
        assert got["ready"] == sorted(m.body for m in ready)
        assert got["dead-letter"] == sorted(m.body for m in dead)
        for part in ("ready", "retry", "dead-letter"):
            assert await read_part(source.target, "orders", "billing", part) == []


async def test_a_run_killed_halfway_still_copies_shared_ids_once(tmp_path: Path) -> None:
    ready = _ready(3000, ids=5)
    with two_gateways(tmp_path) as (source, destination):
        await _seed(source.target, "orders", "billing", ready)
        args = _copy_args(source, destination, batch=10)

        def halfway() -> bool:
            import grpc

            from gateway.v1 import admin_pb2_grpc
            with grpc.insecure_channel(destination.target) as channel:
                view = admin_pb2_grpc.AdminStub(channel).DescribeGroup(
                    pb.DescribeGroupRequest(topic="orders", group="billing"), timeout=10)
            return view.ready >= 1000

        migrate_killed(args, halfway)
        done = migrate(*args)
        assert done.returncode == 0, done.stderr
        got = sorted(m.body for m in await read_part(destination.target, "orders", "billing",
                                                     "ready"))
        assert got == sorted(m.body for m in ready)
        assert await read_part(source.target, "orders", "billing", "ready") == []
