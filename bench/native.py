"""Native clients through their front ends, next to the gRPC API, in one run:
`python -m bench.native`.

One gateway per round (`gateway serve --pulsar-listen`, embedded store, fsync on; the RocketMQ
front end is served on the gRPC port). In each round every client publishes `--messages`
messages of `--size` bytes to a fresh topic while one consumer of its own acks them, both at
once; the figure is messages / (first publish .. last ack):

* grpc: the gateway's own API (`gateway.client`): 4 publishers, batches of 100; one push
  consumer, prefetch 1000, acks batched by the client;
* pulsar-batch / pulsar-nobatch: the unmodified `pulsar-client` through the Pulsar front end:
  `send_async` of every message (batching on: up to 1000 messages or 10 ms per batch; off: one
  message per SEND), at most `--window` unconfirmed; a Shared consumer (receiver queue 1000)
  acks each message in a thread;
* rocketmq: the RocketMQ 5 SDK through its front end: `send_async` (at most
  `--rocketmq-window` unconfirmed) of `--rocketmq-messages`, and a PushConsumer returning
  SUCCESS. The SDK makes one RPC per send, per receive and per ack: it is much slower, so it
  runs fewer messages.

The order of the clients alternates from round to round. Prints each figure, its ratio to the
gRPC API's rate of the same round, and the medians of the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any

from bench.gateway import proc_stats, start_process, stop_process
from gateway.client import GatewayClient


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


# ------------------------------------------------------------------------------ the clients
async def grpc_api(target: str, pulsar_url: str, args: argparse.Namespace) -> float:
    topic = _name("bench_grpc")
    body = os.urandom(args.size)
    total = args.messages // 100 * 100
    sizes = [100] * (total // 100)
    async with (
        GatewayClient(target) as client,
        client.consume(topic, "bench", policy="rocketmq", prefetch=1000) as stream,
    ):

        async def publisher() -> None:
            while sizes:
                await client.publish(topic, [body] * sizes.pop())

        async def consumer() -> None:
            got = 0
            async for msg in stream:
                msg.ack_quietly()
                got += 1
                if got >= total:
                    return

        started = time.perf_counter()
        consuming = asyncio.ensure_future(consumer())
        await asyncio.gather(*(publisher() for _ in range(4)))
        await asyncio.wait_for(consuming, 600)
        await asyncio.wait_for(stream.drain(), 60)
        elapsed = time.perf_counter() - started
    return total / elapsed


def _pulsar(pulsar_url: str, args: argparse.Namespace, batching: bool) -> float:
    import pulsar

    topic = _name("bench-pulsar")
    body = os.urandom(args.size)
    client = pulsar.Client(pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
                           operation_timeout_seconds=60)
    try:
        consumer = client.subscribe(topic, "bench", consumer_type=pulsar.ConsumerType.Shared,
                                    receiver_queue_size=1000)
        producer = client.create_producer(
            topic, batching_enabled=batching, batching_max_messages=1000,
            batching_max_publish_delay_ms=10, max_pending_messages=args.window,
            block_if_queue_full=True, send_timeout_millis=60_000)
        n = args.messages
        failures: list[object] = []
        received = threading.Event()

        def consume() -> None:
            got = 0
            while got < n:
                msg = consumer.receive(60_000)
                consumer.acknowledge(msg)
                got += 1
            received.set()

        def sent(result: object, _msg_id: object) -> None:
            if result != pulsar.Result.Ok:
                failures.append(result)

        reader = threading.Thread(target=consume, daemon=True)
        started = time.perf_counter()
        reader.start()
        for _ in range(n):
            producer.send_async(body, sent)
        producer.flush()
        if not received.wait(600):
            raise RuntimeError("pulsar: not every message was consumed")
        elapsed = time.perf_counter() - started
        if failures:
            raise RuntimeError(f"pulsar: {len(failures)} sends failed: {failures[0]}")
        producer.close()
        consumer.close()
        return n / elapsed
    finally:
        client.close()


async def pulsar_batch(target: str, pulsar_url: str, args: argparse.Namespace) -> float:
    return await asyncio.to_thread(_pulsar, pulsar_url, args, True)


async def pulsar_nobatch(target: str, pulsar_url: str, args: argparse.Namespace) -> float:
    return await asyncio.to_thread(_pulsar, pulsar_url, args, False)


def _rocketmq(target: str, args: argparse.Namespace) -> float:
    from rocketmq import (
        ClientConfiguration,
        ConsumeResult,
        Credentials,
        FilterExpression,
        Message,
        MessageListener,
        Producer,
        PushConsumer,
    )

    topic = _name("bench_rmq")
    body = os.urandom(args.size)
    n = args.rocketmq_messages
    config = ClientConfiguration(target, Credentials("", ""))
    done = threading.Event()
    lock = threading.Lock()
    count = [0]

    class Listener(MessageListener):  # type: ignore[misc]
        def consume(self, message: Any) -> Any:
            with lock:
                count[0] += 1
                if count[0] >= n:
                    done.set()
            return ConsumeResult.SUCCESS

    producer = Producer(config, (topic,))
    producer.startup()
    consumer = PushConsumer(config, _name("bench_group"), Listener(),
                            {topic: FilterExpression("*")})
    consumer.startup()
    try:
        window = threading.Semaphore(args.rocketmq_window)
        failures: list[BaseException] = []

        def sent(future: Future[Any]) -> None:
            window.release()
            error = future.exception()
            if error is not None:
                failures.append(error)

        started = time.perf_counter()
        for _ in range(n):
            window.acquire()
            message = Message()
            message.topic = topic
            message.body = body
            producer.send_async(message).add_done_callback(sent)
        if not done.wait(600):
            raise RuntimeError(f"rocketmq: {count[0]} of {n} consumed")
        elapsed = time.perf_counter() - started
        if failures:
            raise RuntimeError(f"rocketmq: {len(failures)} sends failed: {failures[0]!r}")
        return n / elapsed
    finally:
        producer.shutdown()
        consumer.shutdown()
        # The push consumer's meter provider outlives shutdown(); stop it before the gateway goes.
        from rocketmq.grpc_protocol import definition_pb2

        consumer.client_metrics.reset_metrics(definition_pb2.Metric(on=False))


async def rocketmq(target: str, pulsar_url: str, args: argparse.Namespace) -> float:
    return await asyncio.to_thread(_rocketmq, target, args)


CLIENTS: dict[str, Callable[[str, str, argparse.Namespace], Awaitable[float]]] = {
    "grpc": grpc_api,
    "pulsar-batch": pulsar_batch,
    "pulsar-nobatch": pulsar_nobatch,
    "rocketmq": rocketmq,
}


# ------------------------------------------------------------------------------ the run
async def one_round(number: int, args: argparse.Namespace) -> dict[str, tuple[float, float]]:
    """{client: (msgs/s, gateway CPU us per message)} of one round."""
    names = [name for name in CLIENTS if name in args.clients]
    if number % 2:
        names.reverse()
    out: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(dir=args.dir) as data_dir:
        pulsar_port = free_port()
        proc, target = await start_process(
            [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", data_dir,
             "--listen", "127.0.0.1:0", "--pulsar-listen", f"127.0.0.1:{pulsar_port}",
             "--log-level", "warning"])
        try:
            for name in names:
                before = proc_stats(proc.pid).cpu_s
                rate = await CLIENTS[name](target, f"pulsar://127.0.0.1:{pulsar_port}", args)
                cpu = proc_stats(proc.pid).cpu_s - before
                count = args.rocketmq_messages if name == "rocketmq" else args.messages
                out[name] = (rate, cpu * 1e6 / count)
        finally:
            await stop_process(proc)
    return out


async def run(args: argparse.Namespace) -> None:
    print(f"{args.messages} messages of {args.size} B per client and round, publish and consume "
          f"at once, fsync on; load {os.getloadavg()}", flush=True)
    ratios: dict[str, list[float]] = {name: [] for name in args.clients}
    for number in range(args.rounds):
        figures = await one_round(number, args)
        base = figures["grpc"][0] if "grpc" in figures else float("nan")
        cells = []
        for name in CLIENTS:
            if name not in figures:
                continue
            rate, cpu = figures[name]
            ratios[name].append(rate / base)
            cells.append(f"{name} {rate:,.0f} msgs/s ({cpu:.0f} us CPU/msg, x{rate / base:.2f})")
        print(f"round {number + 1}: " + "; ".join(cells), flush=True)
    print(f"median ratio to the gRPC API (load {os.getloadavg()}):")
    for name, values in ratios.items():
        if values and name != "grpc":
            each = ", ".join(f"{v:.2f}" for v in values)
            print(f"  {name:<15} {statistics.median(values):.2f}  ({each})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--window", type=int, default=1000,
                        help="unconfirmed sends in flight at most (pulsar, rocketmq)")
    parser.add_argument("--rocketmq-messages", type=int, default=2_000,
                        help="messages of the RocketMQ SDK (one RPC per message: slow)")
    parser.add_argument("--rocketmq-window", type=int, default=100,
                        help="unconfirmed RocketMQ sends at most (1000 stalled in one run)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", nargs="*", default=list(CLIENTS), choices=list(CLIENTS))
    parser.add_argument("--dir", default=None, help="where to put the stores (default: tmp)")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
