"""Consume + fail against consume + ack on the same messages: `python -m bench.fail`.

For each fraction in `--fail` (default 0, 0.5 and 1; 0 is the ack-only baseline) a fresh
`gateway serve` (embedded store, fsync on) gets N messages of `--size` bytes published first;
then one push consumer (`--policy`, rocketmq by default: a failure publishes a retry copy to
`%RETRY%group`) takes them and fails that fraction of them with the policy's own delay (in the
settle batch's compact `fails`; `--explicit`: a `Settlement` with an empty `Fail` each) and
acks the rest. The consume phase ends when every message has been settled once and the gateway
has answered: the retries themselves are not waited for (one that falls due during the run is
acked and not counted).

Prints, per fraction (the median of `--rounds` runs, the fractions taken in turn): consume
msgs/s, the gateway's CPU µs per message in the consume phase (with its store writer process;
the writer's share and this client's CPU apart), and both as a ratio to the ack-only run of the
same invocation. The machine may be shared: CPU per message is the steadier figure.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from typing import Any

from bench.gateway import (
    proc_stats,
    publish_all,
    start_process,
    start_profiler,
    stop_process,
    stop_profiler,
    thread_cpu,
)
from gateway.client import GatewayClient
from gateway.v1 import gateway_pb2


def failing(i: int, fraction: float) -> bool:
    """Spread the failures evenly: message i fails when it crosses the next multiple."""
    return int((i + 1) * fraction) > int(i * fraction)


async def consume(client: GatewayClient, topic: str, args: argparse.Namespace,
                  fraction: float) -> dict[str, int]:
    futures: list[Any] = []
    seen = 0
    late = 0
    async with client.consume(topic, "bench-group", policy=args.policy,
                              prefetch=args.prefetch) as stream:
        async for msg in stream:
            if msg.attempt > 1:  # a retry fell due during the run: not what is measured
                late += 1
                msg.ack_quietly()
                continue
            if failing(seen, fraction):
                if args.explicit:  # a Settlement with its own result, as before `fails`
                    futures.append(stream.settle_nowait(gateway_pb2.Settlement(
                        receipt=msg.delivery.receipt, fail=gateway_pb2.Fail())))
                else:
                    futures.append(msg.fail_later())
            else:
                msg.ack_quietly()
            seen += 1
            if seen >= args.messages:
                break
        await asyncio.wait_for(stream.drain(), 300)
        if stream.failures:
            raise RuntimeError(f"{len(stream.failures)} acks failed: {stream.failures[0]}")
    bad = [f.result() for f in futures if not f.result().ok]
    if bad:
        raise RuntimeError(f"{len(bad)} fails failed: {bad[0]}")
    return {"failed": len(futures), "late": late}


async def run_one(args: argparse.Namespace, fraction: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=args.dir) as data_dir:
        command = [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", data_dir,
                   "--listen", "127.0.0.1:0", "--log-level", "warning",
                   *(["--cache-mb", str(args.cache_mb)] if args.cache_mb >= 0 else [])]
        proc, target = await start_process(command)
        try:
            async with GatewayClient(target) as client:
                topic = "bench"
                await client.publish(topic, [b"warm"])
                async with client.consume(topic, "bench-group", policy=args.policy) as stream:
                    first = await stream.next(10.0)
                    assert first is not None
                    await first.ack()
                await publish_all(client, topic, args)
                profile = f"{args.profile}.{fraction:g}" if args.profile else ""
                spy = await start_profiler(profile, proc.pid)
                before = proc_stats(proc.pid)
                writer = thread_cpu(proc.pid).get("writer process", 0.0)
                own = time.process_time()
                started = time.perf_counter()
                counts = await consume(client, topic, args, fraction)
                elapsed = time.perf_counter() - started
                own = time.process_time() - own
                after = proc_stats(proc.pid)
                writer = thread_cpu(proc.pid).get("writer process", 0.0) - writer
                await stop_profiler(spy)
        finally:
            await stop_process(proc)
    return {"rate": args.messages / elapsed, "elapsed": elapsed,
            "cpu_us": (after.cpu_s - before.cpu_s) * 1e6 / args.messages,
            "client_us": own * 1e6 / args.messages,
            "writer_us": writer * 1e6 / args.messages, **counts}


async def run(args: argparse.Namespace) -> None:
    fractions = [float(f) for f in args.fail.split(",")]
    runs: dict[float, list[dict[str, Any]]] = {f: [] for f in fractions}
    for _ in range(args.rounds):  # the fractions in turn, so a load change hits them alike
        for fraction in fractions:
            runs[fraction].append(await run_one(args, fraction))
    results = [(fraction, _median(runs[fraction])) for fraction in fractions]
    base = results[0][1]
    print(f"fail: {args.messages} x {args.size} B published first, then consumed by one push "
          f"consumer, policy {args.policy}, prefetch {args.prefetch}, fsync on, fails "
          f"{'explicit' if args.explicit else 'compact'}; median of {args.rounds} round(s); "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"  {'failing':>8} {'msgs/s':>9} {'CPU us/msg':>11} {'rate/first':>11} "
          f"{'CPU first/this':>15} {'writer us':>10} {'client us':>10} {'failed':>7} "
          f"{'late':>5}")
    for fraction, r in results:
        print(f"  {fraction * 100:>7.0f}% {r['rate']:>9,.0f} {r['cpu_us']:>11.1f} "
              f"{r['rate'] / base['rate']:>11.2f} {base['cpu_us'] / r['cpu_us']:>15.2f} "
              f"{r['writer_us']:>10.1f} {r['client_us']:>10.1f} "
              f"{r['failed']:>7} {r['late']:>5}")


def _median(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the rounds (the lower middle one for an even count)."""
    return {key: sorted(r[key] for r in rounds)[(len(rounds) - 1) // 2] for key in rounds[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=100, help="publish batch size")
    parser.add_argument("--publishers", type=int, default=4)
    parser.add_argument("--prefetch", type=int, default=1000)
    parser.add_argument("--policy", default="rocketmq")
    parser.add_argument("--fail", default="0,0.5,1",
                        help="fractions of messages failed, comma-separated; the first is the "
                             "baseline the others are compared with")
    parser.add_argument("--rounds", type=int, default=3,
                        help="run every fraction this many times, in turn; print the medians "
                             "(one run of 50,000 takes about a second: its ratio swings by "
                             "up to 0.2 with the machine's load)")
    parser.add_argument("--explicit", action="store_true",
                        help="fail with explicit settlements (each answered on its own) instead "
                             "of the compact `fails` of a settle batch")
    parser.add_argument("--dir", default=None, help="where to put the store (default: tmp)")
    parser.add_argument("--cache-mb", type=int, default=-1,
                        help="the gateway's --cache-mb (default: its own): retry copies share "
                             "the cache with the backlog, which then is read from disk")
    parser.add_argument("--profile", default="",
                        help="write py-spy raw stacks of each consume phase to FILE.<fraction>")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
