"""The `/metrics` listener cannot be used to starve the gateway: idle connections are closed and
few are served at once (prometheus_client's own server gave each a thread for ever: 3,000 idle
connections held 1,400 threads and gRPC calls timed out)."""

from __future__ import annotations

import asyncio
import http.client
import socket
import ssl
import threading
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.client import GatewayClient
from gateway.server.app import GatewayApp, running_gateway
from gateway.server.metrics_http import MAX_CONNECTIONS, REQUEST_TIMEOUT_S
from tests.e2e.test_access_control import make_ca


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[GatewayApp]:
    async with running_gateway(tmp_path / "data", admin_listen="127.0.0.1:0") as running:
        yield running


def _scrape(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            return b"gateway_requests_total" in answer.read()
    except OSError:
        return False


def _closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(0)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


async def test_idle_connections_are_bounded_and_dropped(app: GatewayApp) -> None:
    port = app.metrics_port
    before = threading.active_count()
    idle = []
    for _ in range(300):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never finished
        idle.append(sock)
    try:
        await asyncio.sleep(0.5)
        assert threading.active_count() <= before + MAX_CONNECTIONS + 1
        async with GatewayClient(f"127.0.0.1:{app.grpc_port}") as client:
            await asyncio.wait_for(client.publish("still-serving", [b"x"]), 10)
        deadline = time.monotonic() + REQUEST_TIMEOUT_S + 30
        while not all(_closed_by_server(s) for s in idle):
            assert time.monotonic() < deadline, "idle connections were not closed"
            await asyncio.sleep(0.5)
        assert await asyncio.to_thread(_scrape, port)
    finally:
        for sock in idle:
            sock.close()


async def test_metrics_over_tls_with_the_gateways_certificate(tmp_path: Path) -> None:
    """`--tls-cert` turns TLS on for every listener, /metrics included (it was plain HTTP)."""
    files = make_ca(tmp_path)
    async with running_gateway(tmp_path / "data", admin_listen="127.0.0.1:0",
                               tls_cert=str(files["server.crt"]),
                               tls_key=str(files["server.key"])) as app:
        context = ssl.create_default_context(cafile=str(files["ca.crt"]))
        url = f"https://127.0.0.1:{app.metrics_port}/metrics"

        def scrape_tls() -> bytes:
            with urllib.request.urlopen(url, context=context, timeout=10) as answer:
                return bytes(answer.read())

        assert b"gateway_requests_total" in await asyncio.to_thread(scrape_tls)
        assert not await asyncio.to_thread(_scrape, app.metrics_port)  # plain HTTP: refused


def _trickle(port: int, stop: threading.Event, connected: threading.Semaphore) -> float | None:
    """Send a request a byte at a time, one every 0.5 s; seconds until the server closed the
    connection (None: still open when the request was sent whole or `stop` was set).
    `connected` is released once the connection is made."""
    start = time.monotonic()
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 200 + b"\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port)) as sock:
        connected.release()
        for byte in request:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                return time.monotonic() - start
            if stop.wait(0.5) or _closed_by_server(sock):
                return None if stop.is_set() else time.monotonic() - start
            sock.settimeout(None)
    return None


async def test_a_request_trickling_in_is_dropped_at_the_request_timeout(app: GatewayApp) -> None:
    """A byte every 0.5 s never trips the socket's timeout: before, such connections held
    their slots for ever and MAX_CONNECTIONS of them kept every scrape out."""
    stop = threading.Event()
    connected = threading.Semaphore(0)
    closed_after: list[float | None] = []

    def run() -> None:
        closed_after.append(_trickle(app.metrics_port, stop, connected))

    threads = [threading.Thread(target=run, daemon=True) for _ in range(MAX_CONNECTIONS)]
    for thread in threads:
        thread.start()
    try:
        for _ in threads:  # on a busy machine the connections may take a while to be made
            assert await asyncio.to_thread(connected.acquire, True, 30)
        full_by = time.monotonic() + REQUEST_TIMEOUT_S * 0.5
        while await asyncio.to_thread(_scrape, app.metrics_port):  # until every slot is taken
            assert time.monotonic() < full_by, "the trickling connections never took the slots"
            await asyncio.sleep(0.2)
        deadline = time.monotonic() + REQUEST_TIMEOUT_S * 3
        while len(closed_after) < MAX_CONNECTIONS and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
        # Each was closed by the server, long before its request was whole (115 s).
        assert len(closed_after) == MAX_CONNECTIONS
        assert all(after is not None for after in closed_after)
        assert await asyncio.to_thread(_scrape, app.metrics_port)
    finally:
        stop.set()
        for thread in threads:
            thread.join(5)


def _request(port: int, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(method, path)
        answer = connection.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        connection.close()


async def test_only_the_metrics_path_is_served(app: GatewayApp) -> None:
    """Any path answered with the metrics before (GET /foo was 200); HEAD was 405."""
    port = app.metrics_port
    status, _, body = await asyncio.to_thread(_request, port, "GET", "/metrics")
    assert status == 200 and b"gateway_requests_total" in body
    status, _, body = await asyncio.to_thread(_request, port, "GET", "/metrics?name[]=x")
    assert status == 200
    for path in ("/", "/foo", "/metrics/", "/metricsx", "/favicon.ico", "/foo/metrics"):
        status, _, body = await asyncio.to_thread(_request, port, "GET", path)
        assert status == 404, path
        assert b"gateway_" not in body, path
    status, _, body = await asyncio.to_thread(_request, port, "POST", "/foo")
    assert status == 404


async def test_get_and_head_are_served_other_methods_are_405(app: GatewayApp) -> None:
    port = app.metrics_port
    status, headers, body = await asyncio.to_thread(_request, port, "HEAD", "/metrics")
    assert status == 200 and body == b""
    assert headers["content-type"].startswith("text/plain")
    assert int(headers["content-length"]) > 0
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        status, headers, body = await asyncio.to_thread(_request, port, method, "/metrics")
        assert status == 405, method
        assert "HEAD" in headers["allow"] and "GET" in headers["allow"]
        assert b"gateway_" not in body
    status, headers, _ = await asyncio.to_thread(_request, port, "OPTIONS", "/metrics")
    assert status == 200 and "HEAD" in headers["allow"]
