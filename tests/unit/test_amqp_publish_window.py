"""The RabbitMQ back end's publish window (`pipeline.Window`) and the order of one topic's
batches (`backend_send.Turns`): room handed out in arrival order, given back by a waiter that
stops waiting once it got it, and a batch that gives up waiting for its turn does not let the
next one overtake the batch before it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from adapters.amqp.backend_send import Turns
from adapters.amqp.pipeline import WINDOW, Window


class Channel:
    """What a window uses of a channel: futures that a close fails (`close`)."""

    def __init__(self) -> None:
        self.futures: list[asyncio.Future[Any]] = []

    def create_future(self) -> asyncio.Future[Any]:
        future = asyncio.get_running_loop().create_future()
        self.futures.append(future)
        return future

    def close(self) -> None:
        for future in self.futures:
            if not future.done():
                future.set_exception(ConnectionError("closed"))


def window() -> tuple[Window, Channel]:
    channel = Channel()
    return Window(channel), channel  # type: ignore[arg-type]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_room_is_handed_out_in_arrival_order() -> None:
    room, _ = window()
    await room.take(WINDOW - 10)
    order: list[str] = []

    async def taker(name: str, n: int) -> None:
        await room.take(n)
        order.append(name)

    big = asyncio.ensure_future(taker("big", 100))
    await settle()
    small = asyncio.ensure_future(taker("small", 5))  # fits, but waits behind "big"
    await settle()
    assert order == []
    room.give(95)
    await settle()
    assert order == ["big", "small"]
    assert room.used == WINDOW - 10 - 95 + 100 + 5
    await asyncio.gather(big, small)


async def test_a_waiter_cancelled_after_it_got_room_gives_it_back() -> None:
    room, _ = window()
    await room.take(WINDOW)
    waiter = asyncio.ensure_future(room.take(50))
    await settle()
    room.give(WINDOW)  # hands the 50 to the waiter...
    waiter.cancel()  # ...which stops waiting before it runs
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert room.used == 0
    assert not room.waiting


async def test_a_closed_channel_fails_its_waiters_and_forgets_them() -> None:
    room, channel = window()
    await room.take(WINDOW)
    waiter = asyncio.ensure_future(room.take(1))
    await settle()
    channel.close()
    with pytest.raises(ConnectionError):
        await waiter
    assert not room.waiting


async def test_a_batch_that_gives_up_its_turn_keeps_the_next_behind_the_one_before() -> None:
    turns = Turns()
    order: list[str] = []
    first_may_finish = asyncio.Event()

    async def batch(name: str, hold: asyncio.Event | None = None) -> None:
        async with turns.turn("t"):
            order.append(name)
            if hold is not None:
                await hold.wait()

    first = asyncio.ensure_future(batch("first", first_may_finish))
    await settle()
    second = asyncio.ensure_future(batch("second"))
    await settle()
    third = asyncio.ensure_future(batch("third"))
    await settle()
    second.cancel()  # gives up while "first" still writes
    await settle()
    assert order == ["first"]  # "third" still waits for "first"
    first_may_finish.set()
    await asyncio.gather(first, third)
    with pytest.raises(asyncio.CancelledError):
        await second
    assert order == ["first", "third"]
    assert not turns._last  # nothing kept once every batch is done


async def test_other_topics_do_not_wait() -> None:
    turns = Turns()
    hold = asyncio.Event()
    order: list[str] = []

    async def batch(topic: str, name: str, wait: bool) -> None:
        async with turns.turn(topic):
            order.append(name)
            if wait:
                await hold.wait()

    first = asyncio.ensure_future(batch("a", "a1", True))
    await settle()
    await batch("b", "b1", False)
    assert order == ["a1", "b1"]
    hold.set()
    await first
