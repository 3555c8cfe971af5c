"""A gateway on a broker back end (RabbitMQ here) cannot be the source of `gateway migrate copy`:
its listing positions number one listing only, so what it exported cannot be removed by
position. RemoveExported refuses with FAILED_PRECONDITION (ExportMessages stays a listing), and
DescribeGroup says so (`cannot_remove_exported`): the command refuses before it copies anything,
exit 8, saying to copy from the broker directly. It used to copy every message, remove none, and
exit 0 ("the source keeps nothing") with the whole backlog still there; then it stopped after
its first batch (exit 2), which it left at both ends."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import grpc
import pytest

from adapters.amqp.backend import RabbitMQBackend
from adapters.amqp.queues import queue_name
from gateway.client import GatewayClient
from gateway.server.app import running_gateway
from gateway.v1 import admin_pb2 as pb
from gateway.v1 import admin_pb2_grpc
from tests.amqp_node import URL, delete_queues, plain_connection, unique


async def test_a_rabbitmq_backed_gateway_refuses_to_remove_exported(tmp_path: Path) -> None:
    topic, group = unique("gw.export"), "g"
    async with (
        running_gateway(tmp_path / "a", backend=RabbitMQBackend(URL)) as source,
        running_gateway(tmp_path / "b") as destination,
    ):
        target = f"127.0.0.1:{source.grpc_port}"
        try:
            async with GatewayClient(target) as client:
                await client.publish(topic, [f"m{i}".encode() for i in range(20)])
            async with grpc.aio.insecure_channel(target) as channel:
                stub = admin_pb2_grpc.AdminStub(channel)
                page = await stub.ExportMessages(pb.ExportMessagesRequest(
                    topic=topic, group=group, part=pb.MESSAGE_PART_READY), timeout=30)
                assert len(page.messages) == 20  # a listing
                view = await stub.DescribeGroup(pb.DescribeGroupRequest(
                    topic=topic, group=group), timeout=30)
                assert view.cannot_remove_exported
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await stub.RemoveExported(pb.RemoveExportedRequest(
                        topic=topic, group=group, part=pb.MESSAGE_PART_READY,
                        positions=[0]), timeout=30)
                assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                assert "copy from the broker directly" in (caught.value.details() or "")

            # The gateways run in this process: the command runs beside them, not blocking.
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gateway.cli", "migrate", "copy",
                "--from", f"gateway://{target}/{topic}?group={group}",
                "--to", f"gateway://127.0.0.1:{destination.grpc_port}/{topic}?group={group}",
                "--batch", "5", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(proc.communicate(), 120)
            assert proc.returncode == 8, (out, err)
            assert b"copy from the broker directly" in err
            assert b"nothing was copied" in err
            dry = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gateway.cli", "migrate", "copy", "--dry-run",
                "--from", f"gateway://{target}/{topic}?group={group}",
                "--to", f"gateway://127.0.0.1:{destination.grpc_port}/{topic}?group={group}",
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            _, err = await asyncio.wait_for(dry.communicate(), 120)
            assert dry.returncode == 8, err  # the dry run says what the run would say
            async with grpc.aio.insecure_channel(target) as channel:
                view = await admin_pb2_grpc.AdminStub(channel).DescribeGroup(
                    pb.DescribeGroupRequest(topic=topic, group=group), timeout=30)
            assert view.ready == 20  # nothing was taken
            async with grpc.aio.insecure_channel(
                    f"127.0.0.1:{destination.grpc_port}") as channel:
                view = await admin_pb2_grpc.AdminStub(channel).DescribeGroup(
                    pb.DescribeGroupRequest(topic=topic, group=group), timeout=30)
            assert view.ready == 0  # nothing was copied
        finally:
            async with plain_connection() as connection:
                await delete_queues(connection, queue_name(topic))
