"""A producer's own send time (`EnginePort.publish`'s `born`): kept as the message's born time
on its first delivery, its retries and its dead letter; out of range refused by name."""

from __future__ import annotations

import pytest

from gateway.backend import OutMessage
from gateway.engine.api import SettleAction
from gateway.errors import InvalidArgument

from .harness import GROUP, TOPIC, Harness

BORN = 1_600_000_000_123


async def test_born_is_kept_on_every_delivery_retry_and_dead_letter(h: Harness) -> None:
    spec = h.spec("rocketmq", {"max_retries": "1"})
    await h.engine.publish(TOPIC, [OutMessage(b"aged"), OutMessage(b"new")], born=[BORN, 0])
    first = {d.body: d for d in await h.receive(spec)}
    assert first[b"aged"].born_ms == BORN
    assert first[b"new"].born_ms == 0  # the store time stands for it
    assert first[b"aged"].properties == {}  # the born time is not a user property
    assert (await h.fail(first[b"aged"])).ok
    await h.advance(10_000)
    retry = await h.one(spec)
    assert (retry.body, retry.attempt, retry.born_ms) == (b"aged", 2, BORN)
    assert (await h.settle(retry.receipt, SettleAction.DEAD_LETTER)).ok
    (dead,) = await h.stored(f"%DLQ%{GROUP}")
    assert dead.properties["x-gateway-born-ms"] == str(BORN)


@pytest.mark.parametrize("born", [[-1], [253_402_300_800_000], [BORN, BORN]])
async def test_a_born_time_out_of_range_or_count_is_refused(h: Harness, born: list[int]) -> None:
    with pytest.raises(InvalidArgument) as caught:
        await h.engine.publish(TOPIC, [OutMessage(b"x")], born=born)
    assert "born" in str(caught.value)
    assert await h.stored(TOPIC) == []
