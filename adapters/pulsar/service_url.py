"""The `--pulsar-service-url` of `--backend pulsar`, checked before the client library sees it;
the front end's `pulsar_advertised`, checked before a lookup hands it to a client."""

from __future__ import annotations

import re

from gateway.errors import InvalidArgument, masked

_SERVICE_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::([0-9]{1,5}))?")


def check_service_url(url: str) -> None:
    """A service URL the client library can use: `pulsar://` or `pulsar+ssl://`, then one or
    more `HOST[:PORT]` joined by commas (a bad one raised the library's ValueError, and its
    traceback, from the gateway's start); shown without its password."""
    scheme, sep, rest = url.partition("://")
    hosts = rest.removesuffix("/").split(",")
    matches = [_SERVICE_HOST.fullmatch(host) for host in hosts]
    if scheme not in ("pulsar", "pulsar+ssl") or not sep or not all(
        m and 1 <= int(m.group(2) or 6650) <= 65535 for m in matches
    ):
        raise InvalidArgument("pulsar_service_url", masked(url),
                              "pulsar://HOST:PORT or pulsar+ssl://HOST:PORT (several hosts "
                              "joined by commas; no user or password: see [pulsar] token)")


def check_advertised_url(url: str) -> None:
    """The URL the front end's lookups point clients at: one `pulsar://HOST:PORT` or
    `pulsar+ssl://HOST:PORT` (any text was taken, and clients were pointed at it)."""
    scheme, sep, rest = url.partition("://")
    match = _SERVICE_HOST.fullmatch(rest.removesuffix("/"))
    if scheme not in ("pulsar", "pulsar+ssl") or not sep or not match or not match.group(2) \
            or not 1 <= int(match.group(2)) <= 65535:
        raise InvalidArgument("pulsar_advertised", masked(url),
                              "pulsar://HOST:PORT or pulsar+ssl://HOST:PORT (the one address "
                              "the front end's lookups send clients to)")
