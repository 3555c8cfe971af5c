"""Addresses in the settings: a listener's HOST:PORT (`host_port`, `join_host_port`), whether
it is loopback, two listeners on one port, and an http(s) URL (`http_url`)."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from gateway.errors import InvalidArgument

ANY_HOST = ("", "0.0.0.0", "::", "localhost")
"""Hosts that may stand for the same socket as another spelling of the address."""


def check_port_free(name: str, address: str, host: str, port: int,
                     taken: list[tuple[str, str, str, int]]) -> None:
    """Refuse a listener on a port another listener of this config has (port 0 excepted): one
    line naming both settings, where binding the second failed half way through start-up with
    'address already in use' and no setting named."""
    if port:
        for other, other_address, other_host, other_port in taken:
            if port == other_port and (host == other_host or host in ANY_HOST
                                       or other_host in ANY_HOST):
                raise InvalidArgument(name, address, f"a port no other listener has ({other} "
                                      f"is {other_address})")
    taken.append((name, address, host, port))


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_port(field: str, value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    # `[::1:0` (a bracket left open) served, announced as listening on `[::1:41005`.
    bracketed = host[:1] == "[" or host[-1:] == "]"
    if not sep or not host or not port.isascii() or not port.isdigit() \
            or not 0 <= int(port) <= 65535 \
            or (bracketed and not (host[:1] == "[" and host[-1:] == "]" and ":" in host)) \
            or (not bracketed and ":" in host):  # `::1:50051`: the address ::1:50051 too
        raise InvalidArgument(field, value, "HOST:PORT with a port in 0..65535 (an IPv6 "
                              "host in brackets: [::1]:PORT)")
    return host[1:-1] if bracketed else host, int(port)


def http_url(url: str) -> bool:
    """An http(s) URL naming a host (`http://` alone was taken, and every export failed)."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        return False
    return url.startswith(("http://", "https://")) and bool(parts.hostname) and port != 0


def join_host_port(host: str, port: int) -> str:
    """HOST:PORT again, an IPv6 address in brackets (`[::1]:50051`), as gRPC needs it."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
