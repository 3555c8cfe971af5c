"""`adapters.pulsar.backend_handoff`: calls from client threads reach the loop in order, a bunch
per wake-up, and one call's failure does not cost the others theirs."""

from __future__ import annotations

import asyncio
import threading

from adapters.pulsar.backend_handoff import Handoff


async def test_calls_from_threads_run_on_the_loop_in_order_with_few_wake_ups() -> None:
    loop = asyncio.get_running_loop()
    handoff = Handoff(loop)
    got: list[tuple[int, int]] = []
    on_loop: list[bool] = []
    wakes = 0
    run = handoff._run

    def counted() -> None:
        nonlocal wakes
        wakes += 1
        run()

    handoff._run = counted  # type: ignore[method-assign]
    done = asyncio.Event()

    def record(thread: int, n: int) -> None:
        on_loop.append(threading.current_thread() is threading.main_thread())
        got.append((thread, n))
        if len(got) == 4 * 2000:
            done.set()

    def send(thread: int) -> None:
        for n in range(2000):
            handoff.call(record, thread, n)

    threads = [threading.Thread(target=send, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        await asyncio.to_thread(thread.join)
    await asyncio.wait_for(done.wait(), 10)
    assert all(on_loop)
    for t in range(4):
        assert [n for thread, n in got if thread == t] == list(range(2000))
    assert wakes < 4 * 2000


async def test_a_failing_call_leaves_the_others_and_later_bunches_running() -> None:
    handoff = Handoff(asyncio.get_running_loop())
    got: list[int] = []

    def boom() -> None:
        raise ValueError("boom")

    def send() -> None:
        handoff.call(got.append, 1)
        handoff.call(boom)
        handoff.call(got.append, 2)

    await asyncio.to_thread(send)
    for _ in range(10):
        await asyncio.sleep(0)
    assert got == [1, 2]
    await asyncio.to_thread(handoff.call, got.append, 3)  # the next bunch wakes the loop again
    for _ in range(10):
        await asyncio.sleep(0)
    assert got == [1, 2, 3]


def test_calls_after_the_loop_closed_are_dropped_quietly() -> None:
    loop = asyncio.new_event_loop()
    handoff = Handoff(loop)
    loop.close()
    handoff.call(print, "never")  # no error from a client thread
