"""Timer benchmark: 1,000,000 deadlines on TimerService vs one `loop.call_at` per timer.

Run with ``python -m bench.timers [--count N] [--spread-ms MS] [--lead-ms MS]``.

Each side schedules `count` timers on a running asyncio loop with deadlines spread uniformly over
`spread_ms`, starting `lead_ms` from now (the lead leaves room for the scheduling itself, which
holds the loop; without it the figures would measure the scheduling stall, not the timers). It
then waits for every timer and prints lateness (wall time at the callback minus the deadline)
p50/p99/max, the schedule rate, and, for TimerService, bytes per pending timer measured with
tracemalloc while all timers are pending (a separate pass: tracemalloc slows everything down).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import time
import tracemalloc
from array import array
from dataclasses import dataclass

from gateway.engine.clock import SystemClock
from gateway.engine.timers import TimerService


@dataclass
class Result:
    """What one side measured."""

    name: str
    schedule_s: float
    lateness_ms: array[float]
    fire_wall_s: float
    """Wall time from the end of scheduling until the last timer fired."""
    fire_cpu_s: float
    """CPU time this thread used in that interval: the cost of firing, whatever the load."""

    def pct(self, q: float) -> float:
        data = self.lateness_ms
        return data[min(len(data) - 1, int(q * len(data)))]


def _offsets(count: int, spread_ms: int, seed: int) -> array[int]:
    rng = random.Random(seed)
    return array("q", (int(rng.random() * spread_ms) for _ in range(count)))


async def _run_wheel(offsets: array[int], lead_ms: int) -> Result:
    clock = SystemClock()
    count = len(offsets)
    lateness = array("d", bytes(8 * count))
    deadlines = array("q", bytes(8 * count))
    done = asyncio.get_running_loop().create_future()
    fired = 0

    def on_due(keys: list[int]) -> None:
        nonlocal fired
        now = time.time() * 1000
        for key in keys:
            lateness[key] = now - deadlines[key]
        fired += len(keys)
        if fired == count and not done.done():
            done.set_result(None)

    service = TimerService(clock, on_due)
    service.start()
    base = clock.now_ms() + lead_ms
    schedule = service.schedule
    started = time.perf_counter()
    for key, offset in enumerate(offsets):
        deadline = base + offset
        deadlines[key] = deadline
        schedule(deadline, key)
    schedule_s = time.perf_counter() - started
    wall, cpu = time.perf_counter(), time.thread_time()
    await done
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    await service.stop()
    return Result("TimerService", schedule_s, array("d", sorted(lateness)), wall, cpu)


async def _run_call_at(offsets: array[int], lead_ms: int) -> Result:
    loop = asyncio.get_running_loop()
    count = len(offsets)
    lateness = array("d", bytes(8 * count))
    done = loop.create_future()
    fired = 0

    def fire(key: int, deadline: int) -> None:
        nonlocal fired
        lateness[key] = time.time() * 1000 - deadline
        fired += 1
        if fired == count:
            done.set_result(None)

    base = SystemClock().now_ms() + lead_ms
    started = time.perf_counter()
    for key, offset in enumerate(offsets):
        deadline = base + offset
        # same wall-clock deadline, expressed on the loop's monotonic clock
        loop.call_at(loop.time() + (deadline - time.time() * 1000) / 1000, fire, key, deadline)
    schedule_s = time.perf_counter() - started
    wall, cpu = time.perf_counter(), time.thread_time()
    await done
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    return Result("loop.call_at", schedule_s, array("d", sorted(lateness)), wall, cpu)


def _bytes_per_timer(offsets: array[int], lead_ms: int) -> float:
    """Traced bytes added by a TimerService holding every timer (keys and deadlines included).

    The service is not started, so nothing fires while the timers are being counted.
    """
    clock = SystemClock()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        service = TimerService(clock, lambda keys: None)
        base = clock.now_ms() + lead_ms
        for key, offset in enumerate(offsets):
            service.schedule(base + offset, key)
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(service) == len(offsets)
    return used / len(offsets)


def _report(result: Result, first_deadline_ms: float) -> None:
    count = len(result.lateness_ms)
    print(
        f"{result.name:>13}: lateness p50 {result.pct(0.50):7.3f} ms  "
        f"p99 {result.pct(0.99):7.3f} ms  max {result.lateness_ms[-1]:8.3f} ms  "
        f"schedule {count / result.schedule_s:,.0f}/s ({result.schedule_s:.2f} s)"
    )
    print(f"{'':>15}firing used {result.fire_cpu_s:.2f} s CPU over {result.fire_wall_s:.2f} s wall")
    if result.schedule_s * 1000 > first_deadline_ms:
        print(f"{'':>15}warning: scheduling outlasted the lead; raise --lead-ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--spread-ms", type=int, default=10_000)
    parser.add_argument("--lead-ms", type=int, default=15_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    offsets = _offsets(args.count, args.spread_ms, args.seed)
    print(
        f"{args.count:,} timers, deadlines uniform over {args.spread_ms} ms "
        f"starting {args.lead_ms} ms after scheduling begins"
    )
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    wheel = asyncio.run(_run_wheel(offsets, args.lead_ms))
    gc.collect()
    peer = asyncio.run(_run_call_at(offsets, args.lead_ms))
    gc.collect()
    print(f"load average after the lateness runs: {os.getloadavg()[0]:.2f}")
    per_timer = _bytes_per_timer(offsets, args.lead_ms)
    _report(wheel, args.lead_ms)
    _report(peer, args.lead_ms)
    print(f"TimerService bytes per pending timer (tracemalloc, all pending): {per_timer:.1f}")
    for label, q in (("p50", 0.50), ("p99", 0.99), ("max", 1.0)):
        ours, theirs = wheel.pct(q), peer.pct(q)
        ratio = ours / theirs if theirs > 0 else float("inf")
        print(f"lateness {label} ratio TimerService / call_at: {ratio:.4f}")
    print(f"schedule rate ratio TimerService / call_at: {peer.schedule_s / wheel.schedule_s:.2f}")


if __name__ == "__main__":
    main()
