"""`gateway migrate copy` maps Pulsar dead letters both ways, through pulsar-client against the
gateway's own Pulsar front end (as tests/e2e/test_migrate_pulsar.py):

* off a Pulsar dead-letter topic (`{topic}-{subscription}-DLQ`) into a gateway group's dead
  letters (`part=dead-letter`): each keeps its Pulsar properties and gets the gateway's reason
  and time, its `ORIGIN_MESSAGE_ID` as its id and its `RECONSUMETIMES` as its attempt count
  (they came without reason or time, listed as dead letters that never failed);
* a gateway group's dead letters onto a Pulsar topic: sent with `REAL_TOPIC`,
  `ORIGIN_MESSAGE_ID` and `RECONSUMETIMES`, as Pulsar's own dead letters carry them (they came
  with none of them)."""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from pathlib import Path

import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parent))

from migrate_procs import migrate, read_part, start_gateway, stop

from gateway.client import GatewayClient
from gateway.core.properties import DEAD_AT, DEAD_REASON

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
DLQ = "persistent://public/default/orders-billing-DLQ"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_pulsar_dead_letter_topic_into_gateway_dead_letters(tmp_path: Path) -> None:
    port = free_port()
    broker = start_gateway(tmp_path / "broker", "--pulsar-listen", f"127.0.0.1:{port}")
    dest = start_gateway(tmp_path / "dest")
    client = pulsar.Client(f"pulsar://127.0.0.1:{port}", logger=QUIET)
    try:
        producer = await asyncio.to_thread(client.create_producer, DLQ)
        before = int(time.time() * 1000)
        for i in range(3):
            await asyncio.to_thread(producer.send, f"d{i}".encode(), properties={
                "REAL_TOPIC": "persistent://public/default/orders",
                "ORIGIN_MESSAGE_ID": f"17:{i}:-1", "RECONSUMETIMES": "16", "n": str(i)})
        done = migrate("copy", "--from", f"pulsar://127.0.0.1:{port}/{DLQ}?subscription=mig",
                       "--to", f"gateway://{dest.target}/orders?group=billing&part=dead-letter")
        assert done.returncode == 0, done.stderr
        dead = {m.body: m for m in await read_part(dest.target, "orders", "billing",
                                                   "dead-letter")}
        assert sorted(dead) == [b"d0", b"d1", b"d2"]
        one = dead[b"d1"]
        assert one.message_id == "17:1:-1"
        assert one.attempt == 16
        assert one.properties[DEAD_REASON] == "pulsar: maxRedeliverCount reached"
        assert before - 60_000 <= int(one.properties[DEAD_AT]) <= int(time.time() * 1000)
        assert one.properties["REAL_TOPIC"] == "persistent://public/default/orders"
        assert one.properties["n"] == "1"
    finally:
        await asyncio.to_thread(client.close)
        stop(broker)
        stop(dest)


async def test_gateway_dead_letters_onto_pulsar_carry_its_dead_letter_properties(
    tmp_path: Path,
) -> None:
    port = free_port()
    source = start_gateway(tmp_path / "source")
    broker = start_gateway(tmp_path / "broker", "--pulsar-listen", f"127.0.0.1:{port}")
    client = pulsar.Client(f"pulsar://127.0.0.1:{port}", logger=QUIET)
    try:
        async with GatewayClient(source.target) as gw:
            await gw.publish("orders", [b"p0", b"p1"])
            async with gw.consume("orders", "billing", policy="rocketmq",
                                  prefetch=10) as stream:
                ids = []
                for _ in range(2):
                    msg = await stream.next(10)
                    assert msg is not None
                    ids.append(msg.message_id)
                    assert (await msg.dead_letter("poison")).ok
        done = migrate("copy", "--from",
                       f"gateway://{source.target}/orders?group=billing&parts=dead-letter",
                       "--to", f"pulsar://127.0.0.1:{port}/{DLQ}")
        assert done.returncode == 0, done.stderr
        consumer = await asyncio.to_thread(client.subscribe, DLQ, "native",
                                           consumer_type=pulsar.ConsumerType.Shared,
                                           initial_position=pulsar.InitialPosition.Earliest)
        got = {}
        for _ in range(2):
            msg = await asyncio.to_thread(consumer.receive, 30_000)
            got[msg.data()] = msg.properties()
            await asyncio.to_thread(consumer.acknowledge, msg)
        assert sorted(got) == [b"p0", b"p1"]
        assert {p["ORIGIN_MESSAGE_ID"] for p in got.values()} == set(ids)
        assert {p["REAL_TOPIC"] for p in got.values()} == {"orders"}
        assert not any(k.startswith("x-gateway-") for p in got.values() for k in p)
    finally:
        await asyncio.to_thread(client.close)
        stop(source)
        stop(broker)
