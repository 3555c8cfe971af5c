"""A real `gateway serve` process with tokens, telemetry and the console, and small clients
that publish and consume as a principal (bearer token), for the console and CLI tests."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc

from gateway.v1 import gateway_pb2 as pb
from gateway.v1 import gateway_pb2_grpc

ADMIN_TOKEN = "ops-token-5c1f"
APP_TOKEN = "app-token-9a2e"
TOKENS = f"""
[[principal]]
name = "ops"
token = "{ADMIN_TOKEN}"
admin = true

[[principal]]
name = "app"
token = "{APP_TOKEN}"
publish = ["*"]
consume = ["*"]
groups = ["*"]
"""


@dataclass
class Gateway:
    proc: subprocess.Popen[str]
    target: str
    console: str
    """The console's base URL, `http://127.0.0.1:PORT`."""
    log: Path

    def channel(self) -> grpc.Channel:
        return grpc.insecure_channel(self.target)


def start(data_dir: Path, *, tokens: bool = True, extra: tuple[str, ...] = ()) -> Gateway:
    data_dir.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(data_dir),
            "--listen", "127.0.0.1:0", "--console-listen", "127.0.0.1:0", "--telemetry",
            "--time-scale", "0.001", "--log-level", "warning", "--grace-s", "1", *extra]
    if tokens:
        path = data_dir.parent / f"{data_dir.name}-tokens.toml"
        path.write_text(TOKENS)
        args += ["--tokens-file", str(path)]
    log = data_dir.parent / f"{data_dir.name}.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(log, "w") as sink:
        proc = subprocess.Popen(args, stdout=sink, stderr=subprocess.STDOUT, text=True, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        text = log.read_text()
        grpc_at = re.search(r"gateway listening on ([^\s\"]+)", text)
        console_at = re.search(r"gateway console on (http[^\s\"]+?)/?\"", text)
        if grpc_at and console_at:
            return Gateway(proc, grpc_at.group(1), console_at.group(1), log)
        if proc.poll() is not None:
            raise RuntimeError(f"gateway exited {proc.returncode}:\n{text}")
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"gateway did not start:\n{log.read_text()}")


def stop(gateway: Gateway) -> None:
    gateway.proc.terminate()
    try:
        gateway.proc.wait(20)
    except subprocess.TimeoutExpired:
        gateway.proc.kill()
        gateway.proc.wait(10)


@contextlib.contextmanager
def running(data_dir: Path, **kw: object) -> Iterator[Gateway]:
    gw = start(data_dir, **kw)  # type: ignore[arg-type]
    try:
        yield gw
    finally:
        stop(gw)


def _meta(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")] if token else []


def publish(gw: Gateway, topic: str, messages: list[tuple[bytes, dict[str, str]]],
            token: str = APP_TOKEN) -> list[str]:
    with gw.channel() as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        response = stub.Publish(pb.PublishRequest(topic=topic, messages=[
            pb.Message(body=body, properties=props) for body, props in messages]),
            metadata=_meta(token), timeout=30)
        return list(response.message_ids)


class Consumer:
    """A push consumer over a Consume stream, settling as it is told."""

    def __init__(self, gw: Gateway, topic: str, group: str, options: dict[str, str],
                 token: str = APP_TOKEN) -> None:
        self._channel = gw.channel()
        self._out: queue.Queue[pb.ConsumeRequest | None] = queue.Queue()
        self._out.put(pb.ConsumeRequest(subscribe=pb.Subscribe(
            topic=topic, group=group, policy="rocketmq", policy_options=options, prefetch=64)))
        stub = gateway_pb2_grpc.GatewayStub(self._channel)
        self._responses = stub.Consume(iter(self._out.get, None), metadata=_meta(token))
        self.deliveries: queue.Queue[pb.Delivery] = queue.Queue()
        self._sent = 0
        self._answered = 0
        self._answers = threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        with contextlib.suppress(grpc.RpcError):
            for response in self._responses:
                kind = response.WhichOneof("kind")
                if kind == "deliveries":
                    for d in response.deliveries.deliveries:
                        self.deliveries.put(d)
                elif kind == "results":
                    with self._answers:
                        self._answered += 1
                        self._answers.notify_all()

    def next(self, timeout_s: float = 20.0) -> pb.Delivery:
        return self.deliveries.get(timeout=timeout_s)

    def fail(self, d: pb.Delivery, reason: str, delay_level: int | None = None) -> None:
        fail = pb.Fail(reason=reason)
        if delay_level is not None:
            fail.delay_level = delay_level
        self._settle(pb.Settlement(receipt=d.receipt, fail=fail))

    def ack(self, d: pb.Delivery) -> None:
        self._settle(pb.Settlement(receipt=d.receipt, ack=pb.Ack()))

    def _settle(self, s: pb.Settlement) -> None:
        self._sent += 1
        self._out.put(pb.ConsumeRequest(settle=pb.SettleBatch(settlements=[s], credit=1)))

    def close(self) -> None:
        """End the stream once every settlement sent was answered."""
        with self._answers:
            self._answers.wait_for(lambda: self._answered >= self._sent, timeout=20)
        self._out.put(None)
        self._thread.join(10)
        self._responses.cancel()
        self._channel.close()


def fill_dead_letters(gw: Gateway, topic: str, group: str,
                      messages: list[tuple[bytes, dict[str, str]]], max_retries: int = 2,
                      reason: str = "payment service said no") -> list[str]:
    """Publish `messages` and fail every delivery until each is dead-lettered."""
    ids = publish(gw, topic, messages)
    consumer = Consumer(gw, topic, group, {"max_retries": str(max_retries)})
    try:
        for _ in range(len(ids) * (max_retries + 1)):
            consumer.fail(consumer.next(), reason)
    finally:
        consumer.close()
    return ids
