"""Routing one message through an exchange's bindings a share at a time.

An exchange may hold up to the topology budget's bindings (about 100,000 topic bindings of long
wildcard patterns): testing all of them for one message takes seconds. Publishes and dead
letters are routed here, `ROUTE_TURN` bindings per turn of the event loop, so that one message
through such an exchange delays its own publisher, not every other client. What matches is what
`Topology.route` finds at once (the same matcher over the same bindings); the bindings of an
exchange larger than a turn are read from a copy taken when the message reaches it, so a
binding or unbinding by another client meanwhile neither skips nor repeats one (a message routed
while bindings change may see them as they were when it reached the exchange, as a message
published just before the change would)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from adapters.amqp.frontend.delayed import routing_kind
from adapters.amqp.frontend.routing import ROUTE_TURN, binding_matches
from adapters.amqp.frontend.values import FieldValue


class Exchange(Protocol):
    """What routing reads of an exchange (`topology.Exchange`)."""

    name: str
    kind: str
    alternate: str | None
    arguments: dict[str, FieldValue]

    @property
    def bindings(self) -> list[Any]:
        """Its bindings; a list never changed once handed out (a change makes a new one)."""
        ...


class Topology(Protocol):
    """What routing reads of the topology (`topology.Topology`)."""

    exchanges: Any
    bindings_tested: int


def routing(topology: Topology, exchange: Exchange, routing_key: str,
            headers: Mapping[str, FieldValue], found: set[str]) -> Iterator[None]:
    """Add to `found` the queue names a message reaches (exchange-to-exchange bindings and
    alternate exchanges followed, each exchange once; through the default exchange: the routing
    key itself), yielding after every `ROUTE_TURN` bindings tested."""
    if not exchange.name:
        if routing_key:
            found.add(routing_key)
        return
    seen: set[str] = set()
    todo = [exchange]
    exchanges = topology.exchanges
    while todo:
        current = todo.pop()
        if current.name in seen:
            continue
        seen.add(current.name)
        matched = False
        kind = routing_kind(current.kind, current.arguments)
        bindings = current.bindings  # as they are now: a bind or unbind makes a new list
        for start in range(0, len(bindings), ROUTE_TURN):
            if start:
                yield
            share = bindings[start:start + ROUTE_TURN]
            topology.bindings_tested += len(share)
            for b in share:
                if not binding_matches(kind, b.key, b.arguments, routing_key, headers):
                    continue
                matched = True
                if b.to_queue:
                    found.add(b.destination)
                elif b.destination in exchanges:
                    todo.append(exchanges[b.destination])
        if not matched and current.alternate in exchanges:
            todo.append(exchanges[current.alternate])


async def route(topology: Topology, exchange: Exchange, routing_key: str,
                headers: Mapping[str, FieldValue]) -> set[str]:
    """`Topology.route`, the event loop serving others after every `ROUTE_TURN` bindings."""
    found: set[str] = set()
    for _ in routing(topology, exchange, routing_key, headers, found):
        await asyncio.sleep(0)
    return found
