"""`gateway migrate copy` through the CLI: a missing RabbitMQ destination queue is bad usage
(exit 2, naming `to=` and the queue), not a refused copy (exit 7), and nothing leaves the
source; dead letters copied from a RabbitMQ dead-letter queue or from another gateway keep their
attempt count, reason and time and are counted as dead letters; a dry run checks the
destination without side effects."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import aio_pika

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from amqp_node import URL
from migrate_procs import migrate, read_part, start_gateway, stop, two_gateways

from gateway.client import GatewayClient
from gateway.core.properties import is_reserved


async def test_a_missing_rabbitmq_destination_queue_is_bad_usage(tmp_path: Path) -> None:
    queue = f"migrate-none-{uuid.uuid4().hex[:10]}"
    source = start_gateway(tmp_path / "a")
    try:
        async with GatewayClient(source.target) as client:
            await client.publish("orders", [b"one", b"two"])
        done = migrate("copy", "--from", f"gateway://{source.target}/orders?group=billing&new-group=true",
                       "--to", f"{URL}?queue={queue}", timeout_s=120)
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert "to=" in done.stderr and queue in done.stderr, done.stderr
        assert "guest:guest" not in done.stderr
        assert len(await read_part(source.target, "orders", "billing", "ready")) == 2
    finally:
        stop(source)


def _dead_letters(target: str, topic: str, group: str) -> list[dict[str, Any]]:
    """`gateway dlq list --all --json` on a gateway."""
    listed = subprocess.run([sys.executable, "-m", "gateway.cli", "dlq", "list", "--target",
                             target, topic, group, "--all", "--json"],
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    return list(json.loads(listed.stdout)["dead_letters"])


async def test_a_rabbitmq_dead_letter_queue_copied_as_dead_letters(tmp_path: Path) -> None:
    """RabbitMQ's own dead letters (`x-death`), copied with `part=dead-letter`: each keeps its
    reason, time and refused deliveries as the gateway's dead letters show them, and the
    summary (dry and real) counts them as dead letters, not as ready messages."""
    work = f"migrate-work-{uuid.uuid4().hex[:10]}"
    dlq = f"{work}.dlq"
    connection = await aio_pika.connect(URL)
    channel = await connection.channel()
    await channel.declare_queue(dlq, durable=True)
    queue = await channel.declare_queue(work, durable=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    gateway = start_gateway(tmp_path / "g")
    try:
        before_ms = int(time.time()) * 1000  # x-death's time has whole seconds
        for i in range(3):
            await channel.default_exchange.publish(
                aio_pika.Message(f"bad-{i}".encode(), message_id=f"id-{i}"), work)
        for _ in range(3):
            message = await queue.get(no_ack=False, fail=True)
            assert message is not None
            await message.reject(requeue=False)
        deadline = time.monotonic() + 10
        while (await channel.declare_queue(dlq, passive=True)).declaration_result \
                .message_count != 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        args = ["copy", "--from", f"{URL}?queue={dlq}",
                "--to", f"gateway://{gateway.target}/orders?group=billing&part=dead-letter",
                "--json"]
        dry = migrate(*args, "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert json.loads(dry.stdout)["by_part"] == {"dead-letter": 3}
        done = migrate(*args)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["by_part"] == {"dead-letter": 3}

        dead = _dead_letters(gateway.target, "orders", "billing")
        assert sorted(d["message_id"] for d in dead) == ["id-0", "id-1", "id-2"]
        for d in dead:
            assert d["reason"] == "rejected"
            assert d["attempt"] == 1  # one delivery, refused
            assert before_ms <= d["dead_lettered_ms"] <= time.time() * 1000
            assert not any(is_reserved(k) for k in d["properties"])
        # Filters on them work as on the gateway's own dead letters.
        assert len(await read_part(gateway.target, "orders", "billing", "dead-letter")) == 3
    finally:
        stop(gateway)
        for name in (work, dlq, dlq + ".migrate-ledger"):
            await channel.queue_delete(name)
        await connection.close()


async def test_a_rabbitmq_dead_letter_copied_to_a_queue_gains_no_reserved_header() -> None:
    """Into another queue a RabbitMQ dead letter goes with its `x-death` as it was: the reason
    and time read off it for a gateway destination are not written as `x-gateway-*` headers."""
    work = f"migrate-work-{uuid.uuid4().hex[:10]}"
    dlq, into = f"{work}.dlq", f"{work}.into"
    connection = await aio_pika.connect(URL)
    channel = await connection.channel()
    for name in (dlq, into):
        await channel.declare_queue(name, durable=True)
    queue = await channel.declare_queue(work, durable=True, arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    try:
        await channel.default_exchange.publish(
            aio_pika.Message(b"bad", message_id="id-x", headers={"h": "v"}), work)
        message = await queue.get(no_ack=False, fail=True)
        assert message is not None
        await message.reject(requeue=False)
        deadline = time.monotonic() + 10
        while (await channel.declare_queue(dlq, passive=True)).declaration_result \
                .message_count != 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        done = migrate("copy", "--from", f"{URL}?queue={dlq}", "--to", f"{URL}?queue={into}")
        assert done.returncode == 0, done.stderr
        copied = await (await channel.declare_queue(into, passive=True)).get(no_ack=True)
        assert copied is not None
        headers = copied.headers or {}
        assert headers["h"] == "v" and headers["x-first-death-reason"] == "rejected"
        assert not any(is_reserved(k) for k in headers), headers
    finally:
        for name in (work, dlq, into, f"{into}.migrate-ledger"):
            await channel.queue_delete(name)
        await connection.close()


async def test_dead_letters_copied_between_gateways_keep_attempt_reason_and_time(
        tmp_path: Path) -> None:
    """A regression guard: a gateway's dead letters keep their attempt count, reason and time
    at another gateway (ImportMessages keeps the reserved reason and time properties)."""
    with two_gateways(tmp_path) as (source, destination):
        async with GatewayClient(source.target) as client:
            await client.publish("orders", [b"p0", b"p1"])
            async with client.consume("orders", "billing", policy="rocketmq",
                                      prefetch=10) as stream:
                for _ in range(2):
                    msg = await stream.next(10)
                    assert msg is not None
                    assert (await msg.dead_letter("poison")).ok
        before = {d["message_id"]: d for d in _dead_letters(source.target, "orders", "billing")}
        assert len(before) == 2
        done = migrate("copy", "--from", f"gateway://{source.target}/orders?group=billing",
                       "--to", f"gateway://{destination.target}/orders?group=billing", "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["by_part"] == {"dead-letter": 2}
        after = {d["message_id"]: d for d in _dead_letters(destination.target, "orders",
                                                           "billing")}
        assert set(after) == set(before)
        for mid, d in after.items():
            for field in ("attempt", "reason", "dead_lettered_ms", "original_topic"):
                assert d[field] == before[mid][field], field
            assert d["reason"] == "poison" and d["attempt"] == 1 and d["dead_lettered_ms"] > 0


async def _exists(connection: aio_pika.abc.AbstractConnection, queue: str) -> bool:
    """Whether RabbitMQ has the queue (a passive declare on a channel of its own)."""
    side = await connection.channel()
    try:
        await side.declare_queue(queue, passive=True)
    except aio_pika.exceptions.ChannelNotFoundEntity:
        return False
    await side.close()
    return True


async def test_a_dry_run_checks_the_destination_and_changes_nothing(tmp_path: Path) -> None:
    """`--dry-run` predicts the real run's status at the destination too (a queue missing there,
    credentials it refuses, a gateway it cannot reach), with no side effect there: no ledger
    queue, no lock, nothing taken from the source. A Pulsar destination is not checked (a
    producer would create the topic), and the summary says so."""
    queue = f"migrate-dry-{uuid.uuid4().hex[:10]}"
    wrong = URL.replace("guest:guest@", "guest:wrongpw@")
    connection = await aio_pika.connect(URL)
    channel = await connection.channel()
    source = start_gateway(tmp_path / "a")
    url_a = f"gateway://{source.target}/orders?group=billing&new-group=true"
    try:
        async with GatewayClient(source.target) as client:
            await client.publish("orders", [b"one", b"two"])
        missing = migrate("copy", "--from", url_a, "--to", f"{URL}?queue={queue}",
                          "--dry-run", timeout_s=120)
        assert missing.returncode == 2, (missing.stdout, missing.stderr)
        assert "to=" in missing.stderr and queue in missing.stderr, missing.stderr

        await channel.declare_queue(queue, durable=True)
        denied = migrate("copy", "--from", url_a, "--to", f"{wrong}?queue={queue}",
                         "--dry-run", timeout_s=120)
        assert denied.returncode == 4, (denied.stdout, denied.stderr)
        assert "wrongpw" not in denied.stderr
        away = migrate("copy", "--from", url_a, "--to", "gateway://127.0.0.1:1/orders",
                       "--dry-run", timeout_s=120)
        assert away.returncode == 6, (away.stdout, away.stderr)

        dry = migrate("copy", "--from", url_a, "--to", f"{URL}?queue={queue}", "--dry-run",
                      "--json", timeout_s=120)
        assert dry.returncode == 0, dry.stderr
        summary = json.loads(dry.stdout)
        assert summary["by_part"]["ready"] == 2 and summary["destination_checked"] is True
        assert not await _exists(connection, f"{queue}.migrate-ledger")
        assert not await _exists(connection, f"{queue}.migrate-lock")
        assert (await channel.declare_queue(queue, passive=True)).declaration_result \
            .message_count == 0
        assert len(await read_part(source.target, "orders", "billing", "ready")) == 2

        pulsar = migrate("copy", "--from", url_a, "--to", "pulsar://127.0.0.1:1/elsewhere",
                         "--dry-run", timeout_s=120)
        assert pulsar.returncode == 0, pulsar.stderr
        assert "2 ready to copy" in pulsar.stdout and "not checked" in pulsar.stdout, \
            pulsar.stdout
    finally:
        stop(source)
        for name in (queue, f"{queue}.migrate-ledger"):
            await channel.queue_delete(name)
        await connection.close()
