"""Which consumer of a subscription gets a message, on the manual clock: failover's one active
consumer (told when that changes, and the next one taking over what the first left unsettled),
and key-shared key affinity (a key stays with its consumer; one that joins or leaves moves only
its own keys)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from gateway.engine.api import ConsumerType
from gateway.errors import AlreadyExists

from .harness import Harness, idle

FAILOVER = ConsumerType.FAILOVER
KEY_SHARED = ConsumerType.KEY_SHARED


async def test_failover_has_one_active_consumer_and_the_next_takes_over(h: Harness) -> None:
    spec = h.spec("pulsar-nack", consumer_type=FAILOVER)
    first = await h.open(spec)
    second = await h.open(spec)
    notices: dict[str, list[bool]] = defaultdict(list)
    for consumer in (first, second):
        consumer.watch_active(lambda active, c=consumer: notices[c.id].append(active))
    assert (first.active, second.active) == (True, False)
    await h.publish(b"a", b"b")
    got = h.pushed(first)
    assert [d.body for d in got] == [b"a", b"b"] and h.pushed(second) == []
    assert (await h.ack(got[0])).ok
    await first.close()
    await idle()
    assert notices == {first.id: [False], second.id: [True]}
    (again,) = h.pushed(second)  # what the first left unsettled
    assert again.body == b"b"
    await h.publish(b"c")
    assert [d.body for d in h.pushed(second)] == [b"c"]
    third = await h.open(spec)
    assert (second.active, third.active) == (True, False)  # the earlier one stays active


async def test_exclusive_and_shared_consumers_are_active(h: Harness) -> None:
    shared = [await h.open(h.spec("pulsar-nack", group="s")) for _ in range(2)]
    assert all(c.active for c in shared)


async def test_an_exclusive_subscription_takes_one_consumer(h: Harness) -> None:
    exclusive = h.spec("pulsar-nack", group="x", consumer_type=ConsumerType.EXCLUSIVE)
    first = await h.open(exclusive)
    for second in (exclusive, h.spec("pulsar-nack", group="x")):
        with pytest.raises(AlreadyExists):
            await h.open(second)
    # An exclusive consumer cannot join a group that has consumers of another type either.
    await h.open(h.spec("pulsar-nack", group="y"))
    with pytest.raises(AlreadyExists):
        await h.open(h.spec("pulsar-nack", group="y", consumer_type=ConsumerType.EXCLUSIVE))
    # Once the first has gone, the next one is taken.
    await first.close()
    await idle()
    assert (await h.open(exclusive)).active


def owners(deliveries: dict[str, list[str]]) -> dict[str, set[str]]:
    """Key -> the consumers that got it."""
    out: dict[str, set[str]] = defaultdict(set)
    for consumer, keys in deliveries.items():
        for key in keys:
            out[key].add(consumer)
    return out


async def take(h: Harness, consumers: list) -> dict[str, list[str]]:  # type: ignore[type-arg]
    got: dict[str, list[str]] = {}
    for consumer in consumers:
        deliveries = h.pushed(consumer)
        for d in deliveries:
            assert (await h.ack(d)).ok
        got[consumer.id] = [d.key for d in deliveries]
    return got


async def test_key_shared_keeps_each_key_with_one_consumer_in_order(h: Harness) -> None:
    spec = h.spec("pulsar-nack", consumer_type=KEY_SHARED)
    consumers = [await h.open(spec) for _ in range(3)]
    keys = [f"key-{i}" for i in range(30)]
    await h.publish_keyed(*((k, f"{k}/{n}".encode()) for n in range(3) for k in keys))
    for consumer in consumers:
        bodies = [d.body.decode() for d in consumer.outbox]
        for key in keys:
            mine = [b for b in bodies if b.startswith(key + "/")]
            assert mine in ([], [f"{key}/{n}" for n in range(3)])  # all of a key, in order
    first = owners(await take(h, consumers))
    assert all(len(who) == 1 for who in first.values())
    assert len({c for who in first.values() for c in who}) == 3  # keys spread over all three

    # A fourth joins: keys move only to it.
    consumers.append(await h.open(spec))
    await h.publish_keyed(*((k, b"x") for k in keys))
    second = owners(await take(h, consumers))
    for key in keys:
        assert second[key] == first[key] or second[key] == {consumers[3].id}
    # One leaves: only its keys move.
    gone = consumers.pop(0)
    await gone.close()
    await idle()
    await h.publish_keyed(*((k, b"y") for k in keys))
    third = owners(await take(h, consumers))
    for key in keys:
        if gone.id not in second[key]:
            assert third[key] == second[key]


async def test_a_key_shared_consumer_without_room_holds_back_only_its_keys(h: Harness) -> None:
    spec = h.spec("pulsar-nack", consumer_type=KEY_SHARED)
    slow = await h.open(spec, credit=2)
    fast = await h.open(spec, credit=1000)
    keys = [f"k{i}" for i in range(20)]
    await h.publish_keyed(*((k, f"{k}/{n}".encode()) for n in range(4) for k in keys))
    slow_got = [d.body.decode() for d in slow.outbox]
    fast_got = [d.body.decode() for d in fast.outbox]
    assert len(slow_got) == 2 and slow.credit == 0  # never more than its credit
    slow_keys = {b.split("/")[0] for b in slow_got}
    fast_keys = {b.split("/")[0] for b in fast_got}
    assert slow_keys.isdisjoint(fast_keys) and fast_keys
    assert len(fast_got) == 4 * len(fast_keys)  # the fast one's keys all went
    # Credit for the slow one: the rest of its keys, each in order.
    for d in list(slow.outbox):
        assert (await h.ack(d)).ok
    slow.outbox.clear()
    slow.add_credit(1000)
    await idle()
    rest = slow_got + [d.body.decode() for d in slow.outbox]
    owned = {k for k in keys if k not in fast_keys}
    for key in owned:
        assert [b for b in rest if b.startswith(key + "/")] == [f"{key}/{n}" for n in range(4)]
    assert len(rest) == 4 * len(owned)
