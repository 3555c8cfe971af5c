"""kill -9 the gateway mid-consumption: nothing published is lost, pending retries still fire."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from gateway.client import GatewayClient

SCALE = 0.2
"""RocketMQ's first retry waits 10 s of policy time: 2 s here."""


def start_gateway(data_dir: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(data_dir),
         "--listen", "127.0.0.1:0", "--time-scale", str(SCALE), "--log-level", "warning"],
        stderr=subprocess.PIPE, text=True,
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        match = re.search(r"gateway listening on ([^\s\"]+)", line)
        if match:
            return proc, match.group(1)
    proc.kill()
    raise AssertionError("gateway did not start")


async def test_kill_9_loses_nothing_and_retries_fire(tmp_path: Path) -> None:
    data = tmp_path / "data"
    proc, target = start_gateway(data)
    published: set[str] = set()
    acked: set[str] = set()
    failed_at: dict[str, float] = {}
    try:
        async with GatewayClient(target) as client:
            for i in range(10):
                ids = await client.publish("crash", [f"m{i}-{j}".encode() for j in range(50)])
                published.update(ids)
            async with client.consume("crash", "g", policy="rocketmq", prefetch=200) as stream:
                taken = 0
                while taken < 150:
                    msg = await stream.next(5)
                    assert msg is not None
                    taken += 1
                    if taken <= 60:
                        assert (await msg.ack()).ok
                        acked.add(msg.message_id)
                    elif taken <= 70:
                        assert (await msg.fail()).ok
                        failed_at[msg.message_id] = time.time()
                # 80 more are in flight, unsettled, when the gateway dies.
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(published) == 500

    proc, target = start_gateway(data)
    seen: dict[str, float] = {}
    try:
        async with (
            GatewayClient(target) as client,
            client.consume("crash", "g", policy="rocketmq", prefetch=500) as stream,
        ):
            deadline = time.monotonic() + 30
            while len(seen) < len(published) - len(acked) and time.monotonic() < deadline:
                msg = await stream.next(max(0.1, deadline - time.monotonic()))
                if msg is None:
                    break
                seen.setdefault(msg.message_id, time.time())
                assert (await msg.ack()).ok
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    missing = published - acked - set(seen)
    assert not missing, f"{len(missing)} published messages never delivered again"
    assert set(failed_at) <= set(seen)
    for message_id, when in failed_at.items():
        lateness = seen[message_id] - (when + 10 * SCALE)
        # Not before its retry time; not long after it either (restart included).
        assert -0.3 <= lateness < 15, (message_id, lateness)


def test_sigterm_exits_zero(tmp_path: Path) -> None:
    proc, _ = start_gateway(tmp_path / "data")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
