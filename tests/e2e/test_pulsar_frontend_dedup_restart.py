"""Producer deduplication survives a restart of the gateway process: a producer that resends
with the same name and sequence ids after the gateway was killed (`kill -9`) and started again
is told its last stored sequence id and its resends are not stored twice."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Gateway:
    """`gateway serve --pulsar-listen` as a process, restartable on one data dir and port."""

    def __init__(self, data_dir: Path, log: Path) -> None:
        self.data_dir, self.log, self.port = data_dir, log, free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(self.data_dir),
                 "--listen", "127.0.0.1:0", "--pulsar-listen", f"127.0.0.1:{self.port}"],
                stdout=log, stderr=log,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise AssertionError("the Pulsar port did not open")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    instance = Gateway(tmp_path / "data", tmp_path / "gateway.log")
    instance.start()
    yield instance
    instance.stop()


def produce(url: str, batching: bool, sequence_ids: range) -> int:
    """Send `m{id}` with each sequence id; return the last stored sequence id the gateway
    announced when the producer connected."""
    client = pulsar.Client(url, operation_timeout_seconds=10, logger=QUIET)
    try:
        producer = client.create_producer(
            "dedup", producer_name="steady", batching_enabled=batching,
            batching_max_publish_delay_ms=5, send_timeout_millis=20_000,
        )
        last = int(producer.last_sequence_id())
        for sequence_id in sequence_ids:
            producer.send_async(f"m{sequence_id}".encode(), None, sequence_id=sequence_id)
        producer.flush()
        producer.close()
        return last
    finally:
        client.close()


def stored(url: str) -> list[bytes]:
    client = pulsar.Client(url, operation_timeout_seconds=10, logger=QUIET)
    try:
        consumer = client.subscribe("dedup", "audit",
                                    initial_position=pulsar.InitialPosition.Earliest)
        out = []
        while True:
            try:
                msg = consumer.receive(1000)
            except pulsar.Timeout:
                return out
            out.append(msg.data())
            consumer.acknowledge(msg)
    finally:
        client.close()


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
def test_resends_after_a_gateway_restart_are_not_stored_twice(
    gateway: Gateway, batching: bool
) -> None:
    assert produce(gateway.url, batching, range(0, 5)) == -1
    gateway.kill()
    gateway.start()
    # The same producer name resends 2..4 (as a client without their receipts would) and 5, 6.
    assert produce(gateway.url, batching, range(2, 7)) == 4
    gateway.stop()
    gateway.start()
    assert produce(gateway.url, batching, range(5, 8)) == 6
    assert stored(gateway.url) == [f"m{i}".encode() for i in range(8)]
