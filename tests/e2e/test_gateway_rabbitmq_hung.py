"""`gateway serve --backend rabbitmq` on a private RabbitMQ node that stops answering (SIGSTOP:
hung, not gone) and later answers again. The connection stays open until heartbeats time out,
three minutes by default, and before, health said SERVING all that time while every publish
failed; now health goes NOT_SERVING within the probe's bounds and SERVING again by itself (and
/metrics' gateway_serving says the same: it had no such line), and every publish that got a
receipt is consumed afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amqp_node import AmqpNode

from gateway.client import GatewayClient

REPO = Path(__file__).resolve().parents[2]
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING

pytestmark = pytest.mark.slow


@pytest.fixture
def node(tmp_path: Path) -> Iterator[AmqpNode]:
    private = AmqpNode(tmp_path / "rabbit")
    private.start()
    try:
        yield private
    finally:
        with contextlib.suppress(ProcessLookupError):
            if private._process is not None:
                os.killpg(private._process.pid, signal.SIGCONT)
        private.stop()


@contextlib.contextmanager
def gateway(tmp_path: Path, url: str) -> Iterator[tuple[subprocess.Popen[bytes], str, str]]:
    log = tmp_path / "gateway.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(tmp_path / "data"),
             "--listen", "127.0.0.1:0", "--backend", "rabbitmq", "--rabbitmq-url", url,
             "--admin-listen", "127.0.0.1:0"],
            stderr=out, stdout=subprocess.DEVNULL, cwd=REPO,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
        )
    try:
        deadline = time.monotonic() + 60
        while not (match := re.search(r"gateway listening on ([^\s\"]+)", log.read_text())):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        metrics = re.search(r'"metrics": "([^"]+)"', log.read_text())
        assert metrics is not None, log.read_text()
        yield proc, match.group(1), metrics.group(1)
    finally:
        terminate(proc)


def terminate(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to a process still running, and SIGKILL if it has not ended within 60 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def serving_metric(metrics: str) -> str:
    """The `gateway_serving` sample's value as /metrics shows it."""
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as response:
        text = response.read().decode()
    found = re.search(r"^gateway_serving (\S+)$", text, re.MULTILINE)
    assert found is not None, "no gateway_serving in /metrics"
    return found.group(1)


async def status(stub: health_pb2_grpc.HealthStub) -> int:
    reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
    return int(reply.status)


async def until_status(stub: health_pb2_grpc.HealthStub, wanted: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while await status(stub) != wanted:
        assert time.monotonic() < deadline, f"health never became {wanted}"
        await asyncio.sleep(0.2)


async def test_a_hung_broker_is_not_serving_and_heals(tmp_path: Path, node: AmqpNode) -> None:
    assert node._process is not None
    topic = "hung.broker.orders"
    with gateway(tmp_path, node.url) as (proc, target, metrics):
        async with GatewayClient(target) as client:
            stub = health_pb2_grpc.HealthStub(client.channel)
            assert await status(stub) == SERVING
            assert serving_metric(metrics) == "1.0"
            confirmed = await client.publish(topic, [b"before%d" % i for i in range(10)])
            os.killpg(node._process.pid, signal.SIGSTOP)
            try:
                # Well inside the three minutes heartbeats would take.
                await until_status(stub, NOT_SERVING, 60)
                assert serving_metric(metrics) == "0.0"
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await asyncio.wait_for(client.publish(topic, [b"refused"]), 60)
                assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            finally:
                os.killpg(node._process.pid, signal.SIGCONT)
            await until_status(stub, SERVING, 60)
            assert serving_metric(metrics) == "1.0"
            confirmed += await client.publish(topic, [b"after%d" % i for i in range(10)])
            got: set[str] = set()
            async with client.consume(topic, "g", policy="rabbitmq", prefetch=50) as stream:
                while not set(confirmed) <= got:
                    message = await stream.next(30)
                    assert message is not None, f"missing {set(confirmed) - got}"
                    got.add(message.message_id)
                    assert (await message.ack()).ok
        assert proc.poll() is None
