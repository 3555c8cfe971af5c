"""The RabbitMQ back end's connection rules (`adapters.amqp.link_rules`): the waits between
connection attempts, which refusals are permanent, how a URL and a failure are shown. Pure
functions: the random part is passed in, nothing waits."""

from __future__ import annotations

import errno
import socket
import ssl
from typing import Any

import pytest
from aiormq.exceptions import (
    AMQPConnectionError,
    ConnectionNotAllowed,
    InvalidFrameError,
    ProbableAuthenticationError,
)

from adapters.amqp.backend_link import Link
from adapters.amqp.link_rules import (
    RECONNECT,
    Backoff,
    reason,
    refusal,
    refused_always,
    vhost_of,
)
from gateway.errors import InvalidArgument, masked

URL = "amqp://gw:s3cret@broker:5672/orders"


def test_the_waits_double_from_half_a_second_to_fifteen() -> None:
    waits = [RECONNECT.delay_s(n, draw=0.0) for n in range(1, 10)]
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 15.0, 15.0, 15.0]
    assert RECONNECT.delay_s(10_000, draw=0.0) == 15.0  # no overflow however long it lasts


def test_the_jitter_takes_up_to_half_of_each_wait_off() -> None:
    for n in range(1, 8):
        nominal = RECONNECT.nominal_s(n)
        assert RECONNECT.delay_s(n, draw=0.5) == pytest.approx(nominal * 0.75)
        assert nominal / 2 < RECONNECT.delay_s(n, draw=0.999999) < nominal / 2 * 1.0001
    assert Backoff(jitter=0.0).delay_s(3, draw=0.9) == 2.0


def test_a_schedule_that_cannot_be_is_refused_naming_it() -> None:
    with pytest.raises(InvalidArgument, match="first_s"):
        Backoff(first_s=0)
    with pytest.raises(InvalidArgument, match="first_s"):
        Backoff(first_s=20, cap_s=15)
    with pytest.raises(InvalidArgument, match="jitter"):
        Backoff(jitter=1.0)


def test_credentials_and_virtual_hosts_refused_are_permanent_the_rest_passes() -> None:
    login = ProbableAuthenticationError("ACCESS_REFUSED - Login was refused")
    assert "ACCESS_REFUSED" in (refusal(login, URL) or "")
    not_allowed = ConnectionNotAllowed(530, "vhost orders not found")
    assert "'orders'" in (refusal(not_allowed, URL) or "")
    # aiormq's report of a Connection.Close in reply to Connection.Open
    closed_on_open = InvalidFrameError(
        "Expected one of ['Connection.OpenOk'], got <Connection.Close object at 0x7f>")
    assert "virtual host 'orders'" in (refusal(closed_on_open, URL) or "")
    for passing in (AMQPConnectionError(errno.ECONNREFUSED, "Connect call failed"),
                    ConnectionResetError(errno.ECONNRESET, "reset"), TimeoutError(),
                    InvalidFrameError("Expected Connection.Start, got <Heartbeat>")):
        assert refusal(passing, URL) is None, passing


def test_urls_are_shown_without_their_password() -> None:
    assert masked(URL) == "amqp://gw:***@broker:5672/orders"
    assert masked("amqp://gw@broker/") == "amqp://gw@broker/"
    assert masked("amqp://broker/") == "amqp://broker/"
    assert masked("amqps://u:p@ss:w@rd@h/") == "amqps://u:***@h/"
    assert vhost_of("amqp://h/") == "/" and vhost_of("amqp://h") == "/"
    assert vhost_of("amqp://h/%2F") == "/" and vhost_of("amqp://h/a%20b") == "a b"


def test_failures_are_shown_in_a_few_words() -> None:
    refused = AMQPConnectionError(ConnectionRefusedError(errno.ECONNREFUSED, "Connect call"))
    assert reason(refused) == "Connection refused"
    assert reason(AMQPConnectionError(errno.ECONNREFUSED, "Connect call failed")) == (
        "Connection refused")
    assert reason(socket.gaierror(-2, "Name or service not known")) == (
        "Name or service not known")
    assert reason(TimeoutError()) == "timed out"
    assert reason(AMQPConnectionError("Server connection unexpectedly closed")) == (
        "Server connection unexpectedly closed")
    assert reason(RuntimeError("odd", 2)) == "RuntimeError('odd', 2)"


def _untrusted(text: str) -> AMQPConnectionError:
    """What aiormq raises for a certificate the TLS handshake refused: (1, text), its cause the
    `SSLCertVerificationError` (errno 1 is no EPERM here)."""
    cert = ssl.SSLCertVerificationError(1, f"[SSL: CERTIFICATE_VERIFY_FAILED] certificate "
                                           f"verify failed: {text} (_ssl.c:1006)")
    cert.verify_message = text
    wrapped = AMQPConnectionError(*cert.args)
    wrapped.__cause__ = cert
    return wrapped


def test_a_broker_certificate_not_trusted_is_permanent_and_said_as_such() -> None:
    """Before, it passed as a failure that may pass (retried for `start_wait_s`, 300 s) and was
    shown as 'Operation not permitted' (aiormq's errno 1)."""
    for text in ("unable to get local issuer certificate",
                 "IP address mismatch, certificate is not valid for '10.0.0.5'.",
                 "certificate has expired"):
        exc = _untrusted(text)
        said = refusal(exc, "amqps://gw:s3cret@broker:5671/")
        assert said is not None and f"CERTIFICATE_VERIFY_FAILED: {text}" in said, said
        assert refused_always(exc)
        assert reason(exc) == f"CERTIFICATE_VERIFY_FAILED: {text}"
    assert refused_always(ProbableAuthenticationError("ACCESS_REFUSED"))
    assert not refused_always(ConnectionNotAllowed(530, "vhost orders not found"))
    assert not refused_always(AMQPConnectionError(errno.ECONNREFUSED, "Connect call failed"))
    assert not refused_always(_tls_failed("DECRYPTION_FAILED_OR_BAD_RECORD_MAC"))


def _tls_failed(name: str) -> AMQPConnectionError:
    """What aiormq raises for a TLS handshake OpenSSL gave up with reason `name`: (1, text),
    its cause the `SSLError`."""
    failed = ssl.SSLError(1, f"[SSL: {name}] {name.lower().replace('_', ' ')} (_ssl.c:1006)")
    wrapped = AMQPConnectionError(*failed.args)
    wrapped.__cause__ = failed
    return wrapped


def test_a_peer_that_does_not_speak_tls_is_permanent_and_said_as_such() -> None:
    """A TLS URL for a plain port (the peer answers the hello with bytes that are no TLS
    record). Before, it passed as a failure that may pass, shown as 'Operation not permitted'."""
    for name in ("WRONG_VERSION_NUMBER", "PACKET_LENGTH_TOO_LONG", "RECORD_LAYER_FAILURE"):
        exc = _tls_failed(name)
        said = refusal(exc, "amqps://gw:s3cret@broker:5672/")
        assert said is not None and said.startswith(
            f"the server did not answer TLS ({name}): is this a TLS port?"), said
        assert refused_always(exc)
        assert reason(exc) == f"TLS: {name}"


def test_a_tls_handshake_the_ends_cannot_agree_on_is_permanent() -> None:
    for name in ("TLSV1_ALERT_PROTOCOL_VERSION", "SSLV3_ALERT_HANDSHAKE_FAILURE",
                 "TLSV13_ALERT_CERTIFICATE_REQUIRED"):
        exc = _tls_failed(name)
        assert refusal(exc, URL) == f"the TLS handshake with the broker failed ({name})"
        assert refused_always(exc)


def test_a_connection_closed_during_the_handshake_may_pass() -> None:
    """asyncio reports a peer that closes during the handshake as a reset (a broker or a proxy
    going down does the same); an SSL error of no known kind, and an EOF, may pass too."""
    for passing in (AMQPConnectionError(ConnectionResetError()),
                    AMQPConnectionError(errno.ECONNRESET, "Connection reset by peer"),
                    _tls_failed("DECRYPTION_FAILED_OR_BAD_RECORD_MAC"),
                    ssl.SSLEOFError(8, "[SSL: UNEXPECTED_EOF_WHILE_READING] EOF")):
        assert refusal(passing, URL) is None, passing
        assert not refused_always(passing), passing


def test_a_reconnect_of_a_serving_link_refused_a_certificate_is_fatal_as_credentials() -> None:
    """A link that served and loses its connection: credentials or a certificate refused on a
    reconnect end it (`fatal`); a virtual host refused, or a connection refused, do not."""
    url = "amqps://gw:s3cret@broker:5671/"
    for exc, fatal in ((_untrusted("unable to get local issuer certificate"), True),
                       (_tls_failed("WRONG_VERSION_NUMBER"), True),
                       (ProbableAuthenticationError("ACCESS_REFUSED - Login was refused"), True),
                       (ConnectionNotAllowed(530, "vhost / is down"), False),
                       (AMQPConnectionError(errno.ECONNREFUSED, "Connect call failed"), False)):
        link = Link(url, prefetch=10, connect_timeout_s=5)
        serving: Any = object()
        link.connection = serving
        link.failed(exc, 1, 0.5)
        assert (link.fatal is not None) is fatal, (exc, link.fatal)
        if fatal:
            assert link.fatal is not None and "amqps://gw:***@broker:5671/" in link.fatal
            assert "s3cret" not in link.fatal
