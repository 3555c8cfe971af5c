"""Where a group starts and moving it, on the manual clock: a new group at the earliest message
or after the last one, an existing group keeping its position whatever a later subscriber asks,
and seeking a group to a message or a publish time (unsettled deliveries become stale)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.backend.base import Backend, OutMessage
from gateway.backend.memory import InMemoryBackend
from gateway.engine.api import InitialPosition, SettleAction, Settlement
from gateway.engine.config import EngineConfig
from gateway.engine.engine import Engine
from gateway.errors import InvalidArgument, NotFound, Unimplemented

from .harness import TOPIC, Harness, idle

LATEST = InitialPosition.LATEST
EARLIEST = InitialPosition.EARLIEST


def bodies(deliveries: list) -> list[bytes]:  # type: ignore[type-arg]
    return [d.body for d in deliveries]


async def test_a_new_group_starts_where_it_asks(h: Harness) -> None:
    await h.publish(b"old-1", b"old-2")
    latest = await h.open(replace(h.spec("pulsar-nack", group="latest"), initial_position=LATEST))
    earliest = await h.open(replace(h.spec("pulsar-nack", group="earliest"),
                                    initial_position=EARLIEST))
    pulled = replace(h.spec("pulsar-nack", group="pulled"), initial_position=LATEST)
    assert await h.receive(pulled) == []
    await h.publish(b"new")
    assert bodies(h.pushed(latest)) == [b"new"]
    assert bodies(h.pushed(earliest)) == [b"old-1", b"old-2", b"new"]
    assert bodies(await h.receive(pulled)) == [b"new"]


async def test_last_id_is_the_newest_message_of_the_topic(h: Harness) -> None:
    assert await h.engine.last_id(TOPIC) is None
    latest = await h.open(replace(h.spec("pulsar-nack", group="latest"), initial_position=LATEST))
    ids = await h.publish(b"a", b"b")
    (a, b) = h.pushed(latest)
    assert [(await h.ack(a)).ok, (await h.ack(b)).ok] == [True, True]
    assert await h.engine.last_id(TOPIC) == ids[-1]  # acked: still the newest
    with pytest.raises(InvalidArgument):
        await h.engine.last_id("")


async def test_an_existing_group_keeps_its_position(h: Harness) -> None:
    spec = replace(h.spec("pulsar-nack"), initial_position=LATEST)
    consumer = await h.open(spec)
    await h.publish(b"a")
    (a,) = h.pushed(consumer)
    assert (await h.ack(a)).ok
    await consumer.close()
    await h.publish(b"b")  # while nobody consumes
    for position in (LATEST, EARLIEST):
        again = await h.open(replace(spec, initial_position=position))
        assert bodies(h.pushed(again)) == [b"b"]
        await again.close()
        await idle()


async def test_a_group_created_empty_is_placed_once(h: Harness) -> None:
    """A Latest group on an empty topic starts at its beginning, and stays there."""
    spec = replace(h.spec("pulsar-nack"), initial_position=LATEST)
    consumer = await h.open(spec)
    await consumer.close()
    await idle()
    await h.publish(b"first")
    again = await h.open(spec)
    assert bodies(h.pushed(again)) == [b"first"]


async def test_seek_by_message_id_delivers_it_and_later_ones_again(h: Harness) -> None:
    spec = h.spec("pulsar-nack")
    consumer = await h.open(spec)
    ids = await h.publish(b"m0", b"m1", b"m2", b"m3")
    first = h.pushed(consumer)
    for d in first[:3]:
        assert (await h.ack(d)).ok
    await h.engine.seek(TOPIC, spec.group, message_id=ids[1])
    await idle()
    assert bodies(h.pushed(consumer)) == [b"m1", b"m2", b"m3"]
    # The delivery of m3 from before the seek is stale now.
    (stale,) = await h.engine.settle([Settlement(first[3].receipt, SettleAction.ACK)])
    assert not stale.ok and stale.error_code == "FAILED_PRECONDITION"


async def test_seek_by_publish_time(h: Harness) -> None:
    spec = h.spec("pulsar-nack")
    await h.publish(b"t0")
    await h.advance(1000)
    middle = h.now()
    await h.publish(b"t1")
    await h.advance(1000)
    await h.publish(b"t2")
    consumer = await h.open(spec)
    for d in h.pushed(consumer):
        assert (await h.ack(d)).ok
    await h.engine.seek(TOPIC, spec.group, publish_ms=middle)
    await idle()
    assert bodies(h.pushed(consumer)) == [b"t1", b"t2"]
    await h.engine.seek(TOPIC, spec.group, publish_ms=h.now() + 1)  # after everything
    await idle()
    assert h.pushed(consumer) == []
    await h.engine.seek(TOPIC, spec.group, publish_ms=0)  # before everything
    await idle()
    assert bodies(h.pushed(consumer)) == [b"t0", b"t1", b"t2"]


async def test_seek_forward_skips_messages(h: Harness) -> None:
    spec = h.spec("pulsar-nack")
    ids = await h.engine.publish(TOPIC, [OutMessage(b"s%d" % i) for i in range(4)])
    await h.engine.seek(TOPIC, spec.group, message_id=ids[2])
    assert bodies(await h.receive(spec)) == [b"s2", b"s3"]


async def test_bad_seeks_are_refused(h: Harness) -> None:
    await h.publish(b"x")
    with pytest.raises(NotFound):
        await h.engine.seek(TOPIC, "G", message_id="no-such-id")
    with pytest.raises(InvalidArgument):
        await h.engine.seek(TOPIC, "G")
    with pytest.raises(InvalidArgument):
        await h.engine.seek(TOPIC, "G", message_id="x", publish_ms=5)
    with pytest.raises(InvalidArgument):
        await h.engine.seek("", "G", publish_ms=5)


class PlacedByTheBroker(InMemoryBackend):
    """A back end that places groups itself (as the RabbitMQ and Pulsar back ends do)."""

    seekable = False

    async def create_group(self, topic: str, group: str, *, at_end: bool = False) -> bool:
        return await Backend.create_group(self, topic, group, at_end=at_end)

    async def seek(self, topic: str, group: str, *, message_id: str = "",
                   publish_ms: int = -1) -> None:
        await Backend.seek(self, topic, group, message_id=message_id, publish_ms=publish_ms)


async def test_a_back_end_that_places_groups_itself_refuses_seek() -> None:
    h = Harness()
    h.backend = PlacedByTheBroker(h.clock)
    h.engine = Engine(h.backend, h.registry, h.clock, EngineConfig(backend_name="memory"))
    await h.engine.start()
    try:
        await h.publish(b"old")
        latest = await h.open(replace(h.spec("pulsar-nack"), initial_position=LATEST))
        assert bodies(h.pushed(latest)) == [b"old"]  # the back end starts groups at its start
        assert not await h.engine.create_group(TOPIC, "other")
        with pytest.raises(Unimplemented, match="cannot move"):
            await h.engine.seek(TOPIC, "G", publish_ms=0)
    finally:
        await h.engine.close()


async def test_drop_group_forgets_a_group_nobody_consumes(h: Harness) -> None:
    spec = h.spec("pulsar-nack", group="reader")
    consumer = await h.open(spec)
    await h.publish(b"a")
    assert not await h.engine.drop_group(TOPIC, "reader")  # still consumed
    await consumer.close()
    await idle()
    assert await h.engine.drop_group(TOPIC, "reader")
    assert h.engine.group_state(TOPIC, "reader") is None
    assert not await h.engine.drop_group(TOPIC, "reader")
    # Nothing holds the topic back for it any more: the back end forgets what others acked.
    other = h.spec("pulsar-nack", group="other")
    assert (await h.ack(await h.one(other))).ok
    assert h.backend.trim() == 1


async def test_a_refused_seek_changes_nothing(h: Harness) -> None:
    spec = h.spec("pulsar-nack")
    consumer = await h.open(spec)
    await h.publish(b"a")
    (a,) = h.pushed(consumer)
    with pytest.raises(NotFound):
        await h.engine.seek(TOPIC, spec.group, message_id="f" * 32)
    assert (await h.ack(a)).ok  # still settleable: nothing was voided
