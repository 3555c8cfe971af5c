"""How the Python client reaches a gateway: plain or TLS (mTLS with a client certificate), and
the bearer token the gateway expects on every call (`authorization: Bearer <token>`, see
`gateway.server.auth`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from gateway.client_errors import interceptors

RECONNECT_BACKOFF_MS = (100, 5_000)
"""The channel's own reconnection back-off (first, longest): gRPC's defaults (1 s, 120 s) would
keep a client away for up to two minutes after a gateway restart."""


@dataclass(frozen=True, slots=True)
class ClientTLS:
    """TLS for `GatewayClient`: the CA that signed the gateway's certificate (None: the
    system's roots) and, for a gateway started with `--tls-client-ca` (mTLS), this client's
    certificate and key. Each is a PEM file path or the PEM bytes themselves.
    `server_name` is the name the gateway's certificate carries when it differs from the
    target's host."""

    ca: str | Path | bytes | None = None
    cert: str | Path | bytes | None = None
    key: str | Path | bytes | None = None
    server_name: str = ""

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ValueError("ClientTLS: a client certificate needs its key, and a key its "
                             "certificate (cert=, key=)")

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=_pem("ca", self.ca),
            private_key=_pem("key", self.key),
            certificate_chain=_pem("cert", self.cert),
        )


def _pem(name: str, value: str | Path | bytes | None) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    try:
        return Path(value).read_bytes()
    except OSError as exc:
        raise ValueError(f"ClientTLS.{name}: cannot read {str(value)!r}: {exc.strerror}") from None


def open_channel(target: str, tls: ClientTLS | None,
                 options: Sequence[tuple[str, Any]]) -> grpc.aio.Channel:
    """A channel to `target` (not connected yet: the first call connects)."""
    first, longest = RECONNECT_BACKOFF_MS
    full = [*options, ("grpc.initial_reconnect_backoff_ms", first),
            ("grpc.min_reconnect_backoff_ms", first),
            ("grpc.max_reconnect_backoff_ms", longest)]
    if tls is None:
        return grpc.aio.insecure_channel(target, options=full, interceptors=interceptors())
    if tls.server_name:
        full.append(("grpc.ssl_target_name_override", tls.server_name))
    return grpc.aio.secure_channel(target, tls.credentials(), options=full,
                                   interceptors=interceptors())


def bearer_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """The call metadata that carries `token` (none without one)."""
    if token is None:
        return ()
    if not token or token != token.strip() or not (token.isascii() and token.isprintable()):
        raise ValueError("token: a non-empty bearer token of printable ASCII characters, "
                         "without surrounding spaces, is required (gRPC metadata carries no "
                         "other)")
    return (("authorization", f"Bearer {token}"),)
