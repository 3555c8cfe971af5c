"""SIGTERM drain of a gateway with consumers mid-stream, and the Prometheus endpoint."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gateway.client import GatewayClient
from gateway.server.app import running_gateway


def start(data: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(data), "--listen",
         "127.0.0.1:0", "--log-level", "warning", *extra],
        stderr=subprocess.PIPE, text=True,
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        match = re.search(r"gateway listening on ([^\s\"]+)", proc.stderr.readline())
        if match:
            return proc, match.group(1)
    proc.kill()
    raise AssertionError("gateway did not start")


async def health(target: str) -> int:
    async with grpc.aio.insecure_channel(target) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="gateway.v1.Gateway"), timeout=2)
        return int(reply.status)


async def test_sigterm_drains_in_flight_settles(tmp_path: Path) -> None:
    data = tmp_path / "data"
    proc, target = start(data, "--grace-s", "10")
    try:
        async with GatewayClient(target) as client:
            ids = await client.publish("drain", [f"m{i}".encode() for i in range(20)])
            async with client.consume("drain", "g", policy="rocketmq", prefetch=10) as stream:
                held = []
                while len(held) < 10:
                    msg = await stream.next(5)
                    assert msg is not None
                    held.append(msg)
                assert await health(target) == health_pb2.HealthCheckResponse.SERVING
                proc.send_signal(signal.SIGTERM)
                # Readiness flips first.
                flipped = False
                for _ in range(50):
                    if await health(target) == health_pb2.HealthCheckResponse.NOT_SERVING:
                        flipped = True
                        break
                    await asyncio.sleep(0.05)
                assert flipped
                # No new deliveries, but in-flight settles are honoured.
                for msg in held:
                    assert (await msg.ack()).ok
                assert await stream.next(0.3) is None
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    acked = {m.message_id for m in held}
    proc, target = start(data)
    try:
        async with (
            GatewayClient(target) as client,
            client.consume("drain", "g", policy="rocketmq", prefetch=50) as stream,
        ):
            rest = set()
            while len(rest) < 10:
                msg = await stream.next(10)
                assert msg is not None
                rest.add(msg.message_id)
                assert (await msg.ack()).ok
            assert await stream.next(0.5) is None
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert rest == set(ids) - acked


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def total(metrics: dict[str, float], prefix: str) -> float:
    return sum(v for k, v in metrics.items() if k.startswith(prefix))


async def test_metrics_move_as_messages_retry_and_dead_letter(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data", time_scale=0.01,
                               admin_listen="127.0.0.1:0") as app:
        port = app.metrics_port
        before = scrape(port)
        assert total(before, "gateway_deliveries_total") == 0
        async with GatewayClient(f"127.0.0.1:{app.grpc_port}") as client:
            await client.publish("m", [b"x"])
            async with client.consume("m", "g", policy="rocketmq",
                                      options={"max_retries": "2"}) as stream:
                for _ in range(3):
                    msg = await stream.next(5)
                    assert msg is not None
                    assert (await msg.fail()).ok
                assert await stream.next(0.3) is None
        after = scrape(port)
        assert total(after, 'gateway_deliveries_total{group="g"') == 3
        assert after['gateway_retries_total{attempt="1",policy="rocketmq"}'] == 1
        assert after['gateway_retries_total{attempt="2",policy="rocketmq"}'] == 1
        assert after['gateway_dead_letters_total{group="g",topic="m"}'] == 1
        assert total(after, "gateway_request_seconds_count") >= 1
        assert after["gateway_inflight"] == 0
        assert after["gateway_store_bytes"] > 0


async def test_metrics_count_every_delivery_and_ack_of_a_batch(tmp_path: Path) -> None:
    """Deliveries and compact acks are counted per batch: every message still counts once."""
    async with running_gateway(tmp_path / "data", time_scale=0.01,
                               admin_listen="127.0.0.1:0") as app:
        async with GatewayClient(f"127.0.0.1:{app.grpc_port}") as client:
            await client.publish("b", [b"m%d" % i for i in range(50)])
            async with client.consume("b", "g", policy="rocketmq", prefetch=50) as stream:
                for _ in range(50):
                    msg = await stream.next(5)
                    assert msg is not None
                    msg.ack_quietly()
                await stream.drain()
                assert stream.failures == []
        after = scrape(app.metrics_port)
        assert total(after, 'gateway_deliveries_total{group="g"') == 50
        assert total(after, 'gateway_settlements_total{outcome="ack"') == 50
