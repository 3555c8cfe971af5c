"""`gateway serve --backend rabbitmq` whose credentials stop working while it serves (the user's
password changed on a private RabbitMQ node, its connections closed): the reconnect is refused
(ACCESS_REFUSED), which no further attempt with these credentials cures, so the gateway exits with
status 75 (EX_TEMPFAIL) in one line naming the URL without its password, for its supervisor to
start it again with the credentials of now (a rotated Secret). Before, it tried again every second
for ever, NOT_SERVING, three log lines each time."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amqp_node import AmqpNode

from tests.e2e import test_gateway_rabbitmq_hung
from tests.e2e.test_gateway_rabbitmq_start import serving

EX_TEMPFAIL = 75

pytestmark = pytest.mark.slow


# A private RabbitMQ node, started and stopped around each test: the hung-broker tests' fixture
# (its SIGCONT at teardown, for a node they stopped with SIGSTOP, does nothing here).
node = test_gateway_rabbitmq_hung.node


def ctl(node: AmqpNode, *args: str) -> None:
    done = node.ctl(*args)
    assert done.returncode == 0, done.stdout + done.stderr


def test_credentials_refused_on_a_reconnect_exit_75(tmp_path: Path, node: AmqpNode) -> None:
    ctl(node, "add_user", "gw", "first-pw")
    ctl(node, "set_permissions", "-p", "/", "gw", ".*", ".*", ".*")
    url = f"amqp://gw:first-pw@127.0.0.1:{node.port}/"
    with serving(tmp_path, url) as (proc, _, log):
        ctl(node, "change_password", "gw", "second-pw")
        ctl(node, "close_all_connections", "password changed")
        assert proc.wait(60) == EX_TEMPFAIL, log.read_text()
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
    deadline = time.monotonic() + 60
    with serving(tmp_path, f"amqp://guest:guest@127.0.0.1:{node.port}/gwv") as (proc, target, log):
        channel = grpc.insecure_channel(target)
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
        # Health follows within 0.5 s of the gateway's event loop (slower on a loaded machine).
        while status() != health_pb2.HealthCheckResponse.NOT_SERVING:
            assert proc.poll() is None and time.monotonic() < deadline + 60, log.read_text()
            time.sleep(0.1)
        ctl(node, "add_vhost", "gwv")
        ctl(node, "set_permissions", "-p", "gwv", "guest", ".*", ".*", ".*")
        while status() != health_pb2.HealthCheckResponse.SERVING:
            assert proc.poll() is None and time.monotonic() < deadline + 120, log.read_text()
            time.sleep(0.1)
        channel.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()
    assert "Traceback" not in log.read_text()
