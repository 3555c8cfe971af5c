"""Cost as the work grows: `python -m bench.scaling`.

One dimension grows while the others stay small, each point on a fresh gateway (embedded store,
fsync on, its own data directory):

* backlog: B messages published first, then consumed and acked by one push consumer; the rate
  is B over the consume time (the work grows with B, the rate should not fall);
* groups: G groups on the topic (each made with one Receive, then idle: they hold the topic's
  messages back), and the e2e probe on one more group;
* topics: T topics of one message and one group each, and the probe on one more topic;
* pending: R pending retries (failed with delay level 18: two hours) in the probe's group, and
  the probe on the same group;
* consumers: C push streams on the probe's group (up to 500 per channel), the probe's messages
  spread over all of them.

Each point waits for the gateway to go idle after the setup (what the setup left behind, such as
scanning retries or deleting acked messages, is not the probe's cost). The probe is the e2e
figure: `--probe` messages of `--size` bytes published in batches of 100 by
4 publishers while the consumers ack them; rate = messages / (first publish .. last ack). Memory
is VmRSS of the gateway and its writer after the probe (and, for the setup, the setup's time).

Writes a table (stdout and `--out`.txt) and a PNG (`--out`.png: rate and RSS per dimension, and
per-item cost). `--full` runs the issue's top ends (1M backlog, 10,000 groups and topics, 1M
pending retries, 1,000 consumers); the default stops at a tenth of the large ones (100k backlog,
100k pending) and at 10,000 groups, topics and 1,000 consumers, which are cheap to set up.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc

from bench.gateway import proc_stats, start_process, start_profiler, stop_process, stop_profiler
from bench.restart import rss_mib
from gateway.client import ConsumeStream, GatewayClient
from gateway.v1 import admin_pb2_grpc, gateway_pb2, gateway_pb2_grpc

POLICY = "rocketmq"
SMALL = {"backlog": [1_000, 10_000, 100_000], "groups": [1, 100, 1_000, 10_000],
         "topics": [1, 100, 1_000, 10_000], "pending": [0, 10_000, 100_000],
         "consumers": [1, 10, 100, 1_000]}
FULL = {**SMALL, "backlog": [1_000, 10_000, 100_000, 1_000_000],
        "pending": [0, 10_000, 100_000, 1_000_000]}
STREAMS_PER_CHANNEL = 500


@dataclass
class Point:
    dimension: str
    size: int
    rate: float
    rss_mib: float
    setup_s: float
    idle_rss_mib: float


# ------------------------------------------------------------------------------ the workload
def own_connection(client: GatewayClient, target: str) -> GatewayClient:
    """`client` on a connection of its own: gRPC channels with the same target and options
    share one connection, and the gateway serves 1,000 streams per connection (more calls
    wait), so the consumers dimension spreads its streams over several."""
    client.channel = grpc.aio.insecure_channel(
        target, options=[("grpc.max_receive_message_length", 64 << 20),
                         ("grpc.max_send_message_length", 64 << 20),
                         ("grpc.use_local_subchannel_pool", 1)])
    client.stub = gateway_pb2_grpc.GatewayStub(client.channel)
    client.admin = admin_pb2_grpc.AdminStub(client.channel)
    return client


async def probe(clients: list[GatewayClient], topic: str, group: str, count: int, size: int,
                consumers: int = 1) -> float:
    """Publish `count` messages while `consumers` push streams ack them; msgs/s end to end."""
    body = os.urandom(size)
    got = 0
    done = asyncio.Event()
    opened: list[ConsumeStream] = []

    async def consume(stream: ConsumeStream) -> None:
        nonlocal got
        async for msg in stream:
            msg.ack_quietly()
            got += 1
            if got >= count:
                done.set()

    streams = [clients[i // STREAMS_PER_CHANNEL % len(clients)].consume(
        topic, group, policy=POLICY, prefetch=max(16, min(1000, 4 * count // consumers)))
        for i in range(consumers)]
    for stream in streams:
        opened.append(await stream.__aenter__())
    readers = [asyncio.ensure_future(consume(stream)) for stream in opened]
    try:
        sizes = [100] * (count // 100) + ([count % 100] if count % 100 else [])

        async def publisher() -> None:
            while sizes:
                n = sizes.pop()
                await clients[0].publish(topic, [body] * n)

        started = time.perf_counter()
        await asyncio.gather(*(publisher() for _ in range(4)))
        await asyncio.wait_for(done.wait(), 600)
        elapsed = time.perf_counter() - started
        for stream in opened:
            await asyncio.wait_for(stream.drain(), 60)
    finally:
        for reader in readers:
            reader.cancel()
        for stream in opened:
            await stream.__aexit__(None, None, None)
    return count / elapsed


# ------------------------------------------------------------------------------ the setups
async def setup_backlog(clients: list[GatewayClient], n: int, args: argparse.Namespace) -> float:
    """Publish `n` messages, then consume them all; return the consume rate (the point's
    figure: for this dimension the backlog itself is the work)."""
    client = clients[0]
    body = os.urandom(args.size)
    left = n
    while left:
        batch = min(1000, left)
        await client.publish("backlog", [body] * batch)
        left -= batch
    started = time.perf_counter()
    async with client.consume("backlog", "g", policy=POLICY, prefetch=1000) as stream:
        got = 0
        async for msg in stream:
            msg.ack_quietly()
            got += 1
            if got >= n:
                break
        await asyncio.wait_for(stream.drain(), 120)
    return n / (time.perf_counter() - started)


async def setup_groups(clients: list[GatewayClient], n: int, args: argparse.Namespace) -> None:
    client = clients[0]
    await client.publish("probe", [b"seed"])
    sem = asyncio.Semaphore(64)

    async def one(i: int) -> None:
        async with sem:
            await client.receive("probe", f"idle-{i}", policy="rocketmq-simple", max_messages=1,
                                 invisible_ms=3_600_000)

    await asyncio.gather(*(one(i) for i in range(n - 1)))


async def setup_topics(clients: list[GatewayClient], n: int, args: argparse.Namespace) -> None:
    client = clients[0]
    sem = asyncio.Semaphore(64)

    async def one(i: int) -> None:
        async with sem:
            await client.publish(f"topic-{i}", [b"one"])
            await client.receive(f"topic-{i}", "g", policy="rocketmq-simple", max_messages=1,
                                 invisible_ms=3_600_000)

    await asyncio.gather(*(one(i) for i in range(n - 1)))


async def setup_pending(clients: list[GatewayClient], n: int, args: argparse.Namespace) -> None:
    if n == 0:
        return
    client = clients[0]
    body = os.urandom(args.size)
    left = n
    while left:
        batch = min(10_000, left)
        await client.publish("probe", [body] * batch)
        left -= batch
    async with client.consume("probe", "probe", policy=POLICY, prefetch=5000) as stream:
        futures = []
        for _ in range(n):
            msg = await stream.next(60)
            if msg is None:
                raise RuntimeError("pending: a delivery did not come")
            futures.append(stream.settle_nowait(gateway_pb2.Settlement(
                receipt=msg.delivery.receipt, fail=gateway_pb2.Fail(delay_level=18))))
            if len(futures) >= 10_000:
                await asyncio.gather(*futures)
                futures = []
        await asyncio.gather(*futures)
        # With the subscription open, the gateway scans the retry copies; let it finish.
        await quiesce(args.gateway_pid)
    deadline = time.monotonic() + 600
    while (await client.describe("probe", "probe")).waiting_retry < n:
        if time.monotonic() > deadline:
            raise RuntimeError("pending: retries not counted")
        await asyncio.sleep(0.5)


async def setup_consumers(clients: list[GatewayClient], n: int, args: argparse.Namespace) -> None:
    return None


SETUPS: dict[str, Callable[[list[GatewayClient], int, argparse.Namespace], Awaitable[object]]] = {
    "backlog": setup_backlog,
    "groups": setup_groups,
    "topics": setup_topics,
    "pending": setup_pending,
    "consumers": setup_consumers,
}


async def quiesce(pid: int, busy: float = 0.05, window_s: float = 6.0,
                  timeout_s: float = 600.0) -> None:
    """Wait until the gateway and its writer use less than `busy` of a core over `window_s`
    (longer than the store's trim interval, 5 s): what the setup left to do (scanning retry
    copies, deleting acked messages) is done before the probe."""
    deadline = time.monotonic() + timeout_s
    samples = [proc_stats(pid).cpu_s]
    per = int(window_s)
    while time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        samples.append(proc_stats(pid).cpu_s)
        if len(samples) > per and samples[-1] - samples[-1 - per] < busy * window_s:
            return


async def point(dimension: str, n: int, args: argparse.Namespace) -> Point:
    with tempfile.TemporaryDirectory(dir=args.dir) as data_dir:
        proc, target = await start_process(
            [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", data_dir,
             "--listen", "127.0.0.1:0", "--log-level", "warning"])
        try:
            channels = max(1, -(-n // STREAMS_PER_CHANNEL)) if dimension == "consumers" else 1
            clients = [own_connection(GatewayClient(target), target) for _ in range(channels)]
            for client in clients:
                await client.__aenter__()
            try:
                args.gateway_pid = proc.pid
                started = time.perf_counter()
                figure = await SETUPS[dimension](clients, n, args)
                setup_s = time.perf_counter() - started
                await quiesce(proc.pid)
                idle_rss = rss_mib(proc.pid)
                if dimension == "backlog":
                    assert isinstance(figure, float)
                    rate = figure
                else:
                    spy = await start_profiler(
                        f"{args.profile}/{dimension}-{n}.spy" if args.profile else "", proc.pid)
                    rate = await probe(clients, "probe", "probe", args.probe, args.size,
                                       consumers=n if dimension == "consumers" else 1)
                    await stop_profiler(spy)
                rss = rss_mib(proc.pid)
            finally:
                for client in clients:
                    await client.__aexit__(None, None, None)
        finally:
            await stop_process(proc)
    return Point(dimension, n, rate, rss, setup_s, idle_rss)


# ------------------------------------------------------------------------------ the report
def table(points: list[Point]) -> str:
    lines = [f"{'dimension':<10} {'size':>9} {'msgs/s':>9} {'rate/first':>10} {'RSS MiB':>8} "
             f"{'RSS idle':>8} {'setup s':>8}"]
    first: dict[str, float] = {}
    for p in points:
        base = first.setdefault(p.dimension, p.rate)
        lines.append(f"{p.dimension:<10} {p.size:>9,} {p.rate:>9,.0f} {p.rate / base:>10.2f} "
                     f"{p.rss_mib:>8.0f} {p.idle_rss_mib:>8.0f} {p.setup_s:>8.1f}")
    return "\n".join(lines)


def plot(points: list[Point], path: pathlib.Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dimensions = list(dict.fromkeys(p.dimension for p in points))
    fig, axes = plt.subplots(2, len(dimensions), figsize=(4 * len(dimensions), 7), squeeze=False)
    for col, dimension in enumerate(dimensions):
        mine = [p for p in points if p.dimension == dimension]
        xs = [max(p.size, 0.5) for p in mine]  # 0 pending retries drawn at 0.5 (log axis)
        top, bottom = axes[0][col], axes[1][col]
        top.plot(xs, [p.rate for p in mine], "o-", color="tab:blue")
        top.set_xscale("log")
        top.set_ylim(bottom=0)
        top.set_title(dimension)
        top.set_ylabel("e2e msgs/s" if dimension != "backlog" else "consume msgs/s")
        bottom.plot(xs, [p.rss_mib for p in mine], "s-", color="tab:red", label="after probe")
        bottom.plot(xs, [p.idle_rss_mib for p in mine], "^--", color="tab:orange",
                    label="after setup")
        bottom.set_xscale("log")
        bottom.set_ylim(bottom=0)
        bottom.set_ylabel("RSS MiB (gateway + writer)")
        bottom.set_xlabel(dimension)
        if col == 0:
            bottom.legend(loc="upper left", fontsize="small")
    fig.suptitle(title, fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


async def run(args: argparse.Namespace) -> None:
    sizes = FULL if args.full else SMALL
    chosen = args.only or list(sizes)
    points: list[Point] = []
    load_before = os.getloadavg()
    for dimension in chosen:
        for n in args.sizes or sizes[dimension]:
            one = await point(dimension, n, args)
            points.append(one)
            print(f"{dimension:<10} {n:>9,}: {one.rate:,.0f} msgs/s, RSS {one.rss_mib:.0f} MiB "
                  f"(idle {one.idle_rss_mib:.0f}), setup {one.setup_s:.1f} s", flush=True)
    title = (f"bench.scaling{' --full' if args.full else ''}: probe {args.probe} x {args.size} B; "
             f"load {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f}")
    text = title + "\n" + table(points)
    print(text)
    out = pathlib.Path(args.out)
    out.with_suffix(".txt").write_text(text + "\n")
    plot(points, out.with_suffix(".png"), title)
    print(f"wrote {out.with_suffix('.txt')} and {out.with_suffix('.png')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="the issue's top ends (slow)")
    parser.add_argument("--only", nargs="*", choices=list(SMALL), help="these dimensions only")
    parser.add_argument("--probe", type=int, default=5_000, help="messages of the e2e probe")
    parser.add_argument("--size", type=int, default=256, help="message body bytes")
    parser.add_argument("--out", default="scaling", help="file name of the table and the PNG")
    parser.add_argument("--dir", default=None, help="where to put the stores (default: tmp)")
    parser.add_argument("--profile", default="",
                        help="a directory: py-spy raw stacks of the gateway during each probe")
    parser.add_argument("--sizes", type=int, nargs="*",
                        help="these sizes instead (with --only, for one dimension)")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
