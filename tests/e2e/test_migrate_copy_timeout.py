"""`migrate copy --timeout-s` bounds a broker side's connect too: a Pulsar source on a port
where nothing answers took the client's own 30 s, and a RabbitMQ one that accepts the connection
and never speaks its fixed 10 s, whatever --timeout-s said. Each now gives up after --timeout-s,
exit status 5 (the source cannot be reached)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GIVE_UP_S = 8
"""Well past --timeout-s 1, well short of the 10 s and 30 s it took."""


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never says a word."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()


def copy_from(source: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [sys.executable, "-m", "gateway.cli", "migrate", "copy", "--from", source,
             "--to", "gateway://127.0.0.1:1/t?group=g", "--timeout-s", "1"],
            capture_output=True, text=True, timeout=GIVE_UP_S,
            env=dict(os.environ, PYTHONPATH=str(REPO)))
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still trying after {GIVE_UP_S} s with --timeout-s 1") from None


@pytest.mark.parametrize("scheme", ["pulsar", "amqp"])
def test_a_silent_broker_source_gives_up_after_the_timeout(scheme: str, silent_port: int) -> None:
    query = "subscription=s" if scheme == "pulsar" else "queue=q"
    done = copy_from(f"{scheme}://127.0.0.1:{silent_port}/t?{query}")
    assert done.returncode == 5, done.stderr
    assert "Traceback" not in done.stderr
    assert f"source {scheme}://127.0.0.1:{silent_port}" in done.stderr
