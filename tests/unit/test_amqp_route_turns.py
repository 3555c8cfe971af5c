"""Routing one message a share of bindings at a time (`routeturns.route`): what it finds is what
testing every binding at once finds, exchange-to-exchange bindings and alternate exchanges
followed, even when bindings are added and removed while it waits for its next turn."""

from __future__ import annotations

import asyncio
import random

from adapters.amqp.frontend.routeturns import route
from adapters.amqp.frontend.routing import ROUTE_TURN, topic_matches
from adapters.amqp.frontend.topology import Binding, Topology

WORDS = ["a", "b", "c", "*", "#"]


def key(rng: random.Random, longest: int = 5) -> str:
    return ".".join(rng.choice(WORDS[:3] if longest > 5 else WORDS)
                    for _ in range(rng.randint(0, longest)))


def topic_topology(rng: random.Random, bindings: int) -> Topology:
    topology = Topology()
    for name in ("t", "inner", "alt"):
        topology.declare_exchange(name, "topic", passive=False, durable=False, auto_delete=False,
                                  internal=False, arguments={}, connection=1)
    topology.exchanges["t"].alternate = "alt"
    for i in range(40):
        topology.declare_queue(f"q{i}", connection=1, durable=False, exclusive=False,
                               auto_delete=False, arguments={})
    topology.bind(Binding("t", "inner", False, "a.#", {}), 1)
    topology.bind(Binding("alt", "q39", True, "#", {}), 1)
    topology.bind(Binding("inner", "q38", True, "*.b", {}), 1)
    for i in range(bindings):
        topology.bind(Binding("t", f"q{i % 38}", True, f"{key(rng)}.k{i % 50}", {}), 1)
    return topology


def expected(topology: Topology, routing_key: str) -> set[str]:
    bindings = topology.exchanges["t"].bindings
    found = {b.destination for b in bindings if b.to_queue and topic_matches(b.key, routing_key)}
    through_inner = topic_matches("a.#", routing_key)
    if not found and not through_inner:
        return {"q39"}  # nothing took it: the alternate exchange's binding
    if through_inner and topic_matches("*.b", routing_key):
        found.add("q38")
    return found


async def test_the_same_queues_as_every_binding_tested_at_once() -> None:
    rng = random.Random(11)
    topology = topic_topology(rng, 3 * ROUTE_TURN + 7)
    for _ in range(60):
        routing_key = f"{key(rng, 6)}.k{rng.randrange(60)}" if rng.random() < 0.9 else "a.b"
        got = await route(topology, topology.exchanges["t"], routing_key, {})
        assert got == expected(topology, routing_key) == topology.route(
            topology.exchanges["t"], routing_key, {}), routing_key


async def test_bindings_changed_while_it_waits_skip_and_repeat_none() -> None:
    topology = Topology()
    topology.declare_exchange("t", "direct", passive=False, durable=False, auto_delete=False,
                              internal=False, arguments={}, connection=1)
    count = 3 * ROUTE_TURN
    for i in range(count):
        topology.declare_queue(f"q{i}", connection=1, durable=False, exclusive=False,
                               auto_delete=False, arguments={})
        topology.bind(Binding("t", f"q{i}", True, "k", {}), 1)
    routed = asyncio.ensure_future(route(topology, topology.exchanges["t"], "k", {}))
    await asyncio.sleep(0)  # it tested the first share and waits for its next turn
    assert not routed.done()
    for i in range(ROUTE_TURN):  # the first share unbound: the others move down the list
        topology.unbind(Binding("t", f"q{i}", True, "k", {}))
    assert await routed == {f"q{i}" for i in range(count)}
