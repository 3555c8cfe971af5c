"""`gateway migrate copy` with a Pulsar topic on either side, through pulsar-client against the
gateway's own Pulsar front end (no Pulsar cluster runs in CI; `PULSAR_SERVICE_URL`-style real
clusters take the same URLs): off a Pulsar subscription into a gateway, killed halfway and run
again; and a gateway group's messages and waiting retries into a Pulsar topic."""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from collections import Counter
from pathlib import Path

import grpc
import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parent))

from migrate_procs import migrate, migrate_killed, read_part, start_gateway, stop

from gateway.client import GatewayClient
from gateway.v1 import admin_pb2, admin_pb2_grpc

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
N = 2000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ready(target: str, topic: str, group: str) -> int:
    with grpc.insecure_channel(target) as channel:
        view = admin_pb2_grpc.AdminStub(channel).DescribeGroup(
            admin_pb2.DescribeGroupRequest(topic=topic, group=group), timeout=10)
    return int(view.ready)


async def test_pulsar_subscription_into_a_gateway_killed_halfway(tmp_path: Path) -> None:
    port = free_port()
    broker = start_gateway(tmp_path / "broker", "--pulsar-listen", f"127.0.0.1:{port}")
    dest = start_gateway(tmp_path / "dest")
    client = pulsar.Client(f"pulsar://127.0.0.1:{port}", logger=QUIET)
    try:
        producer = await asyncio.to_thread(client.create_producer,
                                           "persistent://public/default/events",
                                           block_if_queue_full=True)

        def send_all() -> None:
            for i in range(N):
                producer.send_async(f"e{i}".encode(), None, properties={"i": str(i)},
                                    partition_key=f"k{i % 7}")
            producer.flush()

        await asyncio.to_thread(send_all)
        source = f"pulsar://127.0.0.1:{port}/persistent://public/default/events?subscription=mig"
        args = ["copy", "--from", source, "--to", f"gateway://{dest.target}/events",
                "--batch", "100"]
        migrate_killed(args, lambda: _ready(dest.target, "events", "check") >= N // 3)
        done = migrate(*args)
        assert done.returncode == 0, done.stderr
        copies = await read_part(dest.target, "events", "check", "ready")
        assert Counter(m.body for m in copies) == Counter(f"e{i}".encode() for i in range(N))
        one = next(m for m in copies if m.body == b"e9")
        assert (one.properties["i"], one.key) == ("9", "k2")
        again = migrate(*args)
        assert again.returncode == 0 and "copied 0 message(s)" in again.stdout, again.stdout
    finally:
        await asyncio.to_thread(client.close)
        stop(broker)
        stop(dest)


async def test_gateway_group_into_a_pulsar_topic(tmp_path: Path) -> None:
    port = free_port()
    source = start_gateway(tmp_path / "source")
    broker = start_gateway(tmp_path / "broker", "--pulsar-listen", f"127.0.0.1:{port}")
    client = pulsar.Client(f"pulsar://127.0.0.1:{port}", logger=QUIET)
    try:
        async with GatewayClient(source.target) as gw:
            await gw.publish("orders", [f"m{i}".encode() for i in range(300)],
                             properties={"from": "gateway"})
            async with gw.consume("orders", "billing", policy="rocketmq",
                                  prefetch=100) as stream:
                for _ in range(20):
                    msg = await stream.next(10)
                    assert msg is not None
                    assert (await msg.fail(delay_level=3)).ok  # 10 s
        failed_at = time.time()
        done = migrate("copy", "--from", f"gateway://{source.target}/orders?group=billing",
                       "--to", f"pulsar://127.0.0.1:{port}/persistent://public/default/moved",
                       "--json")
        assert done.returncode == 0, done.stderr
        assert '"retry": 20' in done.stdout and '"ready": 280' in done.stdout, done.stdout
        consumer = await asyncio.to_thread(client.subscribe,
                                           "persistent://public/default/moved", "native",
                                           consumer_type=pulsar.ConsumerType.Shared,
                                           initial_position=pulsar.InitialPosition.Earliest)
        got: dict[bytes, float] = {}
        deadline = time.monotonic() + 60
        while len(got) < 300 and time.monotonic() < deadline:
            msg = await asyncio.to_thread(consumer.receive, 30_000)
            got[msg.data()] = time.time()
            assert msg.properties()["from"] == "gateway"
            await asyncio.to_thread(consumer.acknowledge, msg)
        assert len(got) == 300
        late = [when for when in got.values() if when >= failed_at + 5]
        assert len(late) >= 20  # the retries kept their due time (10 s after they failed)
        for part in ("ready", "retry"):
            assert await read_part(source.target, "orders", "billing", part) == []
    finally:
        await asyncio.to_thread(client.close)
        stop(source)
        stop(broker)
