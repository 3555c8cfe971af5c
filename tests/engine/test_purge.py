"""Purging a group through the engine's admin verb: what waits for delivery goes (ready, delayed,
waiting retries, in the topic and in the group's retry topic, and ordered retries the engine
holds), deliveries in flight stay with their consumers: an ack commits one, a failure retries it
under the policy, and the count is only what was removed (RabbitMQ's queue.purge keeps
unacknowledged messages the same way)."""

from __future__ import annotations

from gateway.engine.api import Delivery

from .harness import GROUP, TOPIC, Harness
from .semantics import HOUR

SECOND = 1000


def bodies(deliveries: list[Delivery]) -> list[bytes]:
    return [d.body for d in deliveries]


async def test_purge_leaves_deliveries_in_flight_to_their_consumers(h: Harness) -> None:
    admin = h.engine.admin
    spec = h.spec("rocketmq")
    await h.publish(b"acked", b"failed", b"waiting", b"ready")
    acked, failed, waiting = await h.receive(spec, n=3)
    assert (await h.fail(waiting)).ok  # a retry waiting in %RETRY%G
    assert await admin.purge(TOPIC, GROUP) == 2  # "ready" and the waiting retry
    view = await admin.describe(TOPIC, GROUP)
    assert (view.inflight, view.waiting_retry) == (2, 0)
    assert (await h.ack(acked)).ok
    assert (await h.fail(failed)).ok  # retried under the policy: 10 s
    assert (await admin.waiting_retries(TOPIC, GROUP)).total == 1
    await h.advance(10 * SECOND)
    (again,) = await h.receive(spec)
    assert (again.body, again.retries) == (b"failed", 1)
    assert await admin.purge(TOPIC, GROUP) == 0  # its retry copy, in flight, stays too
    assert (await h.ack(again)).ok
    await h.advance(HOUR)
    assert await h.receive(spec) == []


async def test_purge_takes_ordered_retries_the_engine_holds(h: Harness) -> None:
    """An ordered queue's failed head waits in the engine for its in-place retry: a waiting
    retry, which the purge takes (its key is free again); the key's next message, never
    delivered, goes too."""
    admin = h.engine.admin
    spec = h.spec("rocketmq-orderly", {"suspend_ms": 2000})
    await h.publish_keyed(("k1", b"k1-a"), ("k1", b"k1-b"), ("k2", b"k2-a"))
    head, other = await h.receive(spec)
    assert (await h.fail(head)).ok
    assert await admin.purge(TOPIC, GROUP) == 2  # k1-a's retry and k1-b
    assert (await h.ack(other)).ok
    await h.advance(2000)
    assert await h.receive(spec) == []
    await h.publish_keyed(("k1", b"k1-c"))
    assert bodies(await h.receive(spec)) == [b"k1-c"]

