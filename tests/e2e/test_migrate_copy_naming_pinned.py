"""A gateway source of `gateway migrate copy` without `naming=` reads and removes under the
scheme the group had when the copy started, to its end. The scheme is otherwise found again on
every call, from the destinations that exist: another topic's group of the same name getting a
dead letter under another scheme (RocketMQ's `%DLQ%G` is one per group) switched it between an
ExportMessages and its RemoveExported, and the positions exported from `T.retry` were removed
from `%RETRY%G`: another topic's waiting retries, gone, while the copied ones stayed."""

from __future__ import annotations

import time
from pathlib import Path

from gateway.admin_client import AdminClient, Target, connect
from gateway.migrate.endpoint import parse_url
from gateway.migrate.gateway_side import GatewaySource
from gateway.server.app import running_gateway
from gateway.v1 import admin_pb2 as pb
from tests.e2e.migrate_procs import read_part


async def _import(target: str, topic: str, naming: str, ledger: str,
                  copies: list[pb.MovedMessage]) -> None:
    channel = connect(Target(target))
    try:
        await AdminClient(channel, timeout_s=30).import_messages(pb.ImportMessagesRequest(
            topic=topic, group="g", ledger=ledger, naming=naming, messages=copies))
    finally:
        await channel.close()


async def test_the_scheme_of_the_start_holds_to_the_end(tmp_path: Path) -> None:
    later = int(time.time() * 1000) + 3_600_000
    async with running_gateway(tmp_path / "data") as app:
        target = f"127.0.0.1:{app.grpc_port}"
        await _import(target, "orders", "rabbitmq", "a", [
            pb.MovedMessage(source_key=f"a{i}", part=pb.MESSAGE_PART_RETRY,
                            body=f"orders {i}".encode(), deliver_at_ms=later)
            for i in range(3)])
        await _import(target, "refunds", "rocketmq", "b", [
            pb.MovedMessage(source_key=f"b{i}", part=pb.MESSAGE_PART_RETRY,
                            body=f"refunds {i}".encode(), deliver_at_ms=later)
            for i in range(3)])
        source = GatewaySource(parse_url("from", f"gateway://{target}/orders?group=g&parts=retry"))
        await source.open()
        try:
            items = await source.take(10)
            assert sorted(i.message.body for i in items) == [b"orders 0", b"orders 1",
                                                             b"orders 2"]
            # Meanwhile topic refunds' group g gets a dead letter under RocketMQ's names.
            await _import(target, "refunds", "rocketmq", "c", [
                pb.MovedMessage(source_key="c", part=pb.MESSAGE_PART_DEAD_LETTER, body=b"dead")])
            await source.ack(items)
            assert await source.take(10) == []
        finally:
            await source.close()
        assert await read_part(target, "orders", "g", "retry", "rabbitmq") == []
        kept = await read_part(target, "refunds", "g", "retry", "rocketmq")
        assert sorted(m.body for m in kept) == [b"refunds 0", b"refunds 1", b"refunds 2"]
