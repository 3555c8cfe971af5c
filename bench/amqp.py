"""Throughput of publish -> fetch -> ack through the RabbitMQ back end vs a naive aio-pika client.

Both move the same number of 1 KiB persistent messages through a fresh durable queue on the same
broker in one run: the back end publishes in confirmed batches and acks what each fetch returns;
the naive client publishes one message at a time waiting for each confirm, then consumes with a
callback that acks each message. Prints both rates and their ratio.

    .venv/bin/python -m bench.amqp --messages 5000 --url amqp://guest:guest@127.0.0.1:5672/
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

import aio_pika
from aio_pika.abc import AbstractIncomingMessage

from adapters.amqp.backend import RabbitMQBackend, wall_clock_ms
from gateway.backend.base import OutMessage


async def run_backend(url: str, count: int, size: int, batch: int) -> float:
    """Seconds to publish, fetch and ack `count` messages through `RabbitMQBackend`."""
    topic = f"bench.backend.{uuid.uuid4().hex[:8]}"
    backend = RabbitMQBackend(url, prefetch=1000)
    await backend.open()
    body = b"x" * size
    try:
        await backend.fetch(topic, "bench", 0, wall_clock_ms())
        started = time.perf_counter()

        async def produce() -> None:
            for offset in range(0, count, batch):
                n = min(batch, count - offset)
                await backend.publish(topic, [OutMessage(body=body) for _ in range(n)])

        producer = asyncio.create_task(produce())
        done = 0
        while done < count:
            got = await backend.fetch(topic, "bench", 1000, wall_clock_ms())
            if got:
                await backend.ack([m.lease for m in got])
                done += len(got)
            else:
                await backend.wait(topic, "bench", 1.0)
        await producer
        elapsed = time.perf_counter() - started
    finally:
        await backend.close()
        await cleanup(url, topic)
    return elapsed


async def run_naive(url: str, count: int, size: int) -> float:
    """Seconds for a plain aio-pika client: confirmed publish one by one, consume, ack."""
    queue_name = f"bench.naive.{uuid.uuid4().hex[:8]}"
    connection = await aio_pika.connect_robust(url)
    body = b"x" * size
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    backend_s = await run_backend(args.url, args.messages, args.size, args.batch)
    naive_s = await run_naive(args.url, args.messages, args.size)
    backend_rate = args.messages / backend_s
    naive_rate = args.messages / naive_s
    print(f"messages={args.messages} size={args.size}B batch={args.batch}")
    print(f"backend  publish->fetch->ack: {backend_rate:10.0f} msg/s ({backend_s:.2f} s)")
    print(f"naive    publish->consume->ack: {naive_rate:8.0f} msg/s ({naive_s:.2f} s)")
    print(f"ratio backend/naive: {backend_rate / naive_rate:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
