"""Signals an operator or a terminal sends to `gateway serve`: SIGHUP (a closed terminal hangs up
the whole process group, the gateway and its store writer) drains and stops the gateway like
SIGTERM, exit status 0, and everything published before is there after a restart. Before, its
default action killed the gateway at once, with no drain and no line in the log."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gateway.client import GatewayClient
from tests.e2e.test_store_hung import gateway

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def started(proc: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        match = re.search(r"gateway listening on ([^\s\"]+)", log.read_text(errors="replace"))
        if match:
            return match.group(1)
        assert proc.poll() is None, log.read_text(errors="replace")
        time.sleep(0.05)
    raise AssertionError("gateway did not start")


async def test_sighup_to_the_process_group_drains_and_loses_nothing(tmp_path: Path) -> None:
    log = tmp_path / "gateway.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(tmp_path / "data"),
             "--listen", "127.0.0.1:0", "--grace-s", "1"],
            stderr=out, stdout=subprocess.DEVNULL, cwd=REPO, start_new_session=True,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
        )
    try:
        target = started(proc, log)
        async with GatewayClient(target) as client:
            ids = await client.publish("hup", [b"m%d" % i for i in range(100)])
        os.killpg(proc.pid, signal.SIGHUP)  # as a terminal's hangup: every process in it
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert '"signal": "SIGHUP"' in text and "gateway stopped" in text
    with gateway(tmp_path / "data", tmp_path / "again.log") as (_, target):
        async with GatewayClient(target) as client:
            got = await client.receive("hup", "g", policy="rocketmq", max_messages=100,
                                       wait_ms=5000)
    assert sorted(m.message_id for m in got) == sorted(ids)


def test_sigterm_while_the_back_end_does_not_answer_at_start_ends_the_gateway(
    tmp_path: Path,
) -> None:
    """A broker that accepts the connection and says nothing holds start-up until the connect
    timeout; SIGTERM meanwhile ends the gateway (status 0, said in the log) instead of being
    ignored until start-up fails on its own."""
    log = tmp_path / "gateway.log"
    with socket.create_server(("127.0.0.1", 0)) as silent, log.open("wb") as out:
        port = silent.getsockname()[1]
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(tmp_path / "data"),
             "--listen", "127.0.0.1:0", "--backend", "rabbitmq",
             "--rabbitmq-url", f"amqp://guest:guest@127.0.0.1:{port}/"],
            stderr=out, stdout=subprocess.DEVNULL, cwd=REPO,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
        )
        try:
            silent.settimeout(60)
            connection, _ = silent.accept()  # the gateway is inside start-up now
            with connection:
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(60) == 0, log.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = log.read_text()
    assert "gateway stopped before it started" in text
    assert "Traceback" not in text


def writers_of(data_dir: Path) -> set[int]:
    """Pids of the store writer processes running on `data_dir`."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if b"gateway.store.writer_proc" in cmdline and str(data_dir).encode() in cmdline \
                    and state != "Z":
                pids.add(int(entry.name))
    return pids


def test_sigterm_while_waiting_for_a_locked_data_dir_leaves_no_writer(tmp_path: Path) -> None:
    """A second gateway on a data directory another one serves waits for its lock; SIGTERM then
    ends it at once (status 0) and its own writer process with it, instead of both waiting out
    the lock."""
    data = tmp_path / "data"
    with gateway(data, tmp_path / "first.log") as (first, _):
        serving = writers_of(data)
        assert len(serving) == 1
        log = tmp_path / "second.log"
        with log.open("wb") as out:
            second = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(data),
                 "--listen", "127.0.0.1:0"],
                stderr=out, stdout=subprocess.DEVNULL, cwd=REPO,
                env=dict(os.environ, PYTHONPATH=str(REPO)),
            )
        try:
            deadline = time.monotonic() + 30
            while len(writers_of(data)) < 2:  # its writer waits for the lock now
                assert time.monotonic() < deadline and second.poll() is None, log.read_text()
                time.sleep(0.02)
            second.send_signal(signal.SIGTERM)
            assert second.wait(60) == 0, log.read_text()
        finally:
            if second.poll() is None:
                second.kill()
                second.wait()
        assert writers_of(data) == serving
        assert first.poll() is None
    assert "gateway stopped before it started" in log.read_text()
