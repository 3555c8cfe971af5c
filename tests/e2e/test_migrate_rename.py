"""`gateway migrate rename` against a running gateway process: a Pulsar group's 100 waiting retries
and 10 dead letters move from the 2.7 names (`{sub}-RETRY`, `{sub}-DLQ`) to the 2.9 names
(`{topic}-{sub}-RETRY`, `-DLQ`) with their due times, counts and properties; nothing stays at the
old names; a consumer under the new scheme gets the retries when they fall due."""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amqp_node import URL, delete_queues, plain_connection
from migrate_procs import migrate, read_part, start_gateway, stop

from adapters.amqp.backend import RabbitMQBackend
from adapters.amqp.queues import queue_name
from gateway.admin_client import AdminClient, Target, connect
from gateway.client import GatewayClient
from gateway.server.app import running_gateway

SCALE = 0.001
"""Policy time 1000x faster: a 1 h retry wait is 3.6 s."""
TOPIC = "persistent://public/default/orders"
GROUP = "sub"
WAIT_MS = 3_600_000


async def test_pulsar_27_to_29_moves_retries_and_dead_letters(tmp_path: Path) -> None:
    gateway = start_gateway(tmp_path / "data", scale=SCALE)
    try:
        async with GatewayClient(gateway.target) as client:
            await client.publish(TOPIC, [f"m{i}".encode() for i in range(110)],
                                 properties={"trace": "x"})
            async with client.consume(TOPIC, GROUP, policy="pulsar", naming="pulsar-2.7",
                                      prefetch=200) as stream:
                for i in range(110):
                    msg = await stream.next(10)
                    assert msg is not None
                    if i < 100:
                        assert (await msg.fail(delay_ms=WAIT_MS)).ok
                    else:
                        assert (await msg.dead_letter("poison")).ok
        old = {part: await read_part(gateway.target, TOPIC, GROUP, part, "pulsar-2.7")
               for part in ("retry", "dead-letter")}
        assert len(old["retry"]) == 100 and len(old["dead-letter"]) == 10
        assert {m.properties["RETRY_TOPIC"] for m in old["retry"]} == {
            "persistent://public/default/sub-RETRY"}

        base = ["rename", "--topic", TOPIC, "--group", GROUP, "--from-scheme", "pulsar-2.7",
                "--to-scheme", "pulsar-2.9", "--target", gateway.target]
        dry = migrate(*base, "--dry-run", "--json")
        assert dry.returncode == 0, dry.stderr
        counted = json.loads(dry.stdout)
        assert (counted["retries"], counted["dead_letters"]) == (100, 10)
        assert len(await read_part(gateway.target, TOPIC, GROUP, "retry", "pulsar-2.7")) == 100

        done = migrate(*base)
        assert done.returncode == 0, done.stderr
        assert "moved 100 retries: persistent://public/default/sub-RETRY -> " \
               "persistent://public/default/orders-sub-RETRY" in done.stdout
        assert "moved 10 dead letters" in done.stdout

        for part in ("retry", "dead-letter"):
            assert await read_part(gateway.target, TOPIC, GROUP, part, "pulsar-2.7") == []
        new = {part: await read_part(gateway.target, TOPIC, GROUP, part, "pulsar-2.9")
               for part in ("retry", "dead-letter")}
        before = {m.message_id: m for part in old.values() for m in part}
        assert len(new["retry"]) == 100 and len(new["dead-letter"]) == 10
        for m in new["retry"] + new["dead-letter"]:
            was = before[m.message_id]
            assert (m.body, m.deliver_at_ms, m.attempt, m.retries) == (
                was.body, was.deliver_at_ms, was.attempt, was.retries)
            assert m.properties["trace"] == "x"
            assert m.properties["REAL_TOPIC"] == TOPIC
        assert {m.properties["RETRY_TOPIC"] for m in new["retry"]} == {
            "persistent://public/default/orders-sub-RETRY"}
        assert {m.properties["RECONSUMETIMES"] for m in new["retry"]} == {"1"}
        assert {m.properties["x-gateway-dead-letter-reason"] for m in new["dead-letter"]} == {
            "poison"}

        again = migrate(*base)  # nothing left to move
        assert again.returncode == 0 and "moved 0 retries" in again.stdout

        # A consumer under the new names gets the retries when they fall due, counted.
        async with GatewayClient(gateway.target) as client, client.consume(
                TOPIC, GROUP, policy="pulsar", naming="pulsar-2.9", prefetch=200) as stream:
            got = {}
            deadline = time.monotonic() + 60
            while len(got) < 100 and time.monotonic() < deadline:
                msg = await stream.next(10)
                assert msg is not None
                got[msg.message_id] = (time.time(), msg)
                msg.ack_quietly()
            await stream.drain()
        assert set(got) == {m.message_id for m in new["retry"]}
        due = {m.message_id: m.deliver_at_ms for m in new["retry"]}
        for arrived, msg in got.values():
            assert arrived * 1000 >= due[msg.message_id] - 50  # not before its due time
            assert msg.attempt == 2 and msg.retries == 1
            assert msg.properties["RECONSUMETIMES"] == "1"
    finally:
        stop(gateway)


async def test_refused_while_consumers_use_the_old_names(tmp_path: Path) -> None:
    gateway = start_gateway(tmp_path / "data", scale=SCALE)
    try:
        async with GatewayClient(gateway.target) as client, client.consume(
                "t", "g", policy="pulsar", naming="pulsar-2.7"):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                busy = migrate("rename", "--topic", "t", "--group", "g", "--from-scheme",
                               "pulsar-2.7", "--to-scheme", "pulsar-2.9", "--target",
                               gateway.target)
                if busy.returncode == 2:
                    break
            assert busy.returncode == 2, busy.stderr
            assert "consumer(s) open under naming pulsar-2.7" in busy.stderr
        unknown = migrate("rename", "--topic", "t", "--group", "g", "--from-scheme", "nope",
                          "--to-scheme", "pulsar-2.9", "--target", gateway.target)
        assert unknown.returncode == 2 and "naming='nope'" in unknown.stderr
        down = migrate("rename", "--topic", "t", "--group", "g", "--from-scheme",
                       "pulsar-2.7", "--to-scheme", "pulsar-2.9", "--target", "127.0.0.1:1")
        assert down.returncode == 5
    finally:
        stop(gateway)


async def test_on_the_rabbitmq_back_end_copies_then_removes(tmp_path: Path) -> None:
    """A broker back end: the dead letters are published under the new name, then removed
    from the old one (RabbitMQ queues `+25DLQ+25G` -> `orders-G-DLQ`)."""
    topic, group = f"mig-{uuid.uuid4().hex[:8]}", f"g{uuid.uuid4().hex[:6]}"
    async with running_gateway(tmp_path / "data", backend=RabbitMQBackend(URL),
                               time_scale=0.01) as app:
        target = f"127.0.0.1:{app.grpc_port}"
        try:
            async with GatewayClient(target) as client:
                await client.publish(topic, [f"d{i}".encode() for i in range(5)])
                async with client.consume(topic, group, policy="rocketmq",
                                          prefetch=10) as stream:
                    for _ in range(5):
                        msg = await stream.next(10)
                        assert msg is not None
                        assert (await msg.dead_letter("poison")).ok
            channel = connect(Target(target))
            try:
                moved = await AdminClient(channel).rename(topic, group, "rocketmq",
                                                          "pulsar-2.9")
            finally:
                await channel.close()
            assert (moved.dead_letter_from, moved.dead_letter_to) == (
                f"%DLQ%{group}", f"{topic}-{group}-DLQ")
            assert moved.dead_letters == 5
            new = await read_part(target, topic, group, "dead-letter", "pulsar-2.9")
            assert sorted(m.body for m in new) == [f"d{i}".encode() for i in range(5)]
            assert await read_part(target, topic, group, "dead-letter", "rocketmq") == []
        finally:
            async with plain_connection() as connection:
                await delete_queues(connection, queue_name(topic),
                                    queue_name(f"%DLQ%{group}"), queue_name(f"%RETRY%{group}"),
                                    queue_name(f"{topic}-{group}-DLQ"))
