"""pulsar-client's log lines reach the gateway's log through a pipe, filtered natively at the
gateway's level (`adapters.pulsar.client_log`): handed a Python logger, the client called into
Python for every debug line, several per message."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pulsar
import pytest

from adapters.pulsar import client_log

ROOT = Path(__file__).resolve().parents[2]


def test_a_line_is_logged_at_its_own_level_as_the_python_logger_got_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("test.pulsar.client")
    with caplog.at_level(logging.DEBUG, logger="test.pulsar.client"):
        client_log.emit("2026-11-27 03:22:53.563 ERROR [140264706406080] ClientConnection:485 | "
                        "[<none> -> pulsar://127.0.0.1:1] Failed: Connection refused", logger)
        client_log.emit("2026-11-27 03:22:53.562 INFO  [1] ConnectionPool:148 | Created", logger)
        client_log.emit("2026-11-27 03:22:53.562 WARN  [1] ProducerImpl:9 | Slow", logger)
        client_log.emit("2026-11-27 03:22:53.562 DEBUG [1] ProducerImpl:1 | Sent", logger)
        client_log.emit("not the client's format", logger)
        client_log.emit("   ", logger)
    got = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert got == [
        (logging.ERROR, "[<none> -> pulsar://127.0.0.1:1] Failed: Connection refused"),
        (logging.INFO, "Created"),
        (logging.WARNING, "Slow"),
        (logging.DEBUG, "Sent"),
        (logging.INFO, "not the client's format"),
    ]


def test_the_native_level_follows_the_logger_and_debug_goes_through_python() -> None:
    logger = logging.getLogger("test.pulsar.levels")
    for level in (logging.INFO, logging.WARNING, logging.ERROR):
        logger.setLevel(level)
        assert isinstance(client_log.native_logger(logger), pulsar.FileLogger)
    logger.setLevel(logging.DEBUG)  # never debug lines through the pipe (see native_logger)
    assert client_log.native_logger(logger) is logger


PROBE = """
import logging, socket, sys, time
import pulsar
from adapters.pulsar import client_log

class Lines(logging.Handler):
    def emit(self, record):
        print(f"{record.name}|{record.levelno}|{record.getMessage()}", flush=True)

logging.getLogger("adapters.pulsar.client").addHandler(Lines())
logging.getLogger("adapters.pulsar.client").setLevel(logging.INFO)
with socket.socket() as sock:  # a port nobody listens on
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
client = pulsar.Client(f"pulsar://127.0.0.1:{port}", logger=client_log.native_logger(),
                       operation_timeout_seconds=1, connection_timeout_ms=200)
try:
    client.create_producer("nowhere")
except pulsar.PulsarException:
    pass
client.close()
time.sleep(1)  # the reading thread logs what is still in the pipe
"""


def test_the_clients_own_lines_come_out_through_the_gateway_logger() -> None:
    """In a process of its own: pulsar-client's logger is the process's, set by the first
    client made (in this test process, other tests' clients come first)."""
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=60, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    refused = [line for line in done.stdout.splitlines() if "Connection refused" in line]
    assert refused, done.stdout + done.stderr
    name, level, _ = refused[0].split("|", 2)
    assert name == "adapters.pulsar.client" and int(level) == logging.ERROR
    assert "Connection refused" not in done.stderr  # not the client's own console logger
