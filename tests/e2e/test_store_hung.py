"""The embedded store's writer process stops answering (SIGSTOP: a hung process, a disk that
never returns) under publish load, in a real `gateway serve`: the publishes waiting for it fail
with UNAVAILABLE instead of waiting for ever, health goes NOT_SERVING and then SERVING again
with a new writer, and every publish that got a receipt is consumed afterwards."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.client import GatewayClient
from tests.e2e.test_store_outage import (
    NOT_SERVING,
    SERVING,
    Consumer,
    Health,
    Load,
    gateway,
    writer_pid,
)

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


async def test_a_stopped_writer_is_replaced_and_nothing_confirmed_is_lost(
    tmp_path: Path,
) -> None:
    log = tmp_path / "gateway.log"
    stopped = 0
    try:
        with gateway(tmp_path / "data", log, "--commit-timeout-s", "2",
                     stop_s=90) as (proc, target):
            async with GatewayClient(target) as client:
                health = Health(target)
                load = Load(client, "hung")
                consumer = Consumer(client, "hung")
                try:
                    first = await health.becomes(SERVING, 0)
                    await load.until_confirmed(500)
                    stopped = writer_pid(proc.pid)
                    os.kill(stopped, signal.SIGSTOP)
                    # Before: every publish waited for ever and health stayed SERVING.
                    down = await health.becomes(NOT_SERVING, first + 1, timeout_s=60)
                    await health.becomes(SERVING, down + 1, timeout_s=60)
                    at_heal = len(load.confirmed)
                    await load.until_confirmed(at_heal + 500, timeout_s=60)
                finally:
                    await load.stop()
                    await health.close()
                assert load.refused > 0, "no publish was refused while the writer hung"
                assert proc.poll() is None, "the gateway exited"
                assert writer_pid(proc.pid) != stopped
                missing = await consumer.until_delivered(load.confirmed)
        assert not missing, f"{len(missing)} of {len(load.confirmed)} confirmed messages lost"
        assert proc.returncode == 0
        text = log.read_text()
        assert "committed nothing" in text and "embedded store recovered" in text
    finally:
        if stopped:  # never leave a stopped process behind, whatever happened
            with contextlib.suppress(ProcessLookupError):
                os.kill(stopped, signal.SIGKILL)


def test_a_commit_timeout_out_of_range_is_one_line_naming_it(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(tmp_path / "data"),
         "--listen", "127.0.0.1:0", "--commit-timeout-s", "0"],
        capture_output=True, text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
        timeout=60,
    )
    assert done.returncode == 2
    assert "commit_timeout_s=0.0 is not allowed: 1..3600 s" in done.stderr
    assert "Traceback" not in done.stderr
