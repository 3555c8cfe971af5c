"""`--max-groups-per-principal`: with a tokens file, one principal runs at most its share of
`--max-groups` (by default half), so a client that keeps every group it made in use (unsettled
deliveries in each) no longer locks every other client out of new groups. Before, the one pool
was shared: a client holding `max_groups` groups had everyone else refused TOO_MANY_GROUPS."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import aio_pika
import grpc
import pytest
from rocketmq.grpc_protocol import service_pb2_grpc

from adapters.pulsar.wire import wire_pb2 as pb
from gateway.client import GatewayClient
from gateway.client_errors import GatewayRpcError
from gateway.server.app import running_gateway
from tests.e2e.auth_clients import PulsarRaw, rmq_receive_handles, signed

TOKENS = """
[[principal]]
name = "greedy"
token = "greedy-secret"
publish = ["quota"]
consume = ["quota"]
groups = ["*"]
rocketmq_access_key = "greedy-ak"
rocketmq_secret_key = "greedy-sk"

[[principal]]
name = "other"
token = "other-secret"
consume = ["quota"]
groups = ["*"]
"""
ROOT = Path(__file__).resolve().parents[2]


async def test_one_principal_holding_its_groups_leaves_the_others_theirs(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS)
    # max_groups 4 and no share given: half of it (2) for each principal.
    async with running_gateway(tmp_path / "data", tokens_file=str(tokens), max_groups=4) as app:
        target = f"127.0.0.1:{app.grpc_port}"
        async with GatewayClient(target, token="greedy-secret") as greedy, \
                GatewayClient(target, token="other-secret") as other:
            await greedy.publish("quota", [b"m"])
            for group in ("g1", "g2"):  # received and never settled: in use
                got = await greedy.receive("quota", group, policy="rocketmq", wait_ms=2000)
                assert [m.body for m in got] == [b"m"]
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await greedy.receive("quota", "g3", policy="rocketmq", wait_ms=0)
            error = refused.value
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert isinstance(error, GatewayRpcError) and error.reason == "TOO_MANY_GROUPS"
            details = error.details() or ""
            assert "principal 'greedy'" in details and "2 groups" in details
            assert "max_groups_per_principal" in details and "--max-groups-per-principal" in details
            # The other principal's new groups are not refused, through Receive and Consume.
            got = await other.receive("quota", "o1", policy="rocketmq", wait_ms=2000)
            assert [m.body for m in got] == [b"m"]
            async with other.consume("quota", "o2", policy="rocketmq", prefetch=5) as stream:
                message = await stream.next(10)
                assert message is not None and message.body == b"m"
                assert (await message.ack()).ok
            assert len(app.engine.subscriptions) == 4


async def test_every_front_end_counts_a_group_for_the_principal_that_made_it(
        tmp_path: Path) -> None:
    """AMQP (the login), Pulsar (the CONNECT token) and RocketMQ (the access key) pass their
    principal with the subscriptions they make, as gRPC does (the bearer token)."""
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS)
    async with running_gateway(tmp_path / "data", tokens_file=str(tokens),
                               pulsar_listen="127.0.0.1:0", amqp_listen="127.0.0.1:0") as app:
        target = f"127.0.0.1:{app.grpc_port}"
        async with GatewayClient(target, token="other-secret") as other:
            await other.receive("quota", "by-grpc", policy="rocketmq", wait_ms=0)
        amqp = await aio_pika.connect(
            f"amqp://greedy:greedy-secret@127.0.0.1:{app.front_ends['amqp'].port}/")
        async with amqp:
            channel = await amqp.channel()
            queue = await channel.declare_queue("quota", passive=False, durable=True)
            await queue.consume(_ignore)
            pulsar, connected = await PulsarRaw.connect(app.front_ends["pulsar"].port,
                                                        "greedy-secret")
            try:
                assert connected.command.type == pb.BaseCommand.CONNECTED
                _, subscribed = await pulsar.subscribe("quota", "by-pulsar")
                assert subscribed.command.type == pb.BaseCommand.SUCCESS, subscribed.command
                async with grpc.aio.insecure_channel(target) as rmq_channel:
                    stub = service_pb2_grpc.MessagingServiceStub(rmq_channel)
                    await rmq_receive_handles(stub, signed("greedy-ak", "greedy-sk"), "quota",
                                              "by-rocketmq")
                owners = {group: sub.owner for (_, group), sub in app.engine.subscriptions.items()}
            finally:
                await pulsar.close()
    by_amqp = [g for g in owners if g not in ("by-grpc", "by-pulsar", "by-rocketmq")]
    assert owners == {"by-grpc": "other", "by-pulsar": "greedy", "by-rocketmq": "greedy",
                      **{g: "greedy" for g in by_amqp}}, owners
    assert len(by_amqp) == 1, owners


async def _ignore(message: aio_pika.abc.AbstractIncomingMessage) -> None:
    pass


def test_a_share_beyond_the_pool_is_one_line_naming_it(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--listen", "127.0.0.1:0", "--data-dir",
         str(tmp_path / "data"), "--max-groups", "100", "--max-groups-per-principal", "101"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 2, done.stderr
    assert "max_groups_per_principal=101 is not allowed: 0..max_groups (100)" in done.stderr
    assert "Traceback" not in done.stderr
