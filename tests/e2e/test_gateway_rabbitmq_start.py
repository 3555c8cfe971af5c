"""`gateway serve --backend rabbitmq` started while its broker is away or refuses it, and a broker
that goes away while it serves, through the CLI (`python -m gateway.cli serve` processes).

Before, a broker that could not be reached at start ended the gateway with status 2, the status of
a usage error, and a broker that went away was tried every second for ever, two or three log lines
each time. Now a gateway started before its broker (a Kubernetes sidecar whose broker is not up
yet) listens, says NOT_SERVING and connects with back-off once the broker comes, for up to
`--rabbitmq-start-wait-s`, then exits with 75 (EX_TEMPFAIL); with 0, and whenever the broker
refuses its credentials or virtual host, it exits with 75 at once, in one line naming the URL
without its password. Reconnecting writes one warning per attempt, never a traceback."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import grpc
import pytest
from grpc_health.v1 import health_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amqp_node import URL, free_port
from tcp_proxy import TcpProxy

from gateway.client import GatewayClient
from tests.e2e.test_gateway_rabbitmq_hung import (
    NOT_SERVING,
    SERVING,
    status,
    terminate,
    until_status,
)

REPO = Path(__file__).resolve().parents[2]
EX_TEMPFAIL = 75
BROKER_PORT = urlsplit(URL).port or 5672

pytestmark = pytest.mark.slow


def command(tmp_path: Path, url: str, *flags: str) -> list[str]:
    return [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(tmp_path / "data"),
            "--listen", "127.0.0.1:0", "--backend", "rabbitmq", "--rabbitmq-url", url, *flags]


def run(tmp_path: Path, url: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command(tmp_path, url, *flags), capture_output=True, text=True,
                          cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=60)


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The single line `gateway serve` wrote before it exited with 75."""
    assert done.returncode == EX_TEMPFAIL, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("gateway: error: cannot connect to RabbitMQ at "), lines[0]
    assert "Traceback" not in done.stderr
    return lines[0]


def test_an_unreachable_broker_without_a_start_wait_exits_75_in_one_line(
        tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    line = one_line(run(tmp_path, f"amqp://guest:s3cret@127.0.0.1:{port}/",
                        "--rabbitmq-start-wait-s", "0"))
    assert f"amqp://guest:***@127.0.0.1:{port}/" in line and "Connection refused" in line
    assert "s3cret" not in line


def test_credentials_refused_exit_75_at_once_whatever_the_start_wait(tmp_path: Path) -> None:
    parts = urlsplit(URL)
    url = f"amqp://{parts.username}:wrong-{uuid.uuid4().hex[:6]}@{parts.hostname}:{BROKER_PORT}/"
    started = time.monotonic()
    line = one_line(run(tmp_path, url))  # the default start wait is 300 s
    assert time.monotonic() - started < 30
    assert "ACCESS_REFUSED" in line and f"{parts.username}:***@" in line and "wrong-" not in line


def test_a_virtual_host_that_does_not_exist_exits_75_naming_it(tmp_path: Path) -> None:
    vhost = f"gwtest-missing-{uuid.uuid4().hex[:8]}"
    line = one_line(run(tmp_path, f"{URL.rstrip('/')}/{vhost}"))
    assert f"virtual host {vhost!r}" in line and "does not exist" in line


def test_no_broker_within_the_start_wait_exits_75(tmp_path: Path) -> None:
    port = free_port()
    done = run(tmp_path, f"amqp://guest:s3cret@127.0.0.1:{port}/", "--rabbitmq-start-wait-s", "1")
    assert done.returncode == EX_TEMPFAIL, done.stderr
    last = done.stderr.strip().splitlines()[-2:]
    assert any(f"exiting with status 75: cannot connect to RabbitMQ at amqp://guest:***@127.0.0.1"
               f":{port}/ within 1 s (start_wait_s)" in line for line in last), done.stderr
    assert "s3cret" not in done.stderr and "Traceback" not in done.stderr


def test_the_start_wait_out_of_range_is_one_line_naming_it(tmp_path: Path) -> None:
    done = run(tmp_path, URL, "--rabbitmq-start-wait-s", "-1")
    assert done.returncode == 2, done.stderr
    assert "rabbitmq_start_wait_s=-1.0 is not allowed: 0..86400 s" in done.stderr


@contextlib.contextmanager
def serving(tmp_path: Path, url: str) -> Iterator[tuple[subprocess.Popen[bytes], str, Path]]:
    """A `gateway serve` process; yields it, its gRPC address and its log file."""
    log = tmp_path / "gateway.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(command(tmp_path, url), stderr=out, stdout=subprocess.DEVNULL,
                                cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        deadline = time.monotonic() + 60
        while not (match := re.search(r"gateway listening on ([^\s\"]+)", log.read_text())):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield proc, match.group(1), log
    finally:
        terminate(proc)


def attempts(log: Path) -> list[int]:
    """The numbers of the failed connection attempts the log tells of, in order."""
    return [int(n) for n in re.findall(r"RabbitMQ connection attempt (\d+) failed",
                                       log.read_text())]


async def until_attempts(log: Path, count: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while len(attempts(log)) < count:
        assert time.monotonic() < deadline, log.read_text()
        await asyncio.sleep(0.1)


async def refused(client: GatewayClient, topic: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await client.publish(topic, [b"refused"])
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_waiting_for_its_broker_it_stops_at_once_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    with serving(tmp_path, f"amqp://guest:guest@127.0.0.1:{port}/") as (proc, target, log):
        async with GatewayClient(target) as client:
            stub = health_pb2_grpc.HealthStub(client.channel)
            assert await status(stub) == NOT_SERVING
            await until_attempts(log, 2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()
    assert "Traceback" not in log.read_text()


async def test_started_before_its_broker_it_serves_once_it_comes_and_heals_after_an_outage(
        tmp_path: Path) -> None:
    proxy = TcpProxy(BROKER_PORT)  # not started: nothing listens on its port yet
    parts = urlsplit(URL)
    topic = f"start.outage.{uuid.uuid4().hex[:8]}"
    try:
        with serving(tmp_path, proxy.url(parts.username or "guest",
                                         parts.password or "guest")) as (proc, target, log):
            async with GatewayClient(target) as client:
                stub = health_pb2_grpc.HealthStub(client.channel)
                assert await status(stub) == NOT_SERVING
                await refused(client, topic)
                await until_attempts(log, 2)

                proxy.start()  # the broker comes
                await until_status(stub, SERVING, 60)
                confirmed = await client.publish(topic, [b"first%d" % i for i in range(5)])
                got: set[str] = set()
                async with client.consume(topic, "g", policy="rabbitmq", prefetch=20) as stream:

                    async def drain() -> None:
                        while not set(confirmed) <= got:
                            message = await stream.next(30)
                            assert message is not None, f"missing {set(confirmed) - got}"
                            got.add(message.message_id)
                            assert (await message.ack()).ok

                    await drain()
                    proxy.cut()  # and goes away, while a consumer waits for more
                    await until_status(stub, NOT_SERVING, 30)
                    await refused(client, topic)
                    before = len(attempts(log))
                    await until_attempts(log, before + 4)
                    assert proc.poll() is None and await status(stub) == NOT_SERVING

                    proxy.start()  # and comes back
                    await until_status(stub, SERVING, 60)
                    confirmed += await client.publish(topic, [b"then%d" % i for i in range(5)])
                    await drain()
        assert proc.returncode == 0
    finally:
        proxy.cut()
    text = log.read_text()
    # One warning per attempt (each numbered once: the count starts again after a connection),
    # and none of the libraries' own lines or tracebacks.
    numbers = attempts(log)
    runs = [[numbers[0]]]
    for number in numbers[1:]:
        if number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    assert len(runs) == 2 and runs[0][0] == runs[1][0] == 1, numbers  # before it came; outage
    assert "Traceback" not in text and "creating transport" not in text, text
    assert "Reconnecting after" not in text and "exited abnormally" not in text, text
    assert '"level": "error"' not in text, text
    assert text.count("RabbitMQ connection lost") == 1, text
    # The consumer's fetches failed every 0.5 s meanwhile: said once, and once that they work.
    assert text.count('"fetch failed"') == 1 and text.count('"fetch works again"') == 1, text
    assert text.count("RabbitMQ connected after") == 2, text
