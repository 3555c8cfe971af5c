"""`gateway migrate copy` end to end with real processes: off a real RabbitMQ queue into a gateway
on its embedded store, and from one gateway's group (ready, waiting retries, dead letters) to
another's; each run killed with `kill -9` halfway and run again. Exactly every message arrives
once, the source keeps nothing, and retries keep their due times and attempt counts."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import aio_pika
import grpc
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from amqp_node import URL
from migrate_procs import migrate, migrate_killed, read_part, start_gateway, stop

from gateway.client import GatewayClient
from gateway.v1 import admin_pb2, admin_pb2_grpc

N = 10_000


def _ready(target: str, topic: str, group: str) -> int:
    """Ready messages of a group on a gateway (a synchronous DescribeGroup)."""
    with grpc.insecure_channel(target) as channel:
        view = admin_pb2_grpc.AdminStub(channel).DescribeGroup(
            admin_pb2.DescribeGroupRequest(topic=topic, group=group), timeout=10)
    return int(view.ready)


async def _queue_depth(channel: aio_pika.abc.AbstractChannel, queue: str) -> int:
    declared = await channel.declare_queue(queue, passive=True)
    return int(declared.declaration_result.message_count or 0)


async def test_rabbitmq_queue_into_the_embedded_store_killed_halfway(tmp_path: Path) -> None:
    queue = f"migrate-src-{uuid.uuid4().hex[:10]}"
    connection = await aio_pika.connect(URL)
    channel = await connection.channel()
    await channel.declare_queue(queue, durable=True)
    gateway = start_gateway(tmp_path / "dest")
    try:
        for start in range(0, N, 1000):
            for i in range(start, start + 1000):
                # Half with a message id, half keyed by their content.
                await channel.default_exchange.publish(aio_pika.Message(
                    f"body-{i}".encode(), message_id=f"id-{i}" if i % 2 else None,
                    headers={"n": i, "kind": "migrate"}, content_type="text/plain",
                    delivery_mode=aio_pika.DeliveryMode.PERSISTENT), queue)
        assert await _queue_depth(channel, queue) == N
        source = f"{URL}?queue={queue}"
        destination = f"gateway://{gateway.target}/orders"
        args = ["copy", "--from", source, "--to", destination, "--batch", "200"]
        migrate_killed(args, lambda: _ready(gateway.target, "orders", "check") >= N // 2)
        between = _ready(gateway.target, "orders", "check")
        assert N // 2 <= between < N, between

        done = migrate(*args)
        assert done.returncode == 0, done.stderr
        assert "copied" in done.stdout and "already there" in done.stdout, done.stdout

        copies = await read_part(gateway.target, "orders", "check", "ready")
        bodies = Counter(m.body for m in copies)
        assert len(copies) == N
        assert set(bodies) == {f"body-{i}".encode() for i in range(N)}
        assert max(bodies.values()) == 1
        one = next(m for m in copies if m.body == b"body-7")
        assert one.message_id == "id-7"
        assert one.properties["n"] == "7"
        assert one.properties["amqp.content-type"] == "text/plain"
        assert await _queue_depth(channel, queue) == 0

        again = migrate(*args)  # nothing left: nothing copied, nothing doubled
        assert again.returncode == 0, again.stderr
        assert "copied 0 message(s)" in again.stdout
        assert len(await read_part(gateway.target, "orders", "check", "ready")) == N
    finally:
        stop(gateway)
        await channel.queue_delete(queue)
        await channel.queue_delete(queue + ".migrate-ledger", if_unused=False, if_empty=False)
        await connection.close()


async def test_gateway_group_to_another_gateway_killed_halfway(tmp_path: Path) -> None:
    source = start_gateway(tmp_path / "a")
    destination = start_gateway(tmp_path / "b")
    ready, retried, dead = 3000, 600, 150
    try:
        async with GatewayClient(source.target) as client:
            for start in range(0, ready + retried + dead, 1000):
                count = min(1000, ready + retried + dead - start)
                await client.publish("orders", [f"m{start + i}".encode()
                                                for i in range(count)],
                                     properties={"origin": "a"})
            failed: dict[str, int] = {}
            async with client.consume("orders", "billing", policy="rocketmq",
                                      prefetch=1000) as stream:
                for _ in range(retried + dead):
                    msg = await stream.next(10)
                    assert msg is not None
                    if len(failed) < retried:
                        assert (await msg.fail(delay_level=18)).ok  # 2 h
                        failed[msg.message_id] = 1
                    else:
                        assert (await msg.dead_letter("poison")).ok
        waiting = {m.message_id: m for m in await read_part(source.target, "orders", "billing",
                                                            "retry")}
        assert len(waiting) == retried
        due = {mid: m.deliver_at_ms for mid, m in waiting.items()}

        url_a = f"gateway://{source.target}/orders?group=billing"
        url_b = f"gateway://{destination.target}/orders?group=billing"
        args = ["copy", "--from", url_a, "--to", url_b, "--batch", "100"]
        migrate_killed(args, lambda: _ready(destination.target, "orders", "billing")
                       >= ready // 2)
        done = migrate(*args)
        assert done.returncode == 0, done.stderr

        got = {part: await read_part(destination.target, "orders", "billing", part)
               for part in ("ready", "retry", "dead-letter")}
        assert len(got["ready"]) == ready
        assert len({m.message_id for m in got["ready"]}) == ready
        assert len(got["retry"]) == retried
        for m in got["retry"]:
            assert m.deliver_at_ms == due[m.message_id]
            assert m.attempt == 1 and m.retries == 1
            assert m.properties["origin"] == "a"
        assert len(got["dead-letter"]) == dead
        assert all(m.properties["x-gateway-dead-letter-reason"] == "poison"
                   for m in got["dead-letter"])
        for part in ("ready", "retry", "dead-letter"):
            assert await read_part(source.target, "orders", "billing", part) == []

        # The copies are the group's: a consumer on B gets the ready ones now.
        async with GatewayClient(destination.target) as client, client.consume(
                "orders", "billing", policy="rocketmq", prefetch=1000) as stream:
            seen = 0
            deadline = time.monotonic() + 60
            while seen < ready and time.monotonic() < deadline:
                msg = await stream.next(10)
                assert msg is not None
                msg.ack_quietly()
                seen += 1
            await stream.drain()
        assert seen == ready
    finally:
        stop(source)
        stop(destination)


@pytest.mark.parametrize("url, status, text", [
    ("amqp://guest:guest@127.0.0.1:1/?queue=x", 5, "cannot connect"),
    ("amqp://guest:wrong@127.0.0.1:5672/?queue=x", 4, "credentials"),
    ("amqp://guest:guest@127.0.0.1:5672/no-vhost-{uid}?queue=x", 4, "virtual host"),
    ("amqp://guest:guest@127.0.0.1:5672/?queue=migrate-none-{uid}", 2, "no queue"),
    ("amqp://guest:guest@127.0.0.1:5672/", 2, "queue=NAME"),
    ("ftp://127.0.0.1/x", 2, "a URL of scheme"),
    ("gateway://127.0.0.1:1/orders?group=g", 5, "UNAVAILABLE"),
    ("gateway://127.0.0.1:1/orders", 2, "a group"),
    ("not a url", 2, "a URL such as"),
])
def test_clear_errors_and_exit_statuses(tmp_path: Path, url: str, status: int,
                                        text: str) -> None:
    result = migrate("copy", "--from", url.format(uid=uuid.uuid4().hex),
                     "--to", "gateway://127.0.0.1:1/elsewhere", timeout_s=60)
    assert result.returncode == status, (result.stdout, result.stderr)
    assert text in result.stderr
    assert "wrong" not in result.stderr  # a password is never echoed


@pytest.mark.parametrize("to, text", [
    ("gateway://127.0.0.1:1/elsewhere?part=retry", "a group for part=retry"),
    ("gateway://127.0.0.1:1/elsewhere?part=dead-letter", "a group for part=dead-letter"),
    ("gateway://127.0.0.1:1/elsewhere?group=", "non-empty"),
])
def test_a_destination_url_that_cannot_take_the_copies_is_bad_usage(to: str, text: str) -> None:
    """Refused before either side is reached (it was found only when the destination refused
    the first batch, exit 7, or not at all when nothing was to be copied)."""
    result = migrate("copy", "--from", "gateway://127.0.0.1:1/orders?group=g", "--to", to,
                     timeout_s=60)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert text in result.stderr and "to=" in result.stderr


async def test_unreachable_destination_takes_nothing_from_the_source(tmp_path: Path) -> None:
    queue = f"migrate-src-{uuid.uuid4().hex[:10]}"
    connection = await aio_pika.connect(URL)
    channel = await connection.channel()
    await channel.declare_queue(queue, durable=True)
    try:
        for i in range(50):
            await channel.default_exchange.publish(aio_pika.Message(f"b{i}".encode()), queue)
        result = migrate("copy", "--from", f"{URL}?queue={queue}",
                         "--to", "gateway://127.0.0.1:1/orders", timeout_s=60)
        assert result.returncode == 6, result.stderr
        # The dry run checks the destination as the run opens it: it predicts the exit 6.
        dry = migrate("copy", "--from", f"{URL}?queue={queue}",
                      "--to", "gateway://127.0.0.1:1/orders", "--dry-run", "--json")
        assert dry.returncode == 6, dry.stderr
        assert await _queue_depth(channel, queue) == 50
    finally:
        await channel.queue_delete(queue)
        await connection.close()


async def test_a_refused_copy_stays_at_the_source(tmp_path: Path) -> None:
    queue = f"migrate-src-{uuid.uuid4().hex[:10]}"
    connection = await aio_pika.connect(URL)
    channel = await connection.channel()
    await channel.declare_queue(queue, durable=True)
    gateway = start_gateway(tmp_path / "small", "--max-message-bytes", "65536")
    try:
        for body in (b"fits", b"x" * 100_000, b"after"):
            await channel.default_exchange.publish(aio_pika.Message(body), queue)
        result = migrate("copy", "--from", f"{URL}?queue={queue}",
                         "--to", f"gateway://{gateway.target}/orders", "--batch", "1")
        assert result.returncode == 7, result.stderr
        assert "RESOURCE_EXHAUSTED" in result.stderr and "after 1 message(s)" in result.stderr
        assert [m.body for m in await read_part(gateway.target, "orders", "g", "ready")] == [
            b"fits"]
        deadline = time.monotonic() + 10  # the closed connection gives back what it held
        while await _queue_depth(channel, queue) != 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert await _queue_depth(channel, queue) == 2
    finally:
        stop(gateway)
        await channel.queue_delete(queue)
        await connection.close()


def _depth_now(queue: str) -> int:
    """A queue's ready count, synchronously (pika), for `migrate_killed`'s check."""
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(URL))
    try:
        declared = connection.channel().queue_declare(queue, passive=True)
        return int(declared.method.message_count)
    finally:
        connection.close()


async def test_gateway_group_into_a_rabbitmq_queue_killed_halfway(tmp_path: Path) -> None:
    queue = f"migrate-dst-{uuid.uuid4().hex[:10]}"
    connection = await aio_pika.connect(URL)
    channel = await connection.channel()
    await channel.declare_queue(queue, durable=True)
    source = start_gateway(tmp_path / "a")
    total = 4000
    try:
        async with GatewayClient(source.target) as client:
            for start in range(0, total, 1000):
                await client.publish("orders", [f"m{start + i}".encode() for i in range(1000)],
                                     properties={"origin": "gateway"})
            async with client.consume("orders", "billing", policy="rocketmq",
                                      prefetch=10) as stream:
                for _ in range(10):
                    msg = await stream.next(10)
                    assert msg is not None
                    assert (await msg.fail(delay_level=18)).ok
        args = ["copy", "--from", f"gateway://{source.target}/orders?group=billing",
                "--to", f"{URL}?queue={queue}", "--batch", "100"]
        migrate_killed(args, lambda: _depth_now(queue) >= total // 2)
        done = migrate(*args)
        assert done.returncode == 0, done.stderr
        assert await _queue_depth(channel, queue) == total
        bodies: Counter[bytes] = Counter()
        counts: dict[bytes, object] = {}
        declared = await channel.declare_queue(queue, passive=True)
        while True:
            message = await declared.get(no_ack=True, fail=False)
            if message is None:
                break
            bodies[message.body] += 1
            counts[message.body] = (message.headers or {}).get("x-delivery-count")
            assert (message.headers or {})["origin"] == "gateway"
        assert bodies == Counter(f"m{i}".encode() for i in range(total))
        assert sum(1 for c in counts.values() if c == 1) == 10  # the retries' count
        for part in ("ready", "retry"):
            assert await read_part(source.target, "orders", "billing", part) == []
    finally:
        stop(source)
        await channel.queue_delete(queue)
        await channel.queue_delete(queue + ".migrate-ledger")
        await connection.close()


async def test_a_gateway_with_tokens_takes_an_admin_token_only(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text('[[principal]]\nname = "ops"\ntoken = "ops-secret-1"\nadmin = true\n\n'
                      '[[principal]]\nname = "app"\ntoken = "app-secret-2"\n'
                      'publish = ["*"]\nconsume = ["*"]\ngroups = ["*"]\n')
    (tmp_path / "ops").write_text("ops-secret-1\n")
    (tmp_path / "app").write_text("app-secret-2\n")
    queue = f"migrate-src-{uuid.uuid4().hex[:10]}"
    connection = await aio_pika.connect(URL)
    channel = await connection.channel()
    await channel.declare_queue(queue, durable=True)
    gateway = start_gateway(tmp_path / "auth", "--tokens-file", str(tokens))
    try:
        for i in range(20):
            await channel.default_exchange.publish(aio_pika.Message(f"t{i}".encode()), queue)
        args = ["copy", "--from", f"{URL}?queue={queue}",
                "--to", f"gateway://{gateway.target}/orders"]
        for refused in ([], ["--to-token-file", str(tmp_path / "app")]):
            result = migrate(*args, *refused)
            assert result.returncode == 4, result.stderr
            assert "secret" not in result.stderr
            assert await _queue_depth(channel, queue) == 20
        done = migrate(*args, "--to-token-file", str(tmp_path / "ops"))
        assert done.returncode == 0, done.stderr
        assert await _queue_depth(channel, queue) == 0
    finally:
        stop(gateway)
        await channel.queue_delete(queue)
        await connection.close()


async def test_identical_messages_without_ids_are_all_copied(tmp_path: Path) -> None:
    queue = f"migrate-src-{uuid.uuid4().hex[:10]}"
    connection = await aio_pika.connect(URL)
    channel = await connection.channel()
    await channel.declare_queue(queue, durable=True)
    gateway = start_gateway(tmp_path / "dest")
    try:
        for body in [b"same"] * 5 + [b"other"] * 2:
            await channel.default_exchange.publish(aio_pika.Message(body, headers={"h": 1}),
                                                   queue)
        done = migrate("copy", "--from", f"{URL}?queue={queue}",
                       "--to", f"gateway://{gateway.target}/orders")
        assert done.returncode == 0, done.stderr
        copies = await read_part(gateway.target, "orders", "check", "ready")
        assert Counter(m.body for m in copies) == {b"same": 5, b"other": 2}
    finally:
        stop(gateway)
        await channel.queue_delete(queue)
        await connection.close()
