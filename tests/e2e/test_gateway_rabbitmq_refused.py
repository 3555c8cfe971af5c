"""`gateway serve --backend rabbitmq` whose credentials stop working while it serves (the user's
password changed on a private RabbitMQ node, its connections closed): the reconnect is refused
(ACCESS_REFUSED), which no further attempt with these credentials cures, so the gateway exits with
status 75 (EX_TEMPFAIL) in one line naming the URL without its password, for its supervisor to
start it again with the credentials of now (a rotated Secret). Before, it tried again every second
for ever, NOT_SERVING, three log lines each time."""

from __future__ import annotations

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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amqp_node import AmqpNode

REPO = Path(__file__).resolve().parents[2]
EX_TEMPFAIL = 75

pytestmark = pytest.mark.slow


@pytest.fixture
def node(tmp_path: Path) -> Iterator[AmqpNode]:
    private = AmqpNode(tmp_path / "rabbit")
    private.start()
    try:
        yield private
    finally:
        private.stop()


def ctl(node: AmqpNode, *args: str) -> None:
    done = node.ctl(*args)
    assert done.returncode == 0, done.stdout + done.stderr


def test_credentials_refused_on_a_reconnect_exit_75(tmp_path: Path, node: AmqpNode) -> None:
    ctl(node, "add_user", "gw", "first-pw")
    ctl(node, "set_permissions", "-p", "/", "gw", ".*", ".*", ".*")
    log = tmp_path / "gateway.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(tmp_path / "data"),
             "--listen", "127.0.0.1:0", "--backend", "rabbitmq",
             "--rabbitmq-url", f"amqp://gw:first-pw@127.0.0.1:{node.port}/"],
            stderr=out, stdout=subprocess.DEVNULL, cwd=REPO,
            env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        deadline = time.monotonic() + 60
        while not re.search(r"gateway listening on", log.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        ctl(node, "change_password", "gw", "second-pw")
        ctl(node, "close_all_connections", "password changed")
        assert proc.wait(60) == EX_TEMPFAIL, log.read_text()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    text = log.read_text()
    exiting = [line for line in text.splitlines() if "exiting with status 75" in line]
    assert len(exiting) == 1, text
    assert (f"cannot connect to RabbitMQ at amqp://gw:***@127.0.0.1:{node.port}/: RabbitMQ "
            "refused the user's credentials (ACCESS_REFUSED" in exiting[0]), text
    assert "first-pw" not in text and "second-pw" not in text and "Traceback" not in text


def test_a_virtual_host_refused_on_a_reconnect_is_tried_again(tmp_path: Path,
                                                               node: AmqpNode) -> None:
    """Unlike credentials: RabbitMQ refuses a virtual host that is restarting ("vhost is down")
    too. Deleted under the gateway, it is refused on every attempt, each said in one line, with
    health NOT_SERVING; created again, the gateway serves again by itself."""
    ctl(node, "add_vhost", "gwv")
    ctl(node, "set_permissions", "-p", "gwv", "guest", ".*", ".*", ".*")
    log = tmp_path / "gateway.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(tmp_path / "data"),
             "--listen", "127.0.0.1:0", "--backend", "rabbitmq",
             "--rabbitmq-url", f"amqp://guest:guest@127.0.0.1:{node.port}/gwv"],
            stderr=out, stdout=subprocess.DEVNULL, cwd=REPO,
            env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        deadline = time.monotonic() + 60
        while not (match := re.search(r"gateway listening on ([^\s\"]+)", log.read_text())):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        channel = grpc.insecure_channel(match.group(1))
        health = health_pb2_grpc.HealthStub(channel)

        def status() -> int:
            reply = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
            return int(reply.status)

        assert status() == health_pb2.HealthCheckResponse.SERVING
        ctl(node, "delete_vhost", "gwv")
        refused = "failed: RabbitMQ refused to open virtual host 'gwv'"
        while log.read_text().count(refused) < 2:
            assert proc.poll() is None and time.monotonic() < deadline + 60, log.read_text()
            time.sleep(0.1)
        assert status() == health_pb2.HealthCheckResponse.NOT_SERVING
        ctl(node, "add_vhost", "gwv")
        ctl(node, "set_permissions", "-p", "gwv", "guest", ".*", ".*", ".*")
        while status() != health_pb2.HealthCheckResponse.SERVING:
            assert proc.poll() is None and time.monotonic() < deadline + 120, log.read_text()
            time.sleep(0.1)
        channel.close()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()
    assert "Traceback" not in log.read_text()
