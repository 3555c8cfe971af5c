"""`--max-topics-per-principal` and `--max-stored-groups-per-principal`: with a tokens file, one
principal makes at most its share of new topics and of new groups (by default half of
`--max-topics` / `--max-stored-groups`), so a client that makes up names no longer fills the
gateway's limits for every other client. Before, the limits were one pool: a client that made
`max_topics` topics had every other client refused a new one.

Every front end names the principal making the topic or group: gRPC (the bearer token), AMQP
(the login), Pulsar (the CONNECT token) and RocketMQ (the access key).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import aio_pika
import aiormq
import grpc
import pulsar
import pytest
from rocketmq.grpc_protocol import definition_pb2, service_pb2_grpc

from gateway.client import GatewayClient
from gateway.client_errors import GatewayRpcError
from gateway.engine.clock import SystemClock
from gateway.server.app import running_gateway
from tests.e2e.auth_clients import TWO_PRINCIPALS, rmq_receive_handles, rmq_send, signed
from tests.e2e.pulsar_stack import QUIET, run

TOKENS = TWO_PRINCIPALS
ROOT = Path(__file__).resolve().parents[2]
SIMPLE = "rocketmq-simple"


def tokens_in(tmp_path: Path) -> str:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS)
    return str(tokens)


async def refused(call: object, reason: str) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call  # type: ignore[misc]
    error = info.value
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()
    assert isinstance(error, GatewayRpcError) and error.reason == reason
    return error.details() or ""


async def test_one_principal_making_topics_leaves_the_others_theirs(tmp_path: Path) -> None:
    # max_topics 8 and no share given: half of it (4) for each principal.
    async with running_gateway(tmp_path / "data", tokens_file=tokens_in(tmp_path),
                               max_topics=8) as app:
        target = f"127.0.0.1:{app.grpc_port}"
        async with GatewayClient(target, token="alice-secret") as alice, \
                GatewayClient(target, token="bob-secret") as bob:
            for topic in ("a1", "a2", "a3", "a4"):
                await alice.publish(topic, [b"m"])
            said = await refused(alice.publish("a5", [b"m"]), "TOO_MANY_TOPICS")
            assert "principal 'alice'" in said and "4 new topics" in said
            assert "max_topics_per_principal" in said and "--max-topics-per-principal" in said
            # Every way of making a topic takes from the same share.
            await refused(alice.receive("a6", "g", policy=SIMPLE, wait_ms=0), "TOO_MANY_TOPICS")
            async with alice.publisher() as stream:
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await stream.publish("a7", [b"m"])
                assert "max_topics_per_principal" in (info.value.details() or "")
            # Her topics still work, and so does a topic someone else made.
            await alice.publish("a1", [b"again"])
            # bob makes his own share.
            for topic in ("b1", "b2", "b3", "b4"):
                await bob.publish(topic, [b"m"])
            await alice.publish("b1", [b"m"])
            # Both shares taken: the whole limit is reached.
            said = await refused(bob.publish("b5", [b"m"]), "TOO_MANY_TOPICS")
            assert "maximum of 8 topics (max_topics, --max-topics)" in said
            got = await alice.receive("a1", "g", policy=SIMPLE, max_messages=5, wait_ms=1000)
            assert [d.body for d in got] == [b"m", b"again"]


async def test_every_front_end_takes_new_groups_from_its_principals_share(
        tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data", clock=SystemClock(),
                               tokens_file=tokens_in(tmp_path), max_stored_groups=100,
                               max_stored_groups_per_principal=3, pulsar_listen="127.0.0.1:0",
                               amqp_listen="127.0.0.1:0") as app:
        target = f"127.0.0.1:{app.grpc_port}"
        pulsar_url = f"pulsar://127.0.0.1:{app.front_ends['pulsar'].port}"
        amqp_url = f"amqp://{{}}:{{}}-secret@127.0.0.1:{app.front_ends['amqp'].port}/"
        async with GatewayClient(target, token="alice-secret") as alice, \
                GatewayClient(target, token="bob-secret") as bob:
            await alice.publish("orders", [b"m"])
            # alice: one group each by gRPC, Pulsar and AMQP.
            await alice.receive("orders", "by-grpc", policy=SIMPLE, wait_ms=0)
            client = pulsar.Client(pulsar_url, operation_timeout_seconds=5, logger=QUIET,
                                   authentication=pulsar.AuthenticationToken("alice-secret"))
            try:
                consumer = await run(client.subscribe, "orders", "by-pulsar")
                await run(consumer.close)
                connection = await aio_pika.connect(amqp_url.format("alice", "alice"))
                async with connection:
                    channel = await connection.channel()
                    await channel.declare_queue("alice-queue", durable=True)
                    # Her share is taken: a new queue is refused with 506, naming the setting.
                    with pytest.raises(aiormq.exceptions.ChannelClosed) as closed:
                        await channel.declare_queue("alice-queue-2", durable=True)
                    assert closed.value.args[0] == 506, closed.value.args
                    assert "max_stored_groups_per_principal" in str(closed.value.args)
                # ... and by every other front end.
                with pytest.raises(pulsar.NotAllowedError):
                    await run(client.subscribe, "orders", "by-pulsar-2")
            finally:
                await run(client.close)
            said = await refused(alice.receive("orders", "by-grpc-2", policy=SIMPLE, wait_ms=0),
                                 "TOO_MANY_GROUPS")
            assert "principal 'alice'" in said and "3 new groups" in said
            assert "max_stored_groups_per_principal" in said
            async with grpc.aio.insecure_channel(target) as rmq_channel:
                stub = service_pb2_grpc.MessagingServiceStub(rmq_channel)
                code, _ = await rmq_receive_handles(stub, signed("alice-ak", "alice-sk"),
                                                    "orders", "by-rocketmq")
                assert code == definition_pb2.Code.TOO_MANY_REQUESTS
            # Her groups still work (the message is invisible there, taken by the first
            # receive); bob's new groups are his own share.
            assert await alice.receive("orders", "by-grpc", policy=SIMPLE, wait_ms=0) == []
            for group in ("b1", "b2", "b3"):
                got = await bob.receive("orders", group, policy=SIMPLE, wait_ms=1000)
                assert [d.body for d in got] == [b"m"]
            await refused(bob.receive("orders", "b4", policy=SIMPLE, wait_ms=0),
                          "TOO_MANY_GROUPS")


async def test_a_rocketmq_sender_takes_new_topics_from_its_share(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data", tokens_file=tokens_in(tmp_path),
                               max_topics=100, max_topics_per_principal=1) as app:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            meta = signed("alice-ak", "alice-sk")
            sent = await stub.SendMessage(rmq_send("r1"), metadata=meta, timeout=10)
            assert sent.status.code == definition_pb2.Code.OK, sent.status
            sent = await stub.SendMessage(rmq_send("r2"), metadata=meta, timeout=10)
            assert sent.status.code == definition_pb2.Code.TOO_MANY_REQUESTS, sent.status
            assert "max_topics_per_principal" in sent.status.message
        async with GatewayClient(f"127.0.0.1:{app.grpc_port}", token="bob-secret") as bob:
            await bob.publish("r2", [b"m"])  # bob's share is his own


@pytest.mark.parametrize(("flag", "whole"), [("--max-topics-per-principal", "max_topics"),
                                             ("--max-stored-groups-per-principal",
                                              "max_stored_groups")])
@pytest.mark.parametrize("value", ["-1", "101", "half"])
def test_a_share_out_of_range_is_one_line_naming_it(tmp_path: Path, flag: str, whole: str,
                                                    value: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--listen", "127.0.0.1:0", "--data-dir",
         str(tmp_path / "data"), f"--{whole.replace('_', '-')}", "100", flag, value],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 2, done.stderr
    assert flag.lstrip("-").replace("-", "_") in done.stderr.replace("-", "_"), done.stderr
    if value != "half":
        assert f"0..{whole} (100)" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
