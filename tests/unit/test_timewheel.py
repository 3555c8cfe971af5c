"""TimerWheel: exact firing order, replace/cancel, far and past deadlines, against a heap model."""

from __future__ import annotations

import heapq
import random
import tracemalloc

import pytest

from gateway import timewheel
from gateway.timewheel import TimerWheel

T0 = 1_700_000_000_000
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


def test_fires_in_deadline_order_and_only_when_due() -> None:
    wheel = TimerWheel(T0)
    for key, offset in [(1, 30), (2, 10), (3, 20), (4, 5)]:
        wheel.schedule(T0 + offset, key)
    assert wheel.advance(T0 + 4) == []
    assert wheel.advance(T0 + 20) == [4, 2, 3]
    assert len(wheel) == 1
    assert 2 not in wheel
    assert 1 in wheel
    assert wheel.advance(T0 + 29) == []
    assert wheel.advance(T0 + 30) == [1]
    assert len(wheel) == 0
    assert wheel.next_deadline_ms() is None


def test_ties_fire_together_each_once() -> None:
    wheel = TimerWheel(T0)
    for key in range(100):
        wheel.schedule(T0 + 7, key)
    wheel.schedule(T0 + 7, 5)  # same key, same deadline: still once
    fired = wheel.advance(T0 + 50)
    assert sorted(fired) == list(range(100))
    assert len(fired) == 100


def test_reschedule_replaces_deadline() -> None:
    wheel = TimerWheel(T0)
    wheel.schedule(T0 + 100, 7)
    wheel.schedule(T0 + 5_000, 7)
    assert wheel.deadline_of(7) == T0 + 5_000
    assert len(wheel) == 1
    assert wheel.advance(T0 + 4_999) == []
    assert wheel.advance(T0 + 5_000) == [7]
    # moving it earlier works too, and the old later entry does not fire again
    wheel.schedule(T0 + 9_000, 8)
    wheel.schedule(T0 + 6_000, 8)
    assert wheel.next_deadline_ms() == T0 + 6_000
    assert wheel.advance(T0 + 6_000) == [8]
    assert wheel.advance(T0 + 20_000) == []


def test_cancel() -> None:
    wheel = TimerWheel(T0)
    wheel.schedule(T0 + 10, 1)
    wheel.schedule(T0 + 20, 2)
    assert wheel.cancel(1) is True
    assert wheel.cancel(1) is False
    assert wheel.cancel(99) is False
    assert wheel.deadline_of(1) is None
    assert wheel.next_deadline_ms() == T0 + 20
    assert wheel.advance(T0 + 100) == [2]
    # cancel then schedule again in the same bucket: fires once, at the new time
    wheel.schedule(T0 + 200, 3)
    wheel.cancel(3)
    wheel.schedule(T0 + 200, 3)
    assert wheel.advance(T0 + 300) == [3]


def test_past_and_present_deadlines_fire_at_next_advance() -> None:
    wheel = TimerWheel(T0)
    wheel.schedule(T0 - 50, 1)
    wheel.schedule(T0, 2)
    wheel.schedule(T0 - 100, 3)
    assert wheel.next_deadline_ms() == T0 - 100
    assert wheel.advance(T0) == [3, 1, 2]
    wheel.schedule(T0 - 1, 4)
    assert wheel.advance(T0) == [4]  # no time passed, still fires


def test_advance_never_goes_backwards() -> None:
    wheel = TimerWheel(T0)
    wheel.schedule(T0 + 10, 1)
    assert wheel.advance(T0 - 1_000) == []
    assert wheel.now_ms == T0
    wheel.schedule(T0 + 5, 2)
    assert wheel.advance(T0 + 10) == [2, 1]


@pytest.mark.parametrize("offset", [HOUR_MS // 2, 12 * HOUR_MS, 3 * DAY_MS, 400 * DAY_MS])
def test_far_deadline_fires_exactly_after_big_and_small_steps(offset: int) -> None:
    wheel = TimerWheel(T0)
    wheel.schedule(T0 + offset, 1)
    wheel.schedule(T0 + offset + 1, 2)
    assert wheel.next_deadline_ms() == T0 + offset
    assert wheel.advance(T0 + offset - 60_000) == []
    now = T0 + offset - 60_000
    while now < T0 + offset - 1:  # walk the last minute in 1 s steps, then 1 ms steps
        now = min(now + 1_000, T0 + offset - 1)
        assert wheel.advance(now) == []
    assert wheel.next_deadline_ms() == T0 + offset
    assert wheel.advance(T0 + offset) == [1]
    assert wheel.advance(T0 + offset + 1) == [2]


def test_one_big_jump_fires_everything_in_order() -> None:
    wheel = TimerWheel(T0)
    rng = random.Random(3)
    deadlines = {key: T0 + rng.randrange(1, 30 * DAY_MS) for key in range(5_000)}
    for key, deadline in deadlines.items():
        wheel.schedule(deadline, key)
    fired = wheel.advance(T0 + 30 * DAY_MS)
    assert sorted(fired) == sorted(deadlines)
    assert [deadlines[k] for k in fired] == sorted(deadlines.values())


def test_coarse_tick_fires_by_exact_deadline_within_a_tick() -> None:
    wheel = TimerWheel(T0, tick_ms=100)
    wheel.schedule(T0 + 150, 1)
    wheel.schedule(T0 + 120, 2)
    wheel.schedule(T0 + 199, 3)
    assert wheel.next_deadline_ms() == T0 + 120
    assert wheel.advance(T0 + 149) == [2]
    assert wheel.next_deadline_ms() == T0 + 150
    assert wheel.advance(T0 + 150) == [1]
    assert wheel.advance(T0 + 400) == [3]


def test_key_range_is_checked() -> None:
    wheel = TimerWheel(T0)
    with pytest.raises(ValueError):
        wheel.schedule(T0 + 1, -1)
    with pytest.raises(ValueError):
        wheel.schedule(T0 + 1, 2**62)
    wheel.schedule(T0 + 1, 2**62 - 1)
    assert wheel.advance(T0 + 1) == [2**62 - 1]
    assert "x" not in wheel
    with pytest.raises(ValueError):
        TimerWheel(T0, tick_ms=0)


def test_stale_entries_are_compacted_away() -> None:
    wheel = TimerWheel(T0)
    for round_ in range(50):
        for key in range(5_000):
            wheel.schedule(T0 + HOUR_MS + round_ * 1_000 + key, key)
    assert len(wheel) == 5_000
    assert wheel._stored <= 2 * len(wheel) + (1 << 16) + 1
    assert wheel.next_deadline_ms() == T0 + HOUR_MS + 49_000
    fired = wheel.advance(T0 + 2 * HOUR_MS)
    assert fired == list(range(5_000))


@pytest.mark.parametrize("move_budget", [2048, 3])
@pytest.mark.parametrize("tick_ms", [1, 7, 1_000])
@pytest.mark.parametrize("seed", range(12))
def test_matches_heap_model(
    seed: int, tick_ms: int, move_budget: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random schedule/cancel/advance against a heap; a tiny move budget forces partial splits."""
    monkeypatch.setattr(timewheel, "_MOVE_BUDGET", move_budget)
    rng = random.Random(seed * 1_000 + tick_ms)
    now = T0 + rng.randrange(10**6)
    wheel = TimerWheel(now, tick_ms)
    model: dict[int, int] = {}
    for _ in range(1_500):
        op = rng.random()
        if op < 0.5:
            key = rng.randrange(300)
            span = rng.choice([5, 1_000, 100_000, 10**7, 10**9])
            deadline = now + rng.randrange(-span // 10, span)
            wheel.schedule(deadline, key)
            model[key] = deadline
        elif op < 0.6:
            key = rng.randrange(300)
            assert wheel.cancel(key) == (key in model)
            model.pop(key, None)
        elif op < 0.9:
            now += rng.choice([0, 1, 3, 50, 5_000, 10**6, 10**8])
            heap = [(d, k) for k, d in model.items()]
            heapq.heapify(heap)
            expected: list[tuple[int, int]] = []
            while heap and heap[0][0] <= now:
                expected.append(heapq.heappop(heap))
            fired = wheel.advance(now)
            got = [(model.pop(k), k) for k in fired]
            assert [d for d, _ in got] == [d for d, _ in expected]
            assert sorted(got) == expected
        assert wheel.next_deadline_ms() == (min(model.values()) if model else None)
        assert len(wheel) == len(model)
    for key, deadline in model.items():
        assert wheel.deadline_of(key) == deadline


def test_dense_far_bucket_is_split_gradually_and_fires_exactly() -> None:
    wheel = TimerWheel(T0)
    rng = random.Random(11)
    far = T0 + 20 * 60_000
    model: dict[int, int] = {}
    for key in range(10_000):  # one dense second, 20 min out: one bucket of the upper levels
        model[key] = far + rng.randrange(1_000)
    for key in range(10_000, 10_100):  # sparse near timers on the way there
        model[key] = T0 + rng.randrange(1, 20 * 60_000)
    for key, deadline in model.items():
        wheel.schedule(deadline, key)
    now = T0
    saw_partial_split = False
    while model:
        now += rng.choice([1, 10, 250, 5_000])
        fired = wheel.advance(now)
        saw_partial_split |= any(0 < m.pos < len(m.bucket) for m in wheel._moves)
        expected = sorted((d, k) for k, d in model.items() if d <= now)
        got = [(model.pop(k), k) for k in fired]
        assert [d for d, _ in got] == [d for d, _ in expected]
        assert sorted(got) == expected
        assert wheel.next_deadline_ms() == (min(model.values()) if model else None)
        assert len(wheel) == len(model)
    assert saw_partial_split  # the dense bucket was re-placed over several advances


def test_key_at_the_first_tick_of_a_bucket_still_being_split_fires_on_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(timewheel, "_MOVE_BUDGET", 1)
    wheel = TimerWheel(T0)
    first = ((T0 + 10 * 60_000) >> 10) << 10  # the first tick of an upper-level bucket
    for key in range(2, 5_000):
        wheel.schedule(first + 1 + key % 900, key)
    wheel.schedule(first, 1)  # last in its bucket, so still waiting when its tick comes
    for i in range(1, 700):
        wheel.schedule(first - 700_000 + i * 1_000, 10_000 + i)  # keeps level 0 busy
    wheel.schedule(first - 1, 20_000)
    now = T0
    while now < first - 1_000:
        now += 1_000
        wheel.advance(now)
    assert wheel.advance(first - 1) == [20_000]
    assert wheel.advance(first) == [1]
    assert wheel.next_deadline_ms() == first + 1


def test_next_deadline_looks_into_a_bucket_still_being_split(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(timewheel, "_MOVE_BUDGET", 1)
    wheel = TimerWheel(T0)
    first = ((T0 + 10 * 60_000) >> 10) << 10
    for key in range(2, 2_000):
        wheel.schedule(first + 1 + key % 900, key)
    wheel.schedule(first, 1)  # the earliest, and the last entry of its bucket
    now = T0
    while now < first - 1_000:
        now += 1_000
        assert wheel.advance(now) == []
        assert wheel.next_deadline_ms() == first


def test_memory_per_pending_timer_is_small() -> None:
    count = 60_000
    rng = random.Random(5)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        wheel = TimerWheel(T0)
        for key in range(1_000, 1_000 + count):
            wheel.schedule(T0 + 1 + rng.randrange(12 * HOUR_MS), key)
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(wheel) == count
    assert used / count < 200


def test_earliest_deadline_is_kept_across_advances_that_fire_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A caller asking for the earliest deadline after every small advance (the store's `wait`
    after each fetch) gets the cached answer: the far bucket is not searched again each time."""
    wheel = TimerWheel(T0)
    for key in range(10_000):
        wheel.schedule(T0 + 2 * HOUR_MS + key, key)
    assert wheel.next_deadline_ms() == T0 + 2 * HOUR_MS
    searches = 0
    find = TimerWheel._find_next

    def counted(self: TimerWheel) -> int | None:
        nonlocal searches
        searches += 1
        return find(self)

    monkeypatch.setattr(TimerWheel, "_find_next", counted)
    for step in range(1, 200):
        assert wheel.advance(T0 + step) == []
        assert wheel.next_deadline_ms() == T0 + 2 * HOUR_MS
    assert searches == 0
    wheel.schedule(T0 + 500, 20_000)
    assert wheel.next_deadline_ms() == T0 + 500
    assert wheel.advance(T0 + 500) == [20_000]
    assert wheel.next_deadline_ms() == T0 + 2 * HOUR_MS
