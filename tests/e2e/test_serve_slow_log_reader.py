"""A log reader that stops reading does not stop the gateway.

`gateway serve` wrote each log line from the event loop. Once its reader stopped reading (a
stalled log collector, `serve 2>&1 | slow`), the pipe filled and the next line's write blocked
the event loop: every client waited until the reader came back. Lines are now written by a
thread of their own; past 10,000 waiting they are dropped and counted.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import grpc

from gateway.v1 import gateway_pb2 as pb
from gateway.v1 import gateway_pb2_grpc

REPO = Path(__file__).resolve().parents[2]


def test_a_full_log_pipe_does_not_stop_serving(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--listen", "127.0.0.1:0",
         "--data-dir", str(tmp_path / "data"), "--log-level", "debug"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.stderr is not None
    try:
        target = ""
        for raw in proc.stderr:  # read up to the address, then stop reading
            found = re.search(rb'"listen": "(127\.0\.0\.1:\d+)"', raw)
            if found and b"gateway listening" in raw:
                target = found.group(1).decode()
                break
        assert target, "the gateway did not say where it listens"
        with grpc.insecure_channel(target) as channel:
            stub = gateway_pb2_grpc.GatewayStub(channel)
            # Each message logs a few debug lines of about 250 bytes: far past a pipe's 64 KiB.
            for _ in range(20):
                stub.Publish(pb.PublishRequest(topic="t", messages=[
                    pb.Message(body=b"m")] * 100), timeout=10)
            left = 2000
            while left:
                got = stub.Receive(pb.ReceiveRequest(
                    topic="t", group="g", policy="rocketmq-simple", max_messages=32,
                    invisible_ms=60_000, wait_ms=1000), timeout=10).deliveries
                assert got, f"{left} messages not received"
                stub.Settle(pb.SettleRequest(settlements=[
                    pb.Settlement(receipt=d.receipt, ack=pb.Ack()) for d in got]), timeout=10)
                left -= len(got)
            health = stub.Publish(pb.PublishRequest(topic="t", messages=[pb.Message(body=b"x")]),
                                  timeout=10)
            assert len(health.message_ids) == 1
        rest: list[bytes] = []
        reader = threading.Thread(target=lambda: rest.append(proc.stderr.read()))  # type: ignore[union-attr]
        reader.start()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        reader.join(30)
        assert b"gateway stopped" in rest[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
