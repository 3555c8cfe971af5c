"""pulsar-client's log lines reach the gateway's log through a pipe, filtered natively at the
gateway's level (`adapters.pulsar.client_log`): handed a Python logger, the client called into
Python for every debug line, several per message."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
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


def test_the_client_never_gets_a_python_logger_at_any_level() -> None:
    """Before, at debug the client was handed the Python logger, which it may call while the
    interpreter ends, aborting the process (apache/pulsar-client-python issue 256)."""
    logger = logging.getLogger("test.pulsar.levels")
    for level in (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR):
        logger.setLevel(level)
        handed = client_log.native_logger(logger)
        assert isinstance(handed, pulsar.FileLogger), (level, handed)
        assert not isinstance(handed, logging.Logger)


PROBE = """
import logging, socket, sys, time
import pulsar
from adapters.pulsar import client_log

class Lines(logging.Handler):
    def emit(self, record):
        print(f"{record.name}|{record.levelno}|{record.getMessage()}", flush=True)

logging.getLogger("adapters.pulsar.client").addHandler(Lines())
logging.getLogger("adapters.pulsar.client").setLevel(int(sys.argv[1]))
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


def probe(level: int) -> subprocess.CompletedProcess[str]:
    """In a process of its own: pulsar-client's logger is the process's, set by the first
    client made (in this test process, other tests' clients come first)."""
    return subprocess.run([sys.executable, "-c", PROBE, str(level)], capture_output=True,
                          text=True, timeout=60, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)


@pytest.mark.parametrize("level", [logging.INFO, logging.DEBUG])
def test_the_clients_own_lines_come_out_through_the_gateway_logger(level: int) -> None:
    done = probe(level)
    assert done.returncode == 0, done.stderr
    refused = [line for line in done.stdout.splitlines() if "Connection refused" in line]
    assert refused, done.stdout + done.stderr
    name, level, _ = refused[0].split("|", 2)
    assert name == "adapters.pulsar.client" and int(level) == logging.ERROR
    assert "Connection refused" not in done.stderr  # not the client's own console logger
    if level == logging.DEBUG:  # the client's debug lines too, at debug
        debug = [line for line in done.stdout.splitlines()
                 if line.startswith(f"adapters.pulsar.client|{logging.DEBUG}|")]
        assert debug, done.stdout
    assert not done.stderr.strip(), done.stderr


def test_the_debug_file_is_followed_and_what_was_read_given_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """At debug the client writes into a deleted file that a thread follows: its lines come
    out, and the disk space of what was read is given back (the file would grow for as long
    as the gateway runs at debug)."""
    path = client_log._followed_file()
    line = b"2026-11-27 03:22:53.562 DEBUG [1] ProducerImpl:1 | Sent %d\n"
    with caplog.at_level(logging.DEBUG, logger="adapters.pulsar.client"), open(path, "ab") as f:
        for i in range(20_000):
            f.write(line % i)
        f.flush()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(
                r.getMessage() == "Sent 19999" for r in caplog.records):
            time.sleep(0.05)
        sent = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Sent ")]
        assert sent[-20_000:] == [f"Sent {i}" for i in range(20_000)]
        written = os.fstat(f.fileno())
    assert written.st_size >= 1_000_000
    assert written.st_blocks * 512 < 256 * 1024, written
