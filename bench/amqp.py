"""Publish -> deliver -> ack throughput: the gateway on RabbitMQ vs a naive aio-pika client.

Both runs move the same number of persistent messages (1 KiB by default) through a fresh durable
queue on the same broker, in one run:

* gateway: `gateway serve --backend rabbitmq` as its own process; the client publishes over gRPC in
  batches of `--batch` from `--publishers` concurrent publishers (each on a PublishStream;
  `--unary`: one Publish call per batch) while one push consumer (policy
  rabbitmq, prefetch `--prefetch`) acks each message, the client batching the settles. Inside,
  the back end publishes each batch with one wait for all its confirms, acks with
  `basic.ack(multiple)` where it can and consumes with a large prefetch;
* naive: plain aio-pika straight to the broker: publish one message at a time waiting for its
  confirm, consume with a callback that acks each message.

Prints both rates and their ratio.

    .venv/bin/python -m bench.amqp --messages 20000 --url amqp://guest:guest@127.0.0.1:5672/
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid

import aio_pika
from aio_pika.abc import AbstractIncomingMessage

from bench.gateway import (
    proc_stats,
    publish_all,
    start_process,
    start_profiler,
    stop_process,
    stop_profiler,
)
from gateway.client import GatewayClient
from gateway.v1 import gateway_pb2

GROUP = "bench-group"


async def consume_all(
    client: GatewayClient, topic: str, count: int, prefetch: int, subscribed: asyncio.Event
) -> None:
    """Ack `count` deliveries; settles go out in batches (`ack_later`)."""
    async with client.consume(topic, GROUP, policy="rabbitmq", prefetch=prefetch) as stream:
        subscribed.set()
        pending: list[asyncio.Future[gateway_pb2.SettleResult]] = []
        async for message in stream:
            pending.append(message.ack_later())
            if len(pending) >= count:
                break
        results = await asyncio.gather(*pending)
    failed = sum(1 for result in results if not result.ok)
    if failed:
        raise RuntimeError(f"{failed} acks failed")


async def run_gateway(args: argparse.Namespace) -> tuple[float, float, float]:
    """Seconds for publish -> deliver -> ack of `args.messages` through the gateway process, and
    the CPU seconds the gateway process and this client process spent meanwhile."""
    topic = f"bench.gateway.{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as data_dir:
        command = [
            sys.executable, "-m", "gateway.cli", "serve", "--backend", "rabbitmq",
            "--rabbitmq-url", args.url, "--data-dir", data_dir, "--listen", "127.0.0.1:0",
            "--log-level", "warning",
        ]  # fmt: skip
        proc, target = await start_process(command)
        try:
            async with GatewayClient(target) as client:
                await client.publish(topic, [b"warm-up"])
                async with client.consume(topic, GROUP, policy="rabbitmq") as stream:
                    first = await stream.next(10.0)
                    if first is None:
                        raise RuntimeError("warm-up message not delivered")
                    await first.ack()
                subscribed = asyncio.Event()
                consumer = asyncio.ensure_future(
                    consume_all(client, topic, args.messages, args.prefetch, subscribed)
                )
                await subscribed.wait()
                spy = await start_profiler(args.profile, proc.pid)
                gateway_cpu, client_cpu = proc_stats(proc.pid).cpu_s, time.process_time()
                started = time.perf_counter()
                await publish_all(client, topic, args, stamped=False)
                await consumer
                elapsed = time.perf_counter() - started
                gateway_cpu = proc_stats(proc.pid).cpu_s - gateway_cpu
                client_cpu = time.process_time() - client_cpu
                await stop_profiler(spy)
        finally:
            await stop_process(proc)
            await cleanup(args.url, topic)
    return elapsed, gateway_cpu, client_cpu


async def run_naive(url: str, count: int, size: int) -> float:
    """Seconds for a plain aio-pika client: confirmed publish one by one, consume, ack."""
    queue_name = f"bench.naive.{uuid.uuid4().hex[:8]}"
    connection = await aio_pika.connect_robust(url)
    body = os.urandom(size)
    try:
        publisher = await connection.channel(publisher_confirms=True)
        consumer = await connection.channel()
        await consumer.set_qos(prefetch_count=1000)
        queue = await consumer.declare_queue(queue_name, durable=True)
        finished = asyncio.Event()
        received = 0

        async def on_message(message: AbstractIncomingMessage) -> None:
            nonlocal received
            await message.ack()
            received += 1
            if received >= count:
                finished.set()

        started = time.perf_counter()
        await queue.consume(on_message)
        for _ in range(count):
            await publisher.default_exchange.publish(
                aio_pika.Message(body=body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                routing_key=queue_name,
            )
        await finished.wait()
        elapsed = time.perf_counter() - started
    finally:
        await connection.close()
        await cleanup(url, queue_name)
    return elapsed


async def cleanup(url: str, queue: str) -> None:
    connection = await aio_pika.connect(url)
    try:
        channel = await connection.channel()
        await channel.queue_delete(queue)
    finally:
        await connection.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--publishers", type=int, default=4)
    parser.add_argument("--prefetch", type=int, default=1000)
    parser.add_argument("--unary", action="store_true",
                        help="publish with a Publish call per batch instead of PublishStream")
    parser.add_argument("--profile", default="",
                        help="write py-spy raw stacks of the gateway to this file")
    args = parser.parse_args()
    gateway_s, gateway_cpu, client_cpu = await run_gateway(args)
    naive_s = await run_naive(args.url, args.messages, args.size)
    gateway_rate = args.messages / gateway_s
    naive_rate = args.messages / naive_s
    print(
        f"messages={args.messages} size={args.size}B persistent; gateway: gRPC batches of "
        f"{args.batch} ({'Publish calls' if args.unary else 'PublishStream'}), "
        f"{args.publishers} publishers, prefetch {args.prefetch}"
    )
    print(f"gateway on RabbitMQ   {gateway_rate:9.0f} msg/s ({gateway_s:.2f} s)")
    print(f"  CPU: gateway {gateway_cpu:.2f} s, gRPC client {client_cpu:.2f} s")
    print(f"naive aio-pika        {naive_rate:9.0f} msg/s ({naive_s:.2f} s)")
    print(f"ratio gateway/naive: {gateway_rate / naive_rate:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
