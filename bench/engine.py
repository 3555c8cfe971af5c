"""Per-message cost of the engine alone, without gRPC: `python -m bench.engine`.

Drives an Engine over an EmbeddedStore in one process: publishes N messages in batches, then one
push consumer (policy rocketmq by default) takes deliveries and acks them in batches (or fails
a fraction of them with the policy's delay: `--fail 0.5`). Prints
msgs/s and µs of CPU per message for publishing and for the consume side (deliver + settle):
for the whole process, and for the event loop's thread alone (the engine without the store's
threads). With `--metrics` the Prometheus observer is attached, as in `gateway serve`;
`--profile FILE` writes a cProfile (thread CPU time) of the consume phase.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pathlib
import tempfile
import time
from collections.abc import Awaitable

from adapters import builtin_registry
from gateway.backend.base import OutMessage
from gateway.engine.api import SettleAction, Settlement, SubscriptionSpec
from gateway.engine.clock import SystemClock
from gateway.engine.config import EngineConfig
from gateway.engine.engine import Engine
from gateway.engine.observe import Observer
from gateway.store import EmbeddedStore


async def publish_all(engine: Engine, total: int, batch: int, size: int) -> None:
    body = b"x" * size
    for start in range(0, total, batch):
        count = min(batch, total - start)
        await engine.publish("bench", [OutMessage(body=body, properties={"k": "v"})
                                       for _ in range(count)])


async def consume_all(
    engine: Engine, total: int, policy: str, batch: int, fail: float = 0.0
) -> None:
    """Take `total` first deliveries and settle them in batches as the gRPC front end does:
    acks by receipt (`Engine.ack`), failures (a `fail` fraction, spread evenly, with the
    policy's delay) as settlements; a retry that falls due meanwhile is acked, not counted."""
    spec = SubscriptionSpec(topic="bench", group="bench-group", policy=policy)
    consumer = await engine.open_consumer(spec, credit=2 * batch)
    done = 0
    pending: set[asyncio.Future[object]] = set()
    while done < total:
        got = await consumer.next_batch(batch)
        acks: list[str] = []
        fails: list[Settlement] = []
        for d in got:
            if d.attempt == 1 and int((done + 1) * fail) > int(done * fail):
                fails.append(Settlement(d.receipt, SettleAction.FAIL))
            else:
                acks.append(d.receipt)
            done += d.attempt == 1
        work: list[Awaitable[object]] = [engine.ack(acks)] if acks else []
        if fails:
            work.append(engine.settle(fails))
        task: asyncio.Future[object] = asyncio.ensure_future(asyncio.gather(*work))
        pending.add(task)
        task.add_done_callback(pending.discard)
        consumer.add_credit(len(got))
    if pending:
        await asyncio.gather(*pending)
    await consumer.close()


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        store = EmbeddedStore(pathlib.Path(tmp), fsync=not args.no_fsync)
        observers: list[Observer] = []
        if args.metrics:
            from gateway.server.metrics import Metrics

            observers.append(Metrics())
        engine = Engine(store, builtin_registry(), SystemClock(), EngineConfig(),
                        observers=observers)
        await engine.start()
        try:
            cpu0, wall0, loop0 = time.process_time(), time.perf_counter(), time.thread_time()
            await publish_all(engine, args.messages, args.batch, args.size)
            cpu1, wall1, loop1 = time.process_time(), time.perf_counter(), time.thread_time()
            report("publish", args.messages, wall1 - wall0, cpu1 - cpu0, loop1 - loop0)
            profiler = cProfile.Profile(time.thread_time) if args.profile else None
            if profiler is not None:
                profiler.enable()
            cpu0, wall0, loop0 = time.process_time(), time.perf_counter(), time.thread_time()
            await consume_all(engine, args.messages, args.policy, args.batch, args.fail)
            cpu1, wall1, loop1 = time.process_time(), time.perf_counter(), time.thread_time()
            if profiler is not None:
                profiler.disable()
                profiler.dump_stats(args.profile)
            report("consume", args.messages, wall1 - wall0, cpu1 - cpu0, loop1 - loop0)
        finally:
            await engine.close()


def report(phase: str, count: int, wall: float, cpu: float, loop: float) -> None:
    """One line: rate, CPU per message (all threads), and of that the event loop's thread (the
    engine itself; the rest is the store's threads)."""
    print(f"{phase:8} {count / wall:9,.0f} msgs/s  {cpu / count * 1e6:6.1f} µs CPU/msg, "
          f"event loop {loop / count * 1e6:6.1f} µs/msg  ({wall:.2f} s wall, {cpu:.2f} s CPU)")


def main() -> None:
    from gateway.cli.serve_cmd import configure_logging

    configure_logging("info")  # as `gateway serve` does by default
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--policy", default="rocketmq")
    parser.add_argument("--fail", type=float, default=0.0,
                        help="fraction of deliveries failed with the policy's delay (0..1)")
    parser.add_argument("--metrics", action="store_true", help="attach the Prometheus observer")
    parser.add_argument("--no-fsync", action="store_true")
    parser.add_argument("--dir", default=None, help="where to put the store (default: tmp)")
    parser.add_argument("--profile", default="", help="write a cProfile of the consume phase")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
