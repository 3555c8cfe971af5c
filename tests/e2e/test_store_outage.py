"""The embedded store's writer is lost (kill -9) or its disk fills up under publish load, in a
real `gateway serve`: health goes NOT_SERVING and then SERVING again by itself, the gateway stays
up, and every publish that got a receipt, before or after the trouble, is consumed afterwards."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gateway.client import GatewayClient, Message

REPO = Path(__file__).resolve().parents[2]
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING

pytestmark = pytest.mark.slow


@contextlib.contextmanager
def gateway(
    data_dir: Path, log: Path, *args: str, stop_s: float = 30
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`gateway serve ARGS` on an ephemeral port; its log goes to a file (a pipe nobody reads
    could fill up and stall it). Stopped with SIGTERM at the end (killed after `stop_s`)."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(data_dir),
             "--listen", "127.0.0.1:0", "--log-level", "warning", *args],
            stderr=out, stdout=subprocess.DEVNULL, cwd=REPO,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
        )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            match = re.search(r"gateway listening on ([^\s\"]+)", log.read_text(errors="replace"))
            if match:
                break
            if proc.poll() is not None:
                raise AssertionError(f"gateway ended: {log.read_text(errors='replace')}")
            time.sleep(0.05)
        else:
            raise AssertionError("gateway did not start")
        yield proc, match.group(1)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(stop_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def writer_pid(gateway_pid: int) -> int:
    """The pid of the store's writer process, a child of the gateway."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if (int(fields[1]) == gateway_pid and fields[0] != "Z"
                and b"gateway.store.writer_proc" in cmdline):
            return int(entry.name)
    raise AssertionError("no writer process")


class Health:
    """The statuses the gateway's overall health check answered, one entry per change (asked
    every 10 ms: an outage of the store lasts longer than that)."""

    def __init__(self, target: str) -> None:
        self.seen: list[int] = []
        self._channel = grpc.aio.insecure_channel(target)
        self._task = asyncio.ensure_future(self._poll())

    async def _poll(self) -> None:
        stub = health_pb2_grpc.HealthStub(self._channel)
        while True:
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
            if self.seen[-1:] != [reply.status]:
                self.seen.append(reply.status)
            await asyncio.sleep(0.01)

    async def becomes(self, status: int, after: int, timeout_s: float = 30.0) -> int:
        """Wait until `status` is seen at an index from `after` on; return that index."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for i in range(after, len(self.seen)):
                if self.seen[i] == status:
                    return i
            await asyncio.sleep(0.01)
        raise AssertionError(f"health never became {status} after {after}: {self.seen}")

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
            await self._task
        await self._channel.close()


class Load:
    """Publishers that keep publishing; what got a receipt is `confirmed`. UNAVAILABLE is
    expected while the store is down: the publisher tries again a moment later."""

    def __init__(self, client: GatewayClient, topic: str, publishers: int = 4,
                 body_bytes: int = 256) -> None:
        self.confirmed: set[str] = set()
        self.refused = 0
        self.body = b"x" * body_bytes
        self._client = client
        self._topic = topic
        self._stop = asyncio.Event()
        self._tasks = [asyncio.ensure_future(self._run(n)) for n in range(publishers)]

    async def _run(self, n: int) -> None:
        i = 0
        while not self._stop.is_set():
            i += 1
            try:
                ids = await self._client.publish(
                    self._topic, [self.body + f"{n}-{i}-{j}".encode() for j in range(10)]
                )
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc
                self.refused += 1
                await asyncio.sleep(0.02)
                continue
            self.confirmed.update(ids)

    async def until_confirmed(self, count: int, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.confirmed) < count:
            assert time.monotonic() < deadline, f"only {len(self.confirmed)} confirmed"
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)


class Consumer:
    """A consumer that acks what it gets, from before the trouble until every id in `wanted`
    was delivered (those in `twice`: twice), or time is up; `deliveries` counts them per id.
    The first `hold` deliveries it keeps unsettled in `held` (in flight at the trouble)."""

    def __init__(self, client: GatewayClient, topic: str, hold: int = 0) -> None:
        self.deliveries: collections.Counter[str] = collections.Counter()
        self.held: list[Message] = []
        self._hold = hold
        self._wanted: set[str] | None = None
        self._twice: set[str] = set()
        self._client = client
        self._topic = topic
        self._task = asyncio.ensure_future(self._run())

    def _done(self) -> bool:
        if self._wanted is None:
            return False
        got = self.deliveries
        return all(got[i] for i in self._wanted) and all(got[i] >= 2 for i in self._twice)

    async def _run(self) -> None:
        stream = self._client.consume(self._topic, "g", policy="rocketmq", prefetch=256)
        async with stream:
            while not self._done():
                msg = await stream.next(0.2)
                if msg is None:
                    continue
                self.deliveries[msg.message_id] += 1
                if len(self.held) < self._hold:
                    self.held.append(msg)
                else:
                    msg.ack_quietly()

    async def holding(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.held) < self._hold:
            assert time.monotonic() < deadline, f"holds only {len(self.held)}"
            await asyncio.sleep(0.01)

    async def until_delivered(self, wanted: set[str], twice: frozenset[str] = frozenset(),
                              timeout_s: float = 60.0) -> set[str]:
        """Wait until every id in `wanted` was delivered (and those in `twice` twice); return
        those that were not."""
        self._wanted, self._twice = set(wanted), set(twice)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._task), timeout_s)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        got = self.deliveries
        return {i for i in wanted if not got[i]} | {i for i in twice if got[i] < 2}


async def test_a_killed_writer_under_load_heals_by_itself_and_loses_nothing(
    tmp_path: Path,
) -> None:
    log = tmp_path / "gateway.log"
    with gateway(tmp_path / "data", log) as (proc, target):
        async with GatewayClient(target) as client:
            health = Health(target)
            load = Load(client, "heal")
            consumer = Consumer(client, "heal", hold=50)  # in flight when the writer dies
            try:
                first = await health.becomes(SERVING, 0)
                await load.until_confirmed(500)
                await consumer.holding()
                old = writer_pid(proc.pid)
                os.kill(old, signal.SIGKILL)
                down = await health.becomes(NOT_SERVING, first + 1)
                await health.becomes(SERVING, down + 1)
                at_heal = len(load.confirmed)
                await load.until_confirmed(at_heal + 500)  # publishing works again
            finally:
                await load.stop()
                await health.close()
            assert proc.poll() is None, "the gateway exited"
            assert writer_pid(proc.pid) != old
            # Deliveries from before the loss are void: a clear answer, and they come again.
            for msg in consumer.held:
                result = await msg.ack()
                assert (result.ok, result.error_code) == (False, "FAILED_PRECONDITION")
            held = frozenset(msg.message_id for msg in consumer.held)
            missing = await consumer.until_delivered(load.confirmed, twice=held)
    assert not missing, f"{len(missing)} of {len(load.confirmed)} confirmed messages lost"
    assert proc.returncode == 0
    assert "embedded store recovered" in log.read_text()


def failed_commits(log: Path) -> int:
    """How many commits the gateway's log says failed."""
    lines = log.read_text(errors="replace").splitlines()
    return sum(str(json.loads(line).get("event", "")).startswith("embedded store commit failed")
               for line in lines if line.startswith("{"))


@contextlib.contextmanager
def small_filesystem(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `where` (needs root and mount rights)."""
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem for the disk-full test needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs for the disk-full test: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(path: Path) -> None:
    """Write zeros to `path` until the filesystem is full."""
    block = b"\0" * (64 << 10)
    with path.open("wb", buffering=0) as out:
        while True:
            try:
                out.write(block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
    # And the last bytes, fewer than a block.
    with path.open("ab", buffering=0) as out, contextlib.suppress(OSError):
        while out.write(b"\0" * 512):
            pass


async def test_a_full_disk_fails_publishes_and_the_store_heals_once_space_is_back(
    tmp_path: Path,
) -> None:
    with small_filesystem(tmp_path / "small", "24m") as small:
        log = tmp_path / "gateway.log"
        with gateway(small / "data", log) as (proc, target):
            async with GatewayClient(target) as client:
                health = Health(target)
                load = Load(client, "full", publishers=2, body_bytes=8192)
                consumer = Consumer(client, "full")
                try:
                    first = await health.becomes(SERVING, 0)
                    await load.until_confirmed(200)
                    fill(small / "filler")
                    # Full for a while: the store fails, restarts its writer, fails again...
                    deadline = time.monotonic() + 30
                    while failed_commits(log) < 3:
                        assert time.monotonic() < deadline, "publishes kept succeeding"
                        await asyncio.sleep(0.01)
                    await health.becomes(NOT_SERVING, first + 1)
                    assert proc.poll() is None
                    (small / "filler").unlink()  # the space is back
                    at_free = len(load.confirmed)
                    await load.until_confirmed(at_free + 300)
                    await health.becomes(SERVING, len(health.seen) - 1)
                finally:
                    await load.stop()
                    await health.close()
                assert proc.poll() is None, "the gateway exited"
                missing = await consumer.until_delivered(load.confirmed)
        assert not missing, f"{len(missing)} of {len(load.confirmed)} confirmed messages lost"
        assert proc.returncode == 0
