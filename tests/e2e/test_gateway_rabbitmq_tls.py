"""`gateway serve --backend rabbitmq --rabbitmq-url amqps://...` whose broker shows a TLS
certificate the gateway does not trust: no attempt with these settings can work, so the gateway
exits with status 75 (EX_TEMPFAIL) at once, in one line naming the URL without its password and
what the certificate check said. Before, the verification failure counted as a failure that may
pass: the gateway tried again with back-off for `--rabbitmq-start-wait-s` (300 s by default),
each attempt logged as "Operation not permitted".

The broker is a TLS listener in the test (a certificate for 127.0.0.1 and localhost from a CA of
its own): it completes handshakes, and a client that goes on gets nothing."""

from __future__ import annotations

import contextlib
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from client_gateway import make_ca

from tests.e2e.test_gateway_rabbitmq_start import one_line, run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_ca(tmp_path_factory.mktemp("ca"))


@contextlib.contextmanager
def tls_listener(certs: dict[str, Path], host: str, *,
                 client_certs: bool = False) -> Iterator[int]:
    """A TLS server on `host` showing the test CA's certificate (requiring clients to show one
    the CA signed, with `client_certs`); yields its port."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs["server.crt"], certs["server.key"])
    if client_certs:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(certs["ca.crt"])

    def answer(conn: socket.socket) -> None:
        with context.wrap_socket(conn, server_side=True) as tls:
            tls.recv(8)

    with listener(host, answer) as port:
        yield port


def test_a_certificate_from_an_unknown_ca_exits_75_at_once(certs: dict[str, Path],
                                                           tmp_path: Path) -> None:
    with tls_listener(certs, "127.0.0.1") as port:
        url = f"amqps://gw:s3cret@127.0.0.1:{port}/"
        started = time.monotonic()
        line = one_line(run(tmp_path, url))  # the default start wait is 300 s
    assert time.monotonic() - started < 30, line
    assert f"amqps://gw:***@127.0.0.1:{port}/" in line and "s3cret" not in line
    assert ("the broker's TLS certificate is not trusted (CERTIFICATE_VERIFY_FAILED: unable to "
            "get local issuer certificate" in line), line


def test_a_certificate_for_another_host_exits_75_at_once(certs: dict[str, Path],
                                                         tmp_path: Path) -> None:
    """The CA is trusted (`?cafile=`), but the certificate is for 127.0.0.1 and localhost."""
    with tls_listener(certs, "127.0.0.2") as port:
        url = f"amqps://gw:s3cret@127.0.0.2:{port}/?cafile={certs['ca.crt']}"
        line = one_line(run(tmp_path, url))
    assert f"amqps://gw:***@127.0.0.2:{port}/" in line and "s3cret" not in line
    assert "certificate is not valid for '127.0.0.2'" in line, line


@contextlib.contextmanager
def plain_listener(host: str, answer: bytes) -> Iterator[int]:
    """A port on `host` that speaks no TLS: it reads what comes and answers `answer` (a plain
    AMQP port answers a TLS hello with its protocol header), then closes; yields its port."""

    def reply(conn: socket.socket) -> None:
        conn.recv(4096)
        conn.sendall(answer)

    with listener(host, reply) as port:
        yield port


@contextlib.contextmanager
def listener(host: str, handle: Callable[[socket.socket], None]) -> Iterator[int]:
    """A port on `host` whose connections `handle` takes one at a time (each closed after);
    yields its port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server = socket.create_server((host, 0), family=family)
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn, contextlib.suppress(OSError):
                conn.settimeout(5)
                handle(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        server.close()
        thread.join(5)


def test_a_tls_url_for_the_brokers_plain_port_exits_75_at_once(tmp_path: Path) -> None:
    """`amqps://` for the real broker's plain AMQP port: its answer to the TLS hello is its
    protocol header, no TLS record. Before, each attempt was logged as 'Operation not
    permitted' and retried for the start wait (300 s by default)."""
    started = time.monotonic()
    line = one_line(run(tmp_path, "amqps://guest:s3cret@127.0.0.1:5672/"))
    assert time.monotonic() - started < 30, line
    assert "amqps://guest:***@127.0.0.1:5672/" in line and "s3cret" not in line
    assert "the server did not answer TLS (WRONG_VERSION_NUMBER): is this a TLS port?" in line, (
        line)


def test_a_broker_that_requires_a_client_certificate_exits_75_at_once(
        certs: dict[str, Path], tmp_path: Path) -> None:
    """TLS 1.3: the broker's alert comes after the client's side of the handshake, and may be
    overtaken by the connection's reset (the listener closes with the client's bytes unread):
    that first attempt counts as one that may pass, the next one ends the gateway."""
    with tls_listener(certs, "127.0.0.1", client_certs=True) as port:
        url = f"amqps://gw:s3cret@127.0.0.1:{port}/?cafile={certs['ca.crt']}"
        started = time.monotonic()
        done = run(tmp_path, url)  # the default start wait is 300 s
    assert done.returncode == 75, done.stderr
    assert time.monotonic() - started < 30, done.stderr
    said = done.stderr.strip().splitlines()[-1] if done.stderr.startswith("gateway: error") else (
        done.stderr)
    assert f"amqps://gw:***@127.0.0.1:{port}/" in said and "s3cret" not in done.stderr
    assert "the TLS handshake with the broker failed (TLSV13_ALERT_CERTIFICATE_REQUIRED)" in (
        said), done.stderr


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback on this host")
def test_a_tls_url_for_a_plain_port_on_an_ipv6_host_exits_75_at_once(tmp_path: Path) -> None:
    with plain_listener("::1", b"HTTP/1.1 400 Bad Request\r\n\r\n") as port:
        line = one_line(run(tmp_path, f"amqps://gw:s3cret@[::1]:{port}/"))
    assert f"amqps://gw:***@[::1]:{port}/" in line and "s3cret" not in line
    assert "the server did not answer TLS" in line, line


def test_a_tls_port_that_closes_at_once_is_tried_again(tmp_path: Path) -> None:
    """A port that accepts and closes without a word (a proxy whose broker is down) may pass:
    tried again for the start wait, then 75 with the last failure."""
    with plain_listener("127.0.0.1", b"") as port:
        started = time.monotonic()
        done = run(tmp_path, f"amqps://gw:s3cret@127.0.0.1:{port}/",
                   "--rabbitmq-start-wait-s", "3")
    assert done.returncode == 75, done.stderr
    assert time.monotonic() - started >= 3, done.stderr
    assert "connection attempt 2 failed" in done.stderr, done.stderr
    assert "within 3 s (start_wait_s)" in done.stderr and "s3cret" not in done.stderr, (
        done.stderr)
