"""A consumer's close or cancel is carried out to its end even when the task that called it is
cancelled meanwhile, as a gRPC stream's handler is while it closes its consumer. A close cut
short at its give-back's write left a broadcast consumer's own group for good: never dropped
(anonymous), its idle timer never armed (named)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from structlog.testing import capture_logs

from gateway.backend.base import OutMessage
from gateway.engine.config import EngineConfig
from gateway.engine.dispatch import Consumer
from gateway.errors import Unavailable

from .harness import GROUP, TOPIC, Harness, idle
from .semantics import SECOND

IDLE_MS = 60 * SECOND


class SlowWrites:
    """Holds the back end's next `carry_out` until `go` is set (then fails it, with `fail`)."""

    def __init__(self, h: Harness, fail: bool = False) -> None:
        self.go = asyncio.Event()
        self.waiting = asyncio.Event()
        real = h.backend.carry_out

        async def held(copies: Sequence[OutMessage], acks: object, releases: object) -> object:
            self.waiting.set()
            await self.go.wait()
            if fail:
                raise Unavailable("the store is away")
            return await real(copies, acks, releases)  # type: ignore[arg-type]

        h.backend.carry_out = held  # type: ignore[method-assign]


async def close_cancelled(h: Harness, consumer: Consumer, fail: bool = False) -> None:
    """Close `consumer` from a task cancelled during the close's write."""
    slow = SlowWrites(h, fail)
    task = asyncio.ensure_future(consumer.close())
    await slow.waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    slow.go.set()
    await idle()


@pytest.mark.parametrize("cancel_first", [False, True])
async def test_an_anonymous_group_goes_though_its_close_was_cancelled(
    cancel_first: bool,
) -> None:
    h = Harness()
    await h.engine.start()
    try:
        await h.publish(b"1", b"2")
        consumer = await h.open(h.spec("rocketmq", broadcast=True), credit=1)
        (first,) = h.pushed(consumer)
        assert first.body == b"1"
        (own,) = [g for t, g in h.engine.subscriptions if g.startswith(f"{GROUP}#")]
        if cancel_first:  # as the gRPC front end does: cancel, then close
            await consumer.cancel()
        await close_cancelled(h, consumer)
        assert (TOPIC, own) not in h.engine.subscriptions
    finally:
        await h.engine.close()


async def test_a_named_groups_idle_timer_is_armed_though_its_close_was_cancelled() -> None:
    h = Harness(EngineConfig(backend_name="memory", broadcast_idle_ms=IDLE_MS))
    await h.engine.start()
    try:
        await h.publish(b"1", b"2")
        spec = h.spec("rocketmq", broadcast=True, consumer_id="lobby")
        consumer = await h.open(spec, credit=1)
        assert [d.body for d in h.pushed(consumer)] == [b"1"]
        await close_cancelled(h, consumer)
        assert consumer.receipts == {}
        await h.advance(IDLE_MS - 1)
        assert (TOPIC, f"{GROUP}#lobby") in h.engine.subscriptions
        await h.advance(1)
        assert (TOPIC, f"{GROUP}#lobby") not in h.engine.subscriptions
    finally:
        await h.engine.close()


async def test_a_leave_that_fails_after_its_caller_went_is_logged() -> None:
    h = Harness()
    await h.engine.start()
    try:
        await h.publish(b"1")
        consumer = await h.open(h.spec("rocketmq"), credit=1)
        assert len(h.pushed(consumer)) == 1
        with capture_logs() as logs:
            await close_cancelled(h, consumer, fail=True)
        said = [e for e in logs if e["event"] == "a consumer's leave failed"]
        assert [e["error"] for e in said] == ["the store is away"], logs
    finally:
        await h.engine.close()
