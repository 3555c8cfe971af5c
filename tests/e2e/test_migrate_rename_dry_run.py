"""`gateway migrate rename --dry-run` predicts the real run: with a message in flight with a
consumer it exits 7 with the count, as the real run does (it exited 0)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from migrate_procs import migrate, start_gateway, stop

from gateway.client import GatewayClient


async def test_a_rename_dry_run_predicts_the_exit_for_messages_in_flight(
    tmp_path: Path,
) -> None:
    topic, group = "persistent://public/default/orders", "sub"
    gateway = start_gateway(tmp_path / "data", scale=0.001)
    try:
        async with GatewayClient(gateway.target) as client:
            await client.publish(topic, [b"soon", b"later"])
            async with client.consume(topic, group, policy="pulsar", naming="pulsar-2.7",
                                      prefetch=10) as stream:
                for _ in range(2):
                    msg = await stream.next(10)
                    assert msg is not None
                    wait = 1_000 if msg.body == b"soon" else 3_600_000
                    assert (await msg.fail(delay_ms=wait)).ok
            # A consumer under the new scheme takes the retry that falls due, and holds it.
            async with client.consume(topic, group, policy="pulsar", naming="pulsar-2.9",
                                      prefetch=10) as stream:
                held = await stream.next(30)
                assert held is not None and held.body == b"soon"
                base = ["rename", "--topic", topic, "--group", group, "--from-scheme",
                        "pulsar-2.7", "--to-scheme", "pulsar-2.9", "--target", gateway.target]
                dry = await asyncio.to_thread(migrate, *base, "--dry-run")
                assert dry.returncode == 7, (dry.stdout, dry.stderr)
                assert "1 message(s) were in flight" in dry.stdout, dry.stdout
                counted = await asyncio.to_thread(migrate, *base, "--dry-run", "--json")
                assert counted.returncode == 7, counted.stderr
                assert json.loads(counted.stdout)["left"] == 1
                real = await asyncio.to_thread(migrate, *base)
                assert real.returncode == 7, (real.stdout, real.stderr)
                assert "1 message(s) were in flight" in real.stdout, real.stdout
                assert (await held.ack()).ok
    finally:
        stop(gateway)


async def test_a_rename_of_a_topic_the_gateway_does_not_hold_is_warned_about(
    tmp_path: Path,
) -> None:
    """A misspelt `--topic` moved nothing and said only "would move 0": now a warning names
    the topic and the close ones the gateway holds."""
    gateway = start_gateway(tmp_path / "data")
    try:
        async with GatewayClient(gateway.target) as client:
            await client.publish("orders", [b"x"])
        base = ["rename", "--group", "billing", "--from-scheme", "pulsar-2.7", "--to-scheme",
                "pulsar-2.9", "--target", gateway.target]
        for dry in (["--dry-run"], []):
            run = await asyncio.to_thread(migrate, *base, "--topic", "orderz", *dry)
            assert run.returncode == 0, run.stderr
            assert "no topic 'orderz' on this gateway (did you mean 'orders'?)" in run.stderr
        right = await asyncio.to_thread(migrate, *base, "--topic", "orders", "--dry-run")
        assert right.returncode == 0 and "warning" not in right.stderr, right.stderr
    finally:
        stop(gateway)
