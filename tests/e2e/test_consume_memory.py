"""A Consume stream whose client does not read holds its deliveries once, not twice.

Each stream may hold `--max-unacked-mb` (64 MiB) of bodies out. The stream's writer built every
delivery it was allowed into a response at once, so a client that did not read had each body
held by the engine and again by a response waiting for the writer: 4 such streams of 1 MiB
messages grew the gateway by 545 MB, where the bodies are 256 MiB. The writer now builds two
responses ahead at most (323 MB). Once the client reads, every delivery comes, in order.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from gateway.v1 import gateway_pb2 as pb
from gateway.v1 import gateway_pb2_grpc
from tests.console.gateway_proc import APP_TOKEN, Gateway, start, stop

pytestmark = pytest.mark.slow

META = [("authorization", f"Bearer {APP_TOKEN}")]
MESSAGES = 80
STREAMS = 4


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[Gateway]:
    running = start(tmp_path / "data", extra=("--time-scale", "1"))  # no deadline passes
    try:
        yield running
    finally:
        stop(running)


def rss_mb(gw: Gateway) -> int:
    found = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{gw.proc.pid}/status").read_text())
    assert found is not None
    return int(found.group(1)) // 1024


def test_streams_nobody_reads_hold_each_body_once(gw: Gateway) -> None:
    topic = f"mem-{uuid.uuid4().hex[:8]}"
    body = b"x" * (1 << 20)
    with grpc.insecure_channel(gw.target) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        for i in range(MESSAGES):
            stub.Publish(pb.PublishRequest(topic=topic, messages=[
                pb.Message(body=body, properties={"n": str(i)})]), metadata=META, timeout=30)
        before = rss_mb(gw)
        reading = threading.Event()

        def frames(group: str) -> Iterator[pb.ConsumeRequest]:
            yield pb.ConsumeRequest(subscribe=pb.Subscribe(topic=topic, group=group,
                                                           policy="rocketmq", prefetch=1000))
            reading.wait(120)

        calls = [stub.Consume(frames(f"g{i}"), metadata=META) for i in range(STREAMS)]
        try:
            peak = before
            for _ in range(16):
                time.sleep(0.5)
                peak = max(peak, rss_mb(gw))
            # Bodies alone: 64 MiB a stream. Built twice over, it was 545 MB.
            assert peak - before < 430, (before, peak)
            got: list[str] = []
            for answer in calls[0]:  # now read: 64 MiB of deliveries, in order
                if answer.WhichOneof("kind") == "deliveries":
                    got += [d.properties["n"] for d in answer.deliveries.deliveries]
                    if len(got) >= 64:
                        break
            assert got == [str(i) for i in range(64)]
        finally:
            reading.set()
            for call in calls:
                call.cancel()
