"""The same aio-pika program against the gateway's AMQP port and against the real RabbitMQ on
this machine, in one run: `python -m bench.amqp_frontend`.

The program publishes persistent messages of `--size` bytes to a fresh durable queue with
publisher confirms (at most `--window` unconfirmed at a time) while a consumer on its own channel
(prefetch `--prefetch`) acks each one; both run at once. The gateway is `gateway serve
--amqp-listen` (embedded store, fsync on) in its own process. Rounds alternate gateway and
broker; prints msgs/s of each, their ratio per round and the median, and the CPU per message of
the gateway (with its store writer) and of the broker (the `beam.smp` process).

    .venv/bin/python -m bench.amqp_frontend --messages 20000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import aio_pika
from aio_pika.abc import AbstractIncomingMessage

from bench.gateway import proc_stats, start_process, stop_process

RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/"


async def program(url: str, args: argparse.Namespace) -> float:
    """Seconds to publish and consume `args.messages` (confirmed publishes, acked deliveries)."""
    queue_name = f"bench-amqp-{uuid.uuid4().hex[:8]}"
    body = os.urandom(args.size)
    connection = await aio_pika.connect(url)
    try:
        publisher = await connection.channel(publisher_confirms=True)
        consumer = await connection.channel()
        await consumer.set_qos(prefetch_count=args.prefetch)
        queue = await consumer.declare_queue(queue_name, durable=True)
        done = asyncio.Event()
        received = 0

        async def on_message(message: AbstractIncomingMessage) -> None:
            nonlocal received
            await message.ack()
            received += 1
            if received >= args.messages:
                done.set()

        await queue.consume(on_message)
        window = asyncio.Semaphore(args.window)
        exchange = publisher.default_exchange

        async def publish_one() -> None:
            try:
                await exchange.publish(aio_pika.Message(
                    body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT), routing_key=queue_name)
            finally:
                window.release()

        start = time.perf_counter()
        pending: set[asyncio.Task[None]] = set()
        for _ in range(args.messages):
            await window.acquire()
            task = asyncio.ensure_future(publish_one())
            pending.add(task)
            task.add_done_callback(pending.discard)
        await asyncio.gather(*pending)
        await asyncio.wait_for(done.wait(), 600)
        elapsed = time.perf_counter() - start
        await queue.delete(if_unused=False, if_empty=False)
        return elapsed
    finally:
        await connection.close()


def broker_pid() -> int | None:
    found = subprocess.run(["pgrep", "-f", "beam.smp.*rabbit"], capture_output=True, text=True)
    pids = [int(p) for p in found.stdout.split()]
    return pids[0] if pids else None


async def round_gateway(args: argparse.Namespace) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as data_dir:
        port = free_port()
        proc, _ = await start_process([
            sys.executable, "-m", "gateway.cli", "serve", "--data-dir", data_dir,
            "--listen", "127.0.0.1:0", "--amqp-listen", f"127.0.0.1:{port}",
            "--log-level", "warning"])
        try:
            before = proc_stats(proc.pid).cpu_s
            elapsed = await program(f"amqp://guest:guest@127.0.0.1:{port}/", args)
            cpu = proc_stats(proc.pid).cpu_s - before
        finally:
            await stop_process(proc)
    return elapsed, cpu


async def round_broker(args: argparse.Namespace) -> tuple[float, float]:
    pid = broker_pid()
    before = proc_stats(pid).cpu_s if pid else 0.0
    elapsed = await program(args.url, args)
    cpu = proc_stats(pid).cpu_s - before if pid else float("nan")
    return elapsed, cpu


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def run(args: argparse.Namespace) -> None:
    n = args.messages
    print(f"aio-pika program: {n} persistent messages of {args.size} B, publisher confirms "
          f"(window {args.window}), consumer prefetch {args.prefetch}, publish and consume at once")
    ratios = []
    for i in range(args.rounds):
        gw_s, gw_cpu = await round_gateway(args)
        mq_s, mq_cpu = await round_broker(args)
        ratio = (n / gw_s) / (n / mq_s)
        ratios.append(ratio)
        print(f"round {i + 1}: gateway {n / gw_s:>8,.0f} msgs/s ({gw_cpu * 1e6 / n:.0f} us CPU/msg)"
              f"   rabbitmq {n / mq_s:>8,.0f} msgs/s ({mq_cpu * 1e6 / n:.0f} us CPU/msg)"
              f"   ratio {ratio:.2f}")
    print(f"median ratio gateway/rabbitmq: {statistics.median(ratios):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--window", type=int, default=1000,
                        help="unconfirmed publishes in flight at most")
    parser.add_argument("--prefetch", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--url", default=RABBITMQ_URL, help="the RabbitMQ broker to compare with")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
