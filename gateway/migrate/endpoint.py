"""The two sides of `gateway migrate copy`: a source hands out messages and acknowledges them
once their copies are stored; a destination stores copies, each at most once.

A side is named by a URL whose scheme chooses it: `gateway://` (a running gateway, this
package: `gateway.migrate.gateway_side`), or a scheme a product offers
(`Product.migration_schemes`, built by `Product.migration_endpoint`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import SplitResult, parse_qs, unquote, urlsplit

from gateway.backend.base import OutMessage
from gateway.errors import GatewayError, InvalidArgument, masked

READY = "ready"
"""A message waiting for delivery (ready, delayed, or released to come again later)."""
RETRY = "retry"
"""A waiting retry of a group, with its due time and attempt count."""
DEAD_LETTER = "dead-letter"
PARTS = (READY, RETRY, DEAD_LETTER)


class SourceUnavailable(GatewayError):
    """The source cannot be reached (or went away): nothing more was taken from it."""

    code = "UNAVAILABLE"


class DestinationUnavailable(GatewayError):
    """The destination cannot be reached: what it did not confirm stays at the source."""

    code = "UNAVAILABLE"


class DestinationRefused(GatewayError):
    """The destination refused a copy (too large, a bad value, no ledger): that message and the
    ones after it stay at the source."""

    code = "FAILED_PRECONDITION"


class SourceKeepsCopies(GatewayError):
    """The source cannot remove what it hands out (a gateway whose back end cannot remove by
    position): refused before anything is copied, else every copy would stay at both ends."""

    code = "FAILED_PRECONDITION"


class NotAllowed(GatewayError):
    """A side refused the credentials."""

    code = "PERMISSION_DENIED"


@dataclass(frozen=True, slots=True)
class Item:
    """One message taken from a source, not yet acknowledged there."""

    key: str
    """Names the source message in the destination's copy ledger: the same on every run."""
    part: str
    """READY, RETRY or DEAD_LETTER."""
    message: OutMessage
    """Body, properties, key, tag, due time (`deliver_at_ms`), id and counters."""
    handle: object = None
    """What the source needs to acknowledge it."""
    size: int = 0
    """Bytes it carries (body and properties), for the summary."""
    first_delivery: bool = False
    """The source hands it out for the first time (RabbitMQ's `redelivered` is false): no
    earlier run can have copied it, so the destination stores it even when its ledger knows its
    key (an identical message without an id was copied before)."""


@dataclass(frozen=True, slots=True)
class Stored:
    """What a destination did with a batch."""

    stored: int
    """Copies stored now."""
    skipped: int
    """Copies an earlier run had stored already (found in the ledger)."""


class Source(Protocol):
    """Where messages come from."""

    @property
    def name(self) -> str:
        """The source as a user names it (no credentials)."""
        ...

    @property
    def ledger(self) -> str:
        """The name of this source in a destination's copy ledger (the same on every run)."""
        ...

    @property
    def earlier_ledgers(self) -> tuple[str, ...]:
        """Names this source had in ledgers written by earlier versions (a key recorded under
        one counts as copied), or (): `amqps://` spelled its own ledger apart from `amqp://`."""
        ...

    @property
    def destinations(self) -> tuple[str, str]:
        """Its own retry and dead-letter destination names ("" = none), so that property values
        naming them can be renamed at the destination."""
        ...

    async def open(self) -> None:
        """Connect and check that the source exists; `SourceUnavailable`, `NotAllowed`,
        `InvalidArgument`."""
        ...

    async def count(self, exact: bool) -> dict[str, int] | None:
        """Messages to copy by part: `exact` counts them all (a dry run); else a cheap estimate
        for the progress bar, or None when unknown."""
        ...

    async def take(self, max_items: int) -> list[Item]:
        """Up to `max_items` messages not yet taken; an empty list once the source is drained."""
        ...

    async def ack(self, items: Sequence[Item]) -> None:
        """Acknowledge (remove) messages whose copies the destination confirmed."""
        ...

    async def close(self) -> None:
        """Disconnect; what was taken and not acknowledged comes again on the next run."""
        ...


class Destination(Protocol):
    """Where copies go."""

    @property
    def name(self) -> str:
        ...

    @property
    def part(self) -> str:
        """The part every copy is stored as (a gateway destination's `part=`), or "" when each
        is stored as the part the source hands it out from: the summary counts copies by it."""
        ...

    async def open(self) -> None:
        """Connect and check that the destination takes copies."""
        ...

    async def check(self) -> str:
        """For a dry run: check, changing nothing (no ledger, no lock, no topic created), what
        `open` would refuse that can be seen so (unreachable, credentials, no such queue), and
        close again; "" when checked, else why it was not (the summary says it)."""
        ...

    async def put(self, ledger: str, items: Sequence[Item],
                  source_destinations: tuple[str, str], earlier: Sequence[str] = ()) -> Stored:
        """Store each item unless the ledger `ledger` (or one of its `earlier` names) records
        its key, and record it under `ledger`, durably before returning;
        `DestinationRefused`, `DestinationUnavailable`."""
        ...

    async def close(self) -> None:
        ...


def unrecorded(known: set[tuple[str, str]], names: Sequence[str],
               items: Sequence[Item]) -> list[Item]:
    """The items to store: those handed out for the first time, and those whose key no name
    in `names` (a ledger and its earlier names) records in `known` ((ledger, key) pairs)."""
    return [i for i in items
            if i.first_delivery or not any((name, i.key) in known for name in names)]


@dataclass(frozen=True, slots=True)
class Url:
    """A side's URL, taken apart: `scheme://[user:password@]host[:port]/PATH?query`."""

    text: str
    scheme: str
    parts: SplitResult
    query: dict[str, str] = field(default_factory=dict)

    @property
    def path(self) -> str:
        """The path without its leading slash, percent-decoded (a topic may hold `://`)."""
        return unquote(self.parts.path[1:] if self.parts.path.startswith("/")
                       else self.parts.path)

    @property
    def shown(self) -> str:
        """The URL without its password."""
        netloc = self.parts.hostname or ""
        if self.parts.port:
            netloc += f":{self.parts.port}"
        if self.parts.username:
            netloc = f"{self.parts.username}@{netloc}"
        shown = self.parts._replace(netloc=netloc)
        return shown.geturl()

    def endpoint(self, default_port: int) -> str:
        """`HOST:PORT` spelled one way, for a copy ledger's name: a run from `localhost` finds
        what a run from `127.0.0.1:PORT` stored (`canonical_host`; the port always written)."""
        host = canonical_host(self.parts.hostname or "")
        port = self.parts.port or default_port
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def option(self, name: str, default: str = "") -> str:
        return self.query.get(name, default)

    def only(self, field: str, allowed: Sequence[str]) -> None:
        """Refuse query options other than `allowed`."""
        unknown = sorted(set(self.query) - set(allowed))
        if unknown:
            raise InvalidArgument(field, self.shown,
                                  f"options {', '.join(allowed) or '(none)'} only, not "
                                  f"{', '.join(unknown)}")


def parse_url(field: str, text: str) -> Url:
    """A side's URL; `InvalidArgument` naming `field` for anything that is not one."""
    shown = masked(text)
    if "://" not in text:
        raise InvalidArgument(field, shown, "a URL such as gateway://HOST:PORT/TOPIC?group=G")
    try:
        parts = urlsplit(text)
        _ = parts.port  # a port that is not a number raises here
        query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as exc:
        raise InvalidArgument(field, shown, f"a well-formed URL ({exc})") from None
    single: dict[str, str] = {}
    for key, values in query.items():
        if len(values) != 1:
            raise InvalidArgument(field, shown, f"option {key} once")
        single[key] = values[0]
    if not parts.hostname:
        raise InvalidArgument(field, shown, "a URL with a host")
    url = Url(text, parts.scheme.lower(), parts, single)
    # Both were dropped without a word: port 0 meant the scheme's default port, and a
    # `#fragment` was cut off the topic or queue it belonged to.
    if parts.port == 0:
        raise InvalidArgument(field, url.shown, "a port 1..65535, or none for the default")
    if parts.fragment:
        raise InvalidArgument(field, url.shown, "no #fragment (a # in a name is written %23)")
    return url


LOOPBACK = "127.0.0.1"
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
"""Spellings of this machine's loopback host, written as `LOOPBACK` (no name is resolved)."""


def canonical_host(hostname: str) -> str:
    """A host spelled one way, without resolving it: lower case, no trailing dot, an address
    in its shortest form (`0:0::1` is `::1`), and the loopback names as 127.0.0.1."""
    host = hostname.lower().rstrip(".")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        mapped = getattr(address, "ipv4_mapped", None)
        host = str(mapped or address)
    return LOOPBACK if host in LOOPBACK_NAMES else host


def broker_ledgers(url: Url, ports: Mapping[str, int], plain: str, rest: str) -> tuple[str, ...]:
    """A broker source's name in a copy ledger, then the names earlier versions gave it.

    The broker as the copy reaches it, whatever the scheme: `PLAIN://HOST:PORT/REST`, where
    `ports` holds each of the product's schemes' default port (`amqp` 5672 and `amqps` 5671,
    say) and a URL without a port or with its own scheme's default is written with `plain`'s,
    so that a copy begun over TLS and resumed without it (or back) finds what it stored (one
    listener per port: another port names another listener, written as given). Earlier
    versions wrote the scheme as given with its default port: those spellings follow, where
    they differ."""
    given = url.parts.port
    default = given is None or given == ports.get(url.scheme)
    host = canonical_host(url.parts.hostname or "")
    host = f"[{host}]" if ":" in host else host

    def spelled(scheme: str) -> str:
        port = ports[scheme] if default or given is None else given
        return f"{scheme}://{host}:{port}/{rest}"

    current = spelled(plain)
    earlier = [spelled(s) for s in sorted(ports) if s != plain]
    return (current, *(e for e in earlier if e != current))


PathOf = Callable[[Url], str]
"""What a URL's path names, spelled one way (a product's `migration_path`)."""


def same_place(a: Url, b: Url, ports: Mapping[str, int] | None = None,
               paths: Mapping[str, PathOf] | None = None) -> bool:
    """Whether two URLs name the same topic or queue (same scheme family, host, port, path and
    `queue`): copying a place onto itself would find its own copies in the ledger and remove
    them. `ports` holds each scheme's default port (a product's `migration_ports`): a URL
    without a port means it. Two ports are the same when they are equal or both their schemes'
    defaults (`amqp://h` and `amqps://h` reach one broker). `paths` spells each scheme's path
    one way (`migration_path`: `amqp://h` and `amqp://h/%2F` name one virtual host); by
    default the path as given."""
    defaults = ports or {}
    spellings = paths or {}

    def place(url: Url) -> tuple[str, str, str, str]:
        host = canonical_host(url.parts.hostname or "")
        family = url.scheme.split("+")[0].rstrip("s")
        path_of = spellings.get(url.scheme)
        return family, host, url.path if path_of is None else path_of(url), url.option("queue")

    def port(url: Url) -> tuple[int | None, bool]:
        default = defaults.get(url.scheme)
        given = url.parts.port
        return (default if given is None else given), given is None or given == default

    if place(a) != place(b):
        return False
    (port_a, default_a), (port_b, default_b) = port(a), port(b)
    return port_a == port_b or (default_a and default_b)
