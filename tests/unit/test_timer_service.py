"""TimerService on a real asyncio loop: driven by ManualClock + poke(), and one real-time check."""

from __future__ import annotations

import asyncio
import time

import pytest
from structlog.testing import capture_logs

from gateway.engine.clock import ManualClock, SystemClock
from gateway.engine.timers import TimerService

T0 = 1_700_000_000_000


class Recorder:
    """Collects the batches handed to on_due."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    def __call__(self, keys: list[int]) -> None:
        self.batches.append(list(keys))

    @property
    def keys(self) -> list[int]:
        return [k for batch in self.batches for k in batch]


async def test_nothing_fires_until_clock_moves_and_poke() -> None:
    clock = ManualClock(T0)
    seen = Recorder()
    service = TimerService(clock, seen)
    service.start()
    try:
        service.schedule(T0 + 100, 1)
        service.schedule(T0 + 50, 2)
        service.schedule(T0 + 100, 3)
        assert len(service) == 3
        await asyncio.sleep(0)
        service.poke()
        assert seen.keys == []
        clock.advance(49)
        service.poke()
        assert seen.keys == []
        clock.advance(1)
        service.poke()
        assert seen.keys == [2]
        clock.advance(1_000)
        service.poke()
        assert seen.keys[0] == 2
        assert sorted(seen.keys[1:]) == [1, 3]
        assert len(service) == 0
    finally:
        await service.stop()


async def test_cancel_and_reschedule() -> None:
    clock = ManualClock(T0)
    seen = Recorder()
    service = TimerService(clock, seen)
    service.start()
    try:
        service.schedule(T0 + 10, 1)
        service.schedule(T0 + 20, 2)
        assert service.cancel(1) is True
        assert service.cancel(1) is False
        service.schedule(T0 + 5_000, 2)
        assert service.deadline_of(2) == T0 + 5_000
        clock.advance(1_000)
        service.poke()
        assert seen.keys == []
        clock.set(T0 + 5_000)
        service.poke()
        assert seen.keys == [2]
    finally:
        await service.stop()


async def test_batches_are_bounded_and_ordered() -> None:
    clock = ManualClock(T0)
    seen = Recorder()
    service = TimerService(clock, seen, max_batch=10)
    service.start()
    try:
        for key in range(35):
            service.schedule(T0 + 1 + key, key)
        clock.advance(100)
        service.poke()
        assert [len(b) for b in seen.batches] == [10, 10, 10, 5]
        assert seen.keys == list(range(35))
    finally:
        await service.stop()


async def test_failing_callback_is_logged_and_service_keeps_going() -> None:
    clock = ManualClock(T0)
    calls: list[list[int]] = []

    def on_due(keys: list[int]) -> None:
        calls.append(list(keys))
        if 1 in keys:
            raise RuntimeError("boom")

    service = TimerService(clock, on_due, max_batch=1)
    service.start()
    try:
        service.schedule(T0 + 1, 1)
        service.schedule(T0 + 2, 2)
        clock.advance(5)
        with capture_logs() as logs:
            service.poke()
        assert calls == [[1], [2]]
        assert [entry["event"] for entry in logs] == ["timer_on_due_failed"]
        assert logs[0]["log_level"] == "error"
        service.schedule(T0 + 10, 3)
        clock.advance(10)
        service.poke()
        assert calls[-1] == [3]
    finally:
        await service.stop()


async def test_callback_may_schedule_and_poke_reentrantly() -> None:
    clock = ManualClock(T0)
    seen: list[int] = []
    service: TimerService

    def on_due(keys: list[int]) -> None:
        seen.extend(keys)
        for key in keys:
            if key < 3:
                service.schedule(clock.now_ms(), key + 1)  # due already: fires on the re-check
                service.poke()

    service = TimerService(clock, on_due)
    service.start()
    try:
        service.schedule(T0 + 1, 0)
        clock.advance(1)
        service.poke()
        assert seen == [0, 1, 2, 3]
    finally:
        await service.stop()


async def test_poke_before_start_and_after_stop_does_nothing() -> None:
    clock = ManualClock(T0)
    seen = Recorder()
    service = TimerService(clock, seen)
    service.schedule(T0 + 1, 1)
    clock.advance(10)
    service.poke()
    assert seen.keys == []
    service.start()
    service.poke()
    assert seen.keys == [1]
    service.schedule(T0 + 20, 2)
    await service.stop()
    clock.advance(100)
    service.poke()
    assert seen.keys == [1]
    assert len(service) == 1


async def test_real_time_firing_on_system_clock() -> None:
    clock = SystemClock()
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    lateness_ms: dict[int, float] = {}
    deadlines: dict[int, int] = {}

    def on_due(keys: list[int]) -> None:
        fired_at = time.time() * 1000
        for key in keys:
            lateness_ms[key] = fired_at - deadlines[key]
        if len(lateness_ms) == len(deadlines) and not done.done():
            done.set_result(None)

    service = TimerService(clock, on_due)
    service.start()
    try:
        start = clock.now_ms()
        for key in range(200):
            deadlines[key] = start + 20 + key  # 20 ms .. 219 ms from now
            service.schedule(deadlines[key], key)
        service.schedule(start + 10, 999)
        assert service.cancel(999)
        await asyncio.wait_for(done, timeout=10)
    finally:
        await service.stop()
    assert set(lateness_ms) == set(deadlines)
    assert min(lateness_ms.values()) >= 0  # never early
    assert max(lateness_ms.values()) < 1_000  # generous: shared CI machines stall


@pytest.mark.parametrize("step_ms", [1, 250])
async def test_manual_clock_walk_fires_each_key_once(step_ms: int) -> None:
    clock = ManualClock(T0)
    seen = Recorder()
    service = TimerService(clock, seen)
    service.start()
    try:
        for key in range(500):
            service.schedule(T0 + (key * 37) % 5_000, key)
        while clock.now_ms() < T0 + 5_000:
            clock.advance(step_ms)
            service.poke()
        assert sorted(seen.keys) == list(range(500))
        fired_deadlines = [(k * 37) % 5_000 for k in seen.keys]
        assert fired_deadlines == sorted(fired_deadlines)
    finally:
        await service.stop()


def test_manual_clock_moves_only_when_told() -> None:
    clock = ManualClock(5)
    assert clock.now_ms() == 5
    assert clock.advance(10) == 15
    with pytest.raises(ValueError):
        clock.advance(-1)
    clock.set(3)
    assert clock.now_ms() == 3


def test_system_clock_is_wall_clock_ms() -> None:
    before = time.time() * 1000
    now = SystemClock().now_ms()
    after = time.time() * 1000
    assert before - 1 <= now <= after


async def test_stop_cancels_the_armed_handle() -> None:
    clock = SystemClock()
    seen = Recorder()
    service = TimerService(clock, seen)
    service.start()
    service.schedule(clock.now_ms() - 1, 1)  # already due: armed to fire on the next loop pass
    await service.stop()
    for _ in range(5):
        await asyncio.sleep(0)
    assert seen.keys == []
    assert 1 in service
    service.start()
    for _ in range(5):
        await asyncio.sleep(0)
    assert seen.keys == [1]
    await service.stop()
