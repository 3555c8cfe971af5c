"""`gateway migrate copy` throughput, next to what the source allows, in one run.

Three measurements on the same machine, each moving `--messages` persistent messages of
`--size` bytes, in `--rounds` rounds (the median is reported):

* floor: plain aio-pika consuming a RabbitMQ queue alone (manual acks, `basic.ack(multiple)` per
  `--batch`, prefetch 3 x batch): the rate the source allows a consumer on this machine; and
  the same with aiormq's deliveries as they come (no message object each), which is how the
  copy's RabbitMQ source consumes;
* rabbitmq -> embedded: the copy loop (`gateway.migrate.copy`, as `gateway migrate copy` runs it)
  from a RabbitMQ queue into a `gateway serve` process on its embedded store (fsync on), every
  copy recorded in the destination's ledger and every message acknowledged after its batch
  committed;
* gateway -> gateway: the same loop from one gateway process's group (ExportMessages,
  RemoveExported) into another's (ImportMessages).

Prints msgs/s and MB/s of each, the ratio of the copy from RabbitMQ to the floor, and the CPU
seconds the copy loop and the gateway processes spent.

    .venv/bin/python -m bench.migrate_copy --messages 20000 --url amqp://guest:guest@127.0.0.1:5672/
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass

import aio_pika
from aiormq.abc import DeliveredMessage

from adapters.amqp.migrate import side as amqp_side
from bench.gateway import proc_stats, start_process, stop_process
from gateway.client import GatewayClient
from gateway.migrate import copy as cp
from gateway.v1 import gateway_pb2


@dataclass
class Run:
    seconds: float
    cpu_s: float
    """CPU of this process (the copy loop or the consumer) during the run."""
    server_cpu_s: float = 0.0
    """CPU of the gateway processes (and their store writers) during the run."""


async def fill_queue(url: str, queue: str, count: int, size: int) -> None:
    connection = await aio_pika.connect(url)
    try:
        channel = await connection.channel()
        await channel.declare_queue(queue, durable=True)
        body = os.urandom(size)
        for start in range(0, count, 1000):
            await asyncio.gather(*(channel.default_exchange.publish(
                aio_pika.Message(body, message_id=f"m{i}",
                                 delivery_mode=aio_pika.DeliveryMode.PERSISTENT), queue)
                for i in range(start, min(count, start + 1000))))
    finally:
        await connection.close()


async def delete_queue(url: str, *queues: str) -> None:
    connection = await aio_pika.connect(url)
    try:
        channel = await connection.channel()
        for queue in queues:
            await channel.queue_delete(queue)
    finally:
        await connection.close()


async def floor(args: argparse.Namespace) -> Run:
    """aio-pika alone: consume and ack the queue."""
    queue = f"bench.migrate.floor.{uuid.uuid4().hex[:8]}"
    await fill_queue(args.url, queue, args.messages, args.size)
    connection = await aio_pika.connect(args.url)
    try:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=3 * args.batch)
        declared = await channel.declare_queue(queue, passive=True)
        done = asyncio.Event()
        seen = 0

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            nonlocal seen
            seen += 1
            if seen % args.batch == 0 or seen == args.messages:
                await message.ack(multiple=True)
            if seen == args.messages:
                done.set()

        cpu, started = time.process_time(), time.monotonic()
        tag = await declared.consume(on_message)
        await done.wait()
        run = Run(time.monotonic() - started, time.process_time() - cpu)
        await declared.cancel(tag)
        await channel.queue_delete(queue)
        return run
    finally:
        await connection.close()


async def floor_raw(args: argparse.Namespace) -> Run:
    """aiormq alone, as the copy's RabbitMQ source consumes (no message object per delivery):
    what the broker allows a consumer that does no more than the copy's source does."""
    queue = f"bench.migrate.raw.{uuid.uuid4().hex[:8]}"
    await fill_queue(args.url, queue, args.messages, args.size)
    connection = await aio_pika.connect(args.url)
    try:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=3 * args.batch)
        raw = await channel.get_underlay_channel()
        done = asyncio.Event()
        seen = 0

        async def on_message(message: DeliveredMessage) -> None:
            nonlocal seen
            seen += 1
            if seen % args.batch == 0 or seen == args.messages:
                await raw.basic_ack(message.delivery_tag or 0, multiple=True)
            if seen == args.messages:
                done.set()

        cpu, started = time.process_time(), time.monotonic()
        ok = await raw.basic_consume(queue, on_message, no_ack=False)
        await done.wait()
        run = Run(time.monotonic() - started, time.process_time() - cpu)
        await raw.basic_cancel(ok.consumer_tag or "")
        await channel.queue_delete(queue)
        return run
    finally:
        await connection.close()


async def start_gateway(data_dir: str) -> tuple[asyncio.subprocess.Process, str]:
    return await start_process([sys.executable, "-m", "gateway.cli", "serve", "--data-dir",
                                data_dir, "--listen", "127.0.0.1:0", "--log-level", "warning"])


async def rabbitmq_to_embedded(args: argparse.Namespace) -> Run:
    queue = f"bench.migrate.src.{uuid.uuid4().hex[:8]}"
    await fill_queue(args.url, queue, args.messages, args.size)
    with tempfile.TemporaryDirectory() as data_dir:
        proc, target = await start_gateway(data_dir)
        try:
            source = cp.open_side(f"{args.url}?queue={queue}", "source", cp.Credentials(),
                                  {"amqp": amqp_side})
            dest = cp.open_side(f"gateway://{target}/bench", "destination", cp.Credentials(),
                                {})
            run = await _timed(source, dest, args, [proc.pid])
            if run[1].taken != args.messages:
                raise RuntimeError(f"copied {run[1].taken} of {args.messages}")
            return run[0]
        finally:
            await stop_process(proc)
            await delete_queue(args.url, queue, queue + ".migrate-ledger")


async def gateway_to_gateway(args: argparse.Namespace) -> Run:
    with tempfile.TemporaryDirectory() as a_dir, tempfile.TemporaryDirectory() as b_dir:
        a, a_target = await start_gateway(a_dir)
        b, b_target = await start_gateway(b_dir)
        try:
            body = os.urandom(args.size)
            async with GatewayClient(a_target) as client:
                for start in range(0, args.messages, 1000):
                    count = min(1000, args.messages - start)
                    await client.publish("bench", [gateway_pb2.Message(body=body)
                                                   for _ in range(count)])
            source = cp.open_side(f"gateway://{a_target}/bench?group=g", "source",
                                  cp.Credentials(), {})
            dest = cp.open_side(f"gateway://{b_target}/bench?group=g", "destination",
                                cp.Credentials(), {})
            run, result = await _timed(source, dest, args, [a.pid, b.pid])
            if result.taken != args.messages:
                raise RuntimeError(f"copied {result.taken} of {args.messages}")
            return run
        finally:
            await stop_process(a)
            await stop_process(b)


async def _timed(source: object, dest: object, args: argparse.Namespace,
                 pids: list[int]) -> tuple[Run, cp.CopyResult]:
    before = sum(proc_stats(pid).cpu_s for pid in pids)
    cpu, started = time.process_time(), time.monotonic()
    result = await cp.copy(source, dest, batch=args.batch)  # type: ignore[arg-type]
    seconds = time.monotonic() - started
    run = Run(seconds, time.process_time() - cpu,
              sum(proc_stats(pid).cpu_s for pid in pids) - before)
    return run, result


def report(name: str, runs: list[Run], args: argparse.Namespace) -> float:
    seconds = statistics.median(r.seconds for r in runs)
    rate = float(args.messages / seconds)
    cpu = statistics.median(r.cpu_s for r in runs)
    server = statistics.median(r.server_cpu_s for r in runs)
    rounds = ", ".join(f"{args.messages / r.seconds:,.0f}" for r in runs)
    print(f"{name:22s} {rate:10,.0f} msg/s {rate * args.size / 1e6:7.1f} MB/s   "
          f"cpu {cpu:5.2f} s here, {server:5.2f} s in gateways   (rounds: {rounds})")
    return rate


async def main(args: argparse.Namespace) -> None:
    runs: dict[str, list[Run]] = {"floor": [], "floor (aiormq)": [],
                                  "rabbitmq -> embedded": [], "gateway -> gateway": []}
    for _ in range(args.rounds):
        runs["floor"].append(await floor(args))
        runs["floor (aiormq)"].append(await floor_raw(args))
        runs["rabbitmq -> embedded"].append(await rabbitmq_to_embedded(args))
        runs["gateway -> gateway"].append(await gateway_to_gateway(args))
    print(f"{args.messages} messages of {args.size} bytes, batch {args.batch}, "
          f"{args.rounds} round(s), median:")
    rates = {name: report(name, r, args) for name, r in runs.items()}
    print(f"rabbitmq -> embedded / aio-pika floor: "
          f"{rates['rabbitmq -> embedded'] / rates['floor']:.2f}; / aiormq floor: "
          f"{rates['rabbitmq -> embedded'] / rates['floor (aiormq)']:.2f}")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--batch", type=int, default=cp.DEFAULT_BATCH)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--url", default=os.environ.get("GATEWAY_AMQP_URL",
                                                   "amqp://guest:guest@127.0.0.1:5672/"))
    return p.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))

