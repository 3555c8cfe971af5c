"""CPU cost per replica: one gateway vs several gateways on one broker serving one group.

For each replica count (default 1 and 3) the benchmark starts that many `gateway serve
--backend rabbitmq` processes on the same broker (`--backend pulsar`: `gateway serve --backend
pulsar` on one Pulsar-protocol server, a gateway of its own serving Pulsar's binary protocol
unless `--pulsar-url` names one), opens one push consumer (policy rabbitmq or pulsar, prefetch
`--prefetch`) on each, publishes `--messages` persistent messages through the replicas in turn
(batches of `--batch`) and acks every delivery. It reads each replica's CPU seconds (user +
system, from /proc) before and after, and prints the rate, the CPU seconds per 1,000 messages of
each replica and of all together, and the broker's CPU over the same time when its process can
be found (RabbitMQ's `beam.smp`, which on a shared broker includes everyone else's load; or the
serving gateway).

On a machine with fewer cores than replicas + broker the rate cannot grow with replicas: read
the CPU per 1,000 messages, which says what a replica costs, and the broker's share, which says
what limits scale-out.

    .venv/bin/python -m bench.replicas --messages 20000 --replicas 1 3 [--backend pulsar]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import AsyncExitStack

from bench.amqp import cleanup
from bench.gateway import proc_stats, start_process, stop_process
from bench.native import free_port
from gateway.client import GatewayClient
from gateway.v1 import gateway_pb2

GROUP = "bench-replicas"


def broker_pid() -> int | None:
    """The RabbitMQ node's Erlang VM, if exactly one runs here."""
    found = subprocess.run(["pgrep", "-f", "beam.smp.*rabbit"], capture_output=True, text=True)
    pids = [int(p) for p in found.stdout.split()]
    return pids[0] if len(pids) == 1 else None


def cpu_of(pid: int) -> float:
    """User + system CPU seconds of one process (not its children), from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def broker_cpu(pid: int | None, args: argparse.Namespace) -> float:
    """CPU seconds of the broker so far: RabbitMQ's VM, or the serving gateway with its store
    writer (NaN when no broker process is known)."""
    if pid is None:
        return float("nan")
    return proc_stats(pid).cpu_s if args.backend == "pulsar" else cpu_of(pid)


async def consume(client: GatewayClient, topic: str, args: argparse.Namespace,
                  state: dict[str, int], done: asyncio.Event, subscribed: asyncio.Event) -> None:
    total = args.messages
    policy = "pulsar" if args.backend == "pulsar" else "rabbitmq"
    async with client.consume(topic, GROUP, policy=policy, prefetch=args.prefetch) as stream:
        subscribed.set()
        while not done.is_set():
            message = await stream.next(0.2)
            if message is None:
                continue
            message.ack_quietly()
            state["acked"] += 1
            if state["acked"] >= total:
                done.set()
        await stream.drain()


def serve(data: str, *flags: str) -> list[str]:
    return [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", data,
            "--listen", "127.0.0.1:0", "--log-level", "warning", *flags]


async def run(replicas: int, args: argparse.Namespace) -> dict[str, float]:
    topic = f"bench-replicas-{uuid.uuid4().hex[:8]}"
    body = os.urandom(args.size)
    async with AsyncExitStack() as stack:
        broker = broker_pid() if args.backend == "rabbitmq" else None
        backend = ["--backend", "rabbitmq", "--rabbitmq-url", args.url]
        if args.backend == "pulsar":
            url = args.pulsar_url
            if not url:
                port = free_port()
                server, _ = await start_process(serve(
                    stack.enter_context(tempfile.TemporaryDirectory()),
                    "--pulsar-listen", f"127.0.0.1:{port}"))
                stack.push_async_callback(stop_process, server)
                broker, url = server.pid, f"pulsar://127.0.0.1:{port}"
            backend = ["--backend", "pulsar", "--pulsar-service-url", url]
        procs = []
        clients = []
        for _ in range(replicas):
            data = stack.enter_context(tempfile.TemporaryDirectory())
            proc, target = await start_process(serve(data, *backend))
            stack.push_async_callback(stop_process, proc)
            procs.append(proc)
            clients.append(await stack.enter_async_context(GatewayClient(target)))
        if args.backend == "rabbitmq":
            stack.push_async_callback(cleanup, args.url, topic)
        await clients[0].publish(topic, [b"warm-up"])
        state = {"acked": -1}  # the warm-up message
        done = asyncio.Event()
        subscribed = [asyncio.Event() for _ in clients]
        consumers = [asyncio.ensure_future(consume(c, topic, args, state, done, s))
                     for c, s in zip(clients, subscribed, strict=True)]
        for event in subscribed:
            await event.wait()
        before = [proc_stats(p.pid).cpu_s for p in procs]
        broker_before = broker_cpu(broker, args)
        started = time.perf_counter()
        sizes = [min(args.batch, args.messages - s) for s in range(0, args.messages, args.batch)]

        async def publisher(n: int) -> None:
            while sizes:
                count = sizes.pop()
                client = clients[n % len(clients)]
                n += 1
                await client.publish(topic, [gateway_pb2.Message(body=body)
                                             for _ in range(count)])

        await asyncio.gather(*(publisher(i) for i in range(args.publishers)))
        await asyncio.wait_for(done.wait(), args.timeout_s)
        elapsed = time.perf_counter() - started
        cpu = [proc_stats(p.pid).cpu_s - b for p, b in zip(procs, before, strict=True)]
        broker_used = broker_cpu(broker, args) - broker_before
        await asyncio.gather(*consumers)
    per_k = 1000 / args.messages
    return {"replicas": replicas, "rate": args.messages / elapsed,
            "cpu_per_k_each": max(cpu) * per_k, "cpu_per_k_min": min(cpu) * per_k,
            "cpu_per_k_all": sum(cpu) * per_k, "broker_per_k": broker_used * per_k}


async def main(args: argparse.Namespace) -> None:
    print(f"{args.messages} messages of {args.size} B, ack all, on {os.cpu_count()} cores, "
          f"back end {args.backend}")
    print("replicas   msg/s   CPU s/1k msgs: per replica (max..min)   all replicas   broker")
    for _ in range(args.rounds):
        for replicas in args.replicas:
            r = await run(replicas, args)
            print(f"{replicas:>8} {r['rate']:>7.0f}   {r['cpu_per_k_each']:>17.3f}..."
                  f"{r['cpu_per_k_min']:.3f}        {r['cpu_per_k_all']:>9.3f}   "
                  f"{r['broker_per_k']:>6.3f}")


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--backend", choices=["rabbitmq", "pulsar"], default="rabbitmq")
    parser.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--pulsar-url", default="",
                        help="a Pulsar service URL (default: a gateway serving Pulsar's protocol)")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--publishers", type=int, default=6)
    parser.add_argument("--prefetch", type=int, default=1000)
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--rounds", type=int, default=2, help="alternating runs of each count")
    parser.add_argument("--timeout-s", type=float, default=600.0)
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse()))
