"""Throughput of the embedded store with fsync on: `python -m bench.store`.

Publishes 100k messages of 1 KiB in batches of 100 from several concurrent publishers, then
fetches and acks them all with several consumers of one group, and prints msgs/s each way.
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import tempfile
import time

from gateway.backend.base import OutMessage
from gateway.store import EmbeddedStore


async def publish_all(store: EmbeddedStore, total: int, batch: int, concurrency: int) -> float:
    body = b"x" * 1024
    batches = [min(batch, total - start) for start in range(0, total, batch)]
    queue: asyncio.Queue[int] = asyncio.Queue()
    for size in batches:
        queue.put_nowait(size)

    async def publisher() -> None:
        while not queue.empty():
            size = queue.get_nowait()
            await store.publish("bench", [OutMessage(body=body) for _ in range(size)])

    started = time.perf_counter()
    await asyncio.gather(*(publisher() for _ in range(concurrency)))
    return time.perf_counter() - started


async def consume_all(store: EmbeddedStore, total: int, batch: int, concurrency: int) -> float:
    done = 0

    async def consumer() -> None:
        nonlocal done
        while done < total:
            got = await store.fetch("bench", "bench-group", batch, time.time_ns() // 1_000_000)
            if not got:
                await store.wait("bench", "bench-group", 0.05)
                continue
            done += len(got)
            await store.ack([m.lease for m in got])

    started = time.perf_counter()
    await asyncio.gather(*(consumer() for _ in range(concurrency)))
    return time.perf_counter() - started


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        store = EmbeddedStore(pathlib.Path(tmp), fsync=not args.no_fsync)
        await store.open()
        try:
            tx0 = store.transactions
            elapsed = await publish_all(store, args.messages, args.batch, args.publishers)
            tx1 = store.transactions
            print(
                f"publish: {args.messages} x 1 KiB in batches of {args.batch}, "
                f"{args.publishers} publishers, fsync={'off' if args.no_fsync else 'on'}: "
                f"{args.messages / elapsed:,.0f} msgs/s ({elapsed:.2f} s, {tx1 - tx0} commits)"
            )
            elapsed = await consume_all(store, args.messages, args.batch, args.consumers)
            tx2 = store.transactions
            print(
                f"fetch+ack: {args.consumers} consumers, batches of {args.batch}: "
                f"{args.messages / elapsed:,.0f} msgs/s ({elapsed:.2f} s, {tx2 - tx1} commits)"
            )
        finally:
            await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--publishers", type=int, default=8)
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--no-fsync", action="store_true")
    parser.add_argument("--dir", default=None, help="where to put the store (default: tmp)")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
