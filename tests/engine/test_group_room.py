"""At `max_groups`, a new group is made room for by forgetting the subscriptions nobody uses
(no consumer, no pull going on, nothing unsettled or held): made-up names cannot lock every new
group out until a restart. A group in use is never forgotten, and a forgotten group comes back
where the back end kept it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from gateway.engine.config import EngineConfig
from gateway.errors import TooManyGroups
from tests.engine.harness import TOPIC, Harness, idle


@pytest_asyncio.fixture
async def capped() -> AsyncIterator[Harness]:
    harness = Harness(EngineConfig(backend_name="memory", max_groups=3))
    await harness.engine.start()
    try:
        yield harness
    finally:
        await harness.engine.close()


async def test_idle_groups_make_room_and_busy_ones_stay(capped: Harness) -> None:
    h = capped
    await h.publish(b"a", b"b")
    busy = await h.receive(h.spec("rocketmq-simple", group="busy"))  # unsettled: in use
    consumer = await h.open(h.spec("rocketmq", group="pushed"))  # a consumer: in use
    assert [d.body for d in h.pushed(consumer)] == [b"a", b"b"]
    for d in await h.receive(h.spec("rocketmq-simple", group="idle")):
        assert (await h.ack(d)).ok  # nothing left unsettled: idle
    assert len(h.engine.subscriptions) == 3
    # The first new group forgets "idle" and takes its place.
    new = await h.receive(h.spec("rocketmq-simple", group="new"))
    assert [d.body for d in new] == [b"a", b"b"]
    assert set(h.engine.subscriptions) == {(TOPIC, "busy"), (TOPIC, "pushed"), (TOPIC, "new")}
    # The next one finds nothing idle: refused, naming the cap.
    with pytest.raises(TooManyGroups, match="max_groups"):
        await h.receive(h.spec("rocketmq-simple", group="other"))
    for d in busy:
        assert (await h.ack(d)).ok
    # Within a second of the last look, the subscriptions are not looked over again.
    with pytest.raises(TooManyGroups):
        await h.receive(h.spec("rocketmq-simple", group="other"))
    await h.advance(1000)
    assert [d.body for d in await h.receive(h.spec("rocketmq-simple", group="other"))] == [
        b"a", b"b"]
    assert set(h.engine.subscriptions) == {(TOPIC, "other"), (TOPIC, "pushed"), (TOPIC, "new")}
    # The busy ones' deliveries still settle.
    assert all([(await h.ack(d)).ok for d in new])


async def test_a_forgotten_group_resumes_where_it_was(capped: Harness) -> None:
    h = capped
    await h.publish(b"a", b"b", b"c")
    first = await h.receive(h.spec("rocketmq-simple", group="g"), n=1)
    assert [d.body for d in first] == [b"a"]
    assert (await h.ack(first[0])).ok
    for name in ("x", "y"):
        for d in await h.receive(h.spec("rocketmq-simple", group=name)):
            assert (await h.ack(d)).ok
    await h.advance(1000)
    assert await h.receive(h.spec("rocketmq-simple", group="z")) != []  # "g" is forgotten
    assert (TOPIC, "g") not in h.engine.subscriptions
    await h.advance(1000)
    again = await h.receive(h.spec("rocketmq-simple", group="g"))
    assert [d.body for d in again] == [b"b", b"c"]


async def test_a_pull_waiting_keeps_its_group(capped: Harness) -> None:
    h = capped
    for name in ("x", "y"):
        await h.receive(h.spec("rocketmq-simple", group=name, topic="other"))
    waiting = asyncio.ensure_future(
        h.engine.receive(h.spec("rocketmq-simple", group="waiting"), 10, None, 30_000))
    await idle()
    assert (TOPIC, "waiting") in h.engine.subscriptions
    await h.advance(1000)
    await h.receive(h.spec("rocketmq-simple", group="z", topic="other"))  # x or y goes
    assert (TOPIC, "waiting") in h.engine.subscriptions
    await h.publish(b"late")
    assert [d.body for d in await asyncio.wait_for(waiting, 5)] == [b"late"]
