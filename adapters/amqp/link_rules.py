"""The RabbitMQ back end's connection rules, without I/O: how long to wait between connection
attempts, which failures no further attempt cures, and how a broker URL is shown.

The wait after the n-th failed attempt in a row is `first_s` doubling per failure up to `cap_s`,
less a random part of up to `jitter` of it, so that gateways that lost one broker together do
not all come back at the same instant. A connection that works resets the count.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from aiormq.exceptions import ConnectionNotAllowed, InvalidFrameError, ProbableAuthenticationError

from gateway.errors import InvalidArgument


@dataclass(frozen=True, slots=True)
class Backoff:
    """Waits between connection attempts (see the module docstring)."""

    first_s: float = 0.5
    cap_s: float = 15.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if not 0 < self.first_s <= self.cap_s:
            raise InvalidArgument("reconnect first_s", self.first_s, f"0 < first_s <= cap_s "
                                  f"({self.cap_s})")
        if not 0 <= self.jitter < 1:
            raise InvalidArgument("reconnect jitter", self.jitter, "0 <= jitter < 1")

    def nominal_s(self, failures: int) -> float:
        """The wait after `failures` failed attempts in a row (1, 2, ...), before the jitter."""
        doublings = min(max(failures, 1) - 1, 64)
        return float(min(self.cap_s, self.first_s * 2**doublings))

    def delay_s(self, failures: int, draw: float) -> float:
        """The wait after `failures` failed attempts in a row; `draw` in [0, 1) is the random
        part (the caller's random source: `random.random()` in production)."""
        return self.nominal_s(failures) * (1 - self.jitter * draw)


RECONNECT = Backoff()
"""The back end's waits: 0.5 s, doubling up to 15 s (each less up to half, at random)."""


def vhost_of(url: str) -> str:
    """The virtual host an amqp:// URL names (its path, percent-decoded; `/` when empty)."""
    path = urlsplit(url).path
    return unquote(path[1:]) if len(path) > 1 else "/"


def _under(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first exception of `kind` in `exc`, its causes, contexts and arguments (aiormq wraps
    a socket's or a handshake's failure in an `AMQPConnectionError` whose cause it is)."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo and len(seen) < 8:
        cause = todo.pop(0)
        if cause is None or any(cause is s for s in seen):
            continue
        if isinstance(cause, kind):
            return cause
        seen.append(cause)
        todo += [cause.__cause__, cause.__context__]
        todo += [a for a in cause.args if isinstance(a, BaseException)]
    return None


def certificate_error(exc: BaseException) -> ssl.SSLCertVerificationError | None:
    """The TLS certificate check that failed under `exc` (aiormq wraps it in an
    `AMQPConnectionError` whose first argument is the errno 1 and whose cause it is), if any."""
    found = _under(exc, ssl.SSLCertVerificationError)
    return found if isinstance(found, ssl.SSLCertVerificationError) else None


NOT_TLS = frozenset({"WRONG_VERSION_NUMBER", "PACKET_LENGTH_TOO_LONG", "RECORD_LAYER_FAILURE",
                     "UNKNOWN_PROTOCOL", "RECORD_LENGTH_MISMATCH", "HTTP_REQUEST",
                     "HTTPS_PROXY_REQUEST"})
"""OpenSSL's reasons for a handshake whose peer answered with bytes that are no TLS record (a
plain AMQP port answers a TLS hello with its protocol header): a TLS URL for a plain port."""
HANDSHAKE_REFUSED = frozenset({
    "UNSUPPORTED_PROTOCOL", "TLSV1_ALERT_PROTOCOL_VERSION", "SSLV3_ALERT_HANDSHAKE_FAILURE",
    "NO_SHARED_CIPHER", "NO_CIPHERS_AVAILABLE", "TLSV13_ALERT_CERTIFICATE_REQUIRED",
    "SSLV3_ALERT_BAD_CERTIFICATE", "TLSV1_ALERT_UNKNOWN_CA", "SSLV3_ALERT_CERTIFICATE_EXPIRED",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN", "TLSV1_ALERT_ACCESS_DENIED"})
"""OpenSSL's reasons for a TLS handshake the two ends cannot agree on (versions, ciphers) or
that the broker refused (it requires a client certificate, or does not trust the gateway's):
settings, which no further attempt changes."""


def _ssl_reason(error: ssl.SSLError) -> str:
    """OpenSSL's name for what failed ("WRONG_VERSION_NUMBER"): `reason`, else the name in the
    text ("[SSL: WRONG_VERSION_NUMBER] wrong version number"), else ""."""
    named = getattr(error, "reason", None)  # set by the ssl module, not by every raiser
    if isinstance(named, str) and named:
        return named
    text = str(error)
    start = text.find("[SSL: ")
    end = text.find("]", start)
    return text[start + 6:end] if start >= 0 and end > start else ""


def handshake_error(exc: BaseException) -> str | None:
    """Why a TLS handshake under `exc` cannot work with these settings, in a few words: the
    peer does not speak TLS (`NOT_TLS`), or the two ends cannot agree or the broker refused the
    gateway (`HANDSHAKE_REFUSED`); None for anything else, a certificate the gateway does not
    trust included (`certificate_error`). A peer that closes the connection during the handshake
    is no such failure: asyncio reports it as a reset, as a broker or proxy going down does."""
    found = _under(exc, ssl.SSLError)
    if not isinstance(found, ssl.SSLError) or isinstance(found, ssl.SSLCertVerificationError):
        return None
    name = _ssl_reason(found)
    if name in NOT_TLS:
        return (f"the server did not answer TLS ({name}): is this a TLS port? (amqps:// speaks "
                "TLS, RabbitMQ's TLS port is usually 5671; amqp:// is plain, usually 5672)")
    if name in HANDSHAKE_REFUSED:
        return f"the TLS handshake with the broker failed ({name})"
    return None


def certificate_text(error: ssl.SSLCertVerificationError) -> str:
    """What the certificate check said ("unable to get local issuer certificate", "IP address
    mismatch, certificate is not valid for '10.0.0.5'.")."""
    said = (getattr(error, "verify_message", None) or getattr(error, "reason", None)
            or str(error))
    return f"CERTIFICATE_VERIFY_FAILED: {said}"


def refused_always(exc: BaseException) -> bool:
    """A refusal that settings of the gateway's own cause and no attempt with them cures, even
    on a reconnect of a link that served: credentials refused, or the broker's TLS certificate
    not trusted (an unknown CA, a name it is not valid for, expired), a TLS handshake that
    cannot work (`handshake_error`: a TLS URL for a plain port, say): the gateway exits for its
    supervisor to start it again with the settings of now (a rotated Secret, a new CA bundle).
    A virtual host refused is not: RabbitMQ refuses one that is restarting."""
    return (isinstance(exc, ProbableAuthenticationError) or certificate_error(exc) is not None
            or handshake_error(exc) is not None)


def refusal(exc: BaseException, url: str) -> str | None:
    """Why the broker refused the gateway, when another attempt with the same settings would
    be refused again (wrong credentials, a virtual host that does not exist or that the user
    may not use, a TLS certificate the gateway does not trust, a TLS URL for a port that does
    not speak TLS or a TLS handshake that cannot work); None for failures that may pass
    (refused or cut connections, timeouts)."""
    if isinstance(exc, ProbableAuthenticationError):
        return (f"RabbitMQ refused the user's credentials (ACCESS_REFUSED: "
                f"{exc.args[0] if exc.args else exc})")
    certificate = certificate_error(exc)
    if certificate is not None:
        return (f"the broker's TLS certificate is not trusted ({certificate_text(certificate)}"
                "; trusted CAs: the system's, or ?cafile=PATH in the URL)")
    handshake = handshake_error(exc)
    if handshake is not None:
        return handshake
    vhost = vhost_of(url)
    if isinstance(exc, ConnectionNotAllowed):
        return f"RabbitMQ refused virtual host {vhost!r} (NOT_ALLOWED: {exc})"
    if isinstance(exc, InvalidFrameError) and "Connection.OpenOk" in str(exc) and (
            "Connection.Close" in str(exc)):
        # aiormq reports the broker's Connection.Close in reply to Connection.Open this way,
        # without its text: RabbitMQ refuses a virtual host that does not exist, or that the
        # user has no permissions on, so.
        return (f"RabbitMQ refused to open virtual host {vhost!r}: it does not exist, or the "
                "user has no permissions on it (the broker's log says which)")
    return None


def reason(exc: BaseException) -> str:
    """A failure in a few words: the OS's text for a socket error ("Connection refused"), else
    the exception's repr."""
    if isinstance(exc, TimeoutError):
        return "timed out"
    certificate = certificate_error(exc)
    if certificate is not None:  # aiormq's args are (1, text): not "Operation not permitted"
        return certificate_text(certificate)
    tls = _under(exc, ssl.SSLError)
    if isinstance(tls, ssl.SSLError) and _ssl_reason(tls):  # errno 1 here is no EPERM either
        return f"TLS: {_ssl_reason(tls)}"
    cause = exc
    if cause.args and isinstance(cause.args[0], OSError):
        cause = cause.args[0]  # aiormq wraps the socket's error
    if isinstance(cause, OSError):
        if isinstance(cause.errno, int) and cause.errno > 0:
            return os.strerror(cause.errno)
        if cause.strerror:
            return cause.strerror
    if exc.args and isinstance(exc.args[0], int) and exc.args[0] > 0:  # aiormq: (errno, text)
        return os.strerror(exc.args[0])
    if len(exc.args) == 1 and isinstance(exc.args[0], str) and exc.args[0]:
        return exc.args[0]  # aiormq's "Server connection unexpectedly closed. ..."
    return repr(exc)
