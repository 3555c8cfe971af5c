"""End-to-end throughput of the gateway over gRPC: `python -m bench.gateway`.

Starts `gateway serve` (embedded store, fsync on) as a separate process, then publishes N
messages of `--size` bytes in batches of `--batch` from `--publishers` concurrent publishers
while one push consumer (policy rocketmq) consumes and acks them. Each message carries its
publish-call start time in a property, so the consumer measures end-to-end latency.

Prints msgs/s end to end, p50/p99 latency, the gateway's CPU seconds (in all, per thread and
for its store writer process) and peak RSS (with the writer's), and the same payloads through a
peer: a trivial gRPC echo server (its own process) streamed with 100 messages per frame, with the
ratio gateway / peer. `--phases` publishes everything first and then consumes the backlog, to
show each side alone; `--fail 50` fails half of the deliveries with a delay (policy rocketmq,
delay level 18: their retries wait two hours) instead of acking them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import re
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc

from gateway.client import GatewayClient
from gateway.v1 import gateway_pb2

SENT = "bench-sent-ns"
LISTENING = re.compile(r"listening on ([^\s\"]+):(\d+)")
ECHO_METHOD = "/bench.Echo/Stream"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_DRAINS: set[asyncio.Task[None]] = set()


@dataclass
class ProcStats:
    """CPU seconds (user + system, and system alone) and peak resident memory of one process."""

    cpu_s: float
    hwm_kib: int
    sys_s: float = 0.0


def children(pid: int) -> list[int]:
    """The direct child processes of `pid` (the gateway's store writer)."""
    found: list[int] = []
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        try:
            found.extend(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue
    return found


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of the main thread, per name of the others (summed), and of each child
    process ("writer process") from /proc. Python does not name its threads for the OS: the
    store's reader thread counts under "python"."""
    out: dict[str, float] = {}
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue  # the thread ended meanwhile
        name = "main" if task.name == str(pid) else stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    for child in children(pid):
        out["writer process"] = out.get("writer process", 0.0) + _one(child).cpu_s
    return out


def _one(pid: int) -> ProcStats:
    """Read /proc/<pid>/stat (utime, stime) and /proc/<pid>/status (VmHWM) of one process."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
        status = pathlib.Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return ProcStats(0.0, 0)
    fields = stat[stat.rindex(")") + 2:].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    hwm = 0
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1])
    return ProcStats(cpu, hwm, int(fields[12]) / CLOCK_TICKS)


def proc_stats(pid: int) -> ProcStats:
    """CPU and peak RSS of `pid` and its child processes together (the gateway and its store
    writer)."""
    total = _one(pid)
    for child in children(pid):
        one = _one(child)
        total = ProcStats(total.cpu_s + one.cpu_s, total.hwm_kib + one.hwm_kib,
                          total.sys_s + one.sys_s)
    return total


async def start_process(args: list[str]) -> tuple[asyncio.subprocess.Process, str]:
    """Start a server process and wait for its "listening on HOST:PORT" line on stderr."""
    proc = await asyncio.create_subprocess_exec(
        *args, stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL
    )
    assert proc.stderr is not None
    lines: list[str] = []
    while True:
        raw = await asyncio.wait_for(proc.stderr.readline(), 30)
        if not raw:
            raise RuntimeError("server exited before listening:\n" + "".join(lines))
        line = raw.decode(errors="replace")
        lines.append(line)
        found = LISTENING.search(line)
        if found:
            break
    drain = asyncio.ensure_future(_drain(proc.stderr))
    _DRAINS.add(drain)
    drain.add_done_callback(_DRAINS.discard)
    return proc, f"{found.group(1)}:{found.group(2)}"


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.read(65536):
        pass


async def stop_process(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 15)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def start_profiler(out: str, pid: int) -> asyncio.subprocess.Process | None:
    """With --profile: sample the gateway with py-spy (collapsed stacks) during the run, at
    SPY_RATE samples a second (default 200)."""
    if not out:
        return None
    spy = await asyncio.create_subprocess_exec(
        "py-spy", "record", "--pid", str(pid), "--format", "raw", "--output", out,
        "--rate", os.environ.get("SPY_RATE", "200"),
        *(["--native"] if os.environ.get("SPY_NATIVE") else ["--nonblocking"]),
        *(["--gil"] if os.environ.get("SPY_GIL") else []),
        *(["--idle"] if os.environ.get("SPY_IDLE") else []),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )
    await asyncio.sleep(1.0)
    return spy


async def stop_profiler(spy: asyncio.subprocess.Process | None) -> None:
    if spy is not None and spy.returncode is None:
        spy.send_signal(2)
        await asyncio.wait_for(spy.wait(), 30)


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


# ----------------------------------------------------------------------------- the gateway run
async def publish_all(
    client: GatewayClient, topic: str, args: argparse.Namespace, *, stamped: bool = True
) -> None:
    """Publish `args.messages` bodies of `args.size` bytes in batches of `args.batch` from
    `args.publishers` concurrent publishers, each on its own PublishStream (`args.unary`: a
    Publish call per batch); `stamped`: each batch carries its send time (property SENT)."""
    body = os.urandom(args.size)
    sizes = [min(args.batch, args.messages - start) for start in range(0, args.messages,
                                                                         args.batch)]
    sizes.reverse()

    async def publisher(publish: Any) -> None:
        while sizes:
            count = sizes.pop()
            stamp = {SENT: str(time.time_ns())} if stamped else None
            await publish(topic, [body] * count, properties=stamp)

    if getattr(args, "unary", False):  # other benches reuse this with their own options
        await asyncio.gather(*(publisher(client.publish) for _ in range(args.publishers)))
        return

    async def streamed() -> None:
        async with client.publisher() as stream:
            await publisher(stream.publish)

    await asyncio.gather(*(streamed() for _ in range(args.publishers)))


async def consume_all(
    client: GatewayClient, topic: str, args: argparse.Namespace, subscribed: asyncio.Event,
    latencies: list[float],
) -> None:
    async with client.consume(topic, "bench-group", policy="rocketmq",
                              prefetch=args.prefetch) as stream:
        if args.settle_batch:
            stream.settle_batch = args.settle_batch
        subscribed.set()
        got = 0
        failing: list[asyncio.Future[gateway_pb2.SettleResult]] = []
        async for msg in stream:
            now = time.time_ns()
            latencies.append((now - int(msg.delivery.properties.get(SENT) or now)) / 1e6)
            if got % 100 < args.fail:
                # Fail with the longest delay level (2 h): no retry comes back during the run.
                failing.append(stream.settle_nowait(gateway_pb2.Settlement(
                    receipt=msg.delivery.receipt, fail=gateway_pb2.Fail(delay_level=18))))
            else:
                msg.ack_quietly()
            got += 1
            if got >= args.messages:
                break
        await asyncio.wait_for(stream.drain(), 120)
        refused = [result for result in await asyncio.gather(*failing) if not result.ok]
        if refused:
            raise RuntimeError(f"{len(refused)} fails refused: {refused[0]}")
        if stream.failures:
            raise RuntimeError(f"{len(stream.failures)} acks failed: {stream.failures[0]}")


async def run_gateway(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=args.dir) as data_dir:
        serve = ["serve", "--data-dir", data_dir, "--listen", "127.0.0.1:0",
                 "--log-level", "warning", *(["--telemetry"] if args.telemetry else [])]
        if args.switch_interval:
            # The same CLI with the interpreter's GIL switch interval changed first.
            code = (f"import sys; sys.setswitchinterval({args.switch_interval}); "
                    f"from gateway.cli import main; sys.argv = ['gateway', *{serve!r}]; "
                    "raise SystemExit(main())")
            command = [sys.executable, "-c", code]
        else:
            command = [sys.executable, "-m", "gateway.cli", *serve]
        proc, target = await start_process(command)
        try:
            async with GatewayClient(target) as client:
                topic = "bench"
                # Warm-up: create the topic and group, load code paths.
                await client.publish(topic, [b"warm"])
                async with client.consume(topic, "bench-group", policy="rocketmq") as stream:
                    first = await stream.next(10.0)
                    assert first is not None
                    await first.ack()
                spy = await start_profiler(args.profile, proc.pid)
                before = proc_stats(proc.pid)
                threads_before = thread_cpu(proc.pid)
                own_before = _one(os.getpid())
                latencies: list[float] = []
                subscribed = asyncio.Event()
                started = time.perf_counter()
                if args.phases:
                    # Publish everything first, then consume the backlog: each side's cost alone.
                    await publish_all(client, topic, args)
                    published = time.perf_counter() - started
                    middle = proc_stats(proc.pid)
                    await consume_all(client, topic, args, subscribed, latencies)
                else:
                    consumer = asyncio.ensure_future(
                        consume_all(client, topic, args, subscribed, latencies))
                    await subscribed.wait()
                    started = time.perf_counter()
                    await publish_all(client, topic, args)
                    published = time.perf_counter() - started
                    await consumer
                    middle = before
                elapsed = time.perf_counter() - started
                after = proc_stats(proc.pid)
                threads = thread_cpu(proc.pid)
                own_after = _one(os.getpid())
                await stop_profiler(spy)
        finally:
            await stop_process(proc)
    latencies.sort()
    return {
        "rate": args.messages / elapsed,
        "publish_rate": args.messages / published,
        "elapsed": elapsed,
        "p50": percentile(latencies, 0.50),
        "p99": percentile(latencies, 0.99),
        "cpu": after.cpu_s - before.cpu_s,
        "sys": after.sys_s - before.sys_s,
        "hwm": after.hwm_kib / 1024,
        "client_cpu": own_after.cpu_s - own_before.cpu_s,
        "publish_cpu": middle.cpu_s - before.cpu_s,
        "threads": {name: cpu - threads_before.get(name, 0.0) for name, cpu in threads.items()},
    }


# -------------------------------------------------------------------------------- the peer run
def _identity(data: bytes) -> bytes:
    return data


async def _echo(requests: AsyncIterator[bytes], context: object) -> AsyncIterator[bytes]:
    async for frame in requests:
        yield frame


async def serve_echo() -> None:
    """The peer's server: a bidirectional stream that returns every frame it receives."""
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 << 20),
                                      ("grpc.max_send_message_length", 64 << 20)])
    handler = grpc.stream_stream_rpc_method_handler(
        _echo, request_deserializer=_identity, response_serializer=_identity)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("bench.Echo", {"Stream": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"echo listening on 127.0.0.1:{port}", file=sys.stderr, flush=True)
    await server.wait_for_termination()


async def run_peer(args: argparse.Namespace) -> dict[str, float]:
    proc, target = await start_process([sys.executable, "-m", "bench.gateway", "--echo-server"])
    per_frame = 100
    body = os.urandom(args.size)
    frames = (args.messages + per_frame - 1) // per_frame
    try:
        async with grpc.aio.insecure_channel(target) as channel:
            call = channel.stream_stream(
                ECHO_METHOD,
                request_serializer=gateway_pb2.DeliveryBatch.SerializeToString,
                response_deserializer=gateway_pb2.DeliveryBatch.FromString,
            )

            async def requests() -> AsyncIterator[gateway_pb2.DeliveryBatch]:
                for _ in range(frames):
                    sent = str(time.time_ns())
                    yield gateway_pb2.DeliveryBatch(deliveries=[
                        gateway_pb2.Delivery(body=body, properties={SENT: sent})
                        for _ in range(per_frame)])

            before = proc_stats(proc.pid)
            started = time.perf_counter()
            received = 0
            async for batch in call(requests()):
                received += len(batch.deliveries)
            elapsed = time.perf_counter() - started
            after = proc_stats(proc.pid)
    finally:
        await stop_process(proc)
    return {"rate": received / elapsed, "cpu": after.cpu_s - before.cpu_s}


async def run(args: argparse.Namespace) -> None:
    gw = await run_gateway(args)
    peer = await run_peer(args)
    print(f"gateway: {args.messages} x {args.size} B, publish batches of {args.batch}, "
          f"{args.publishers} publishers, prefetch {args.prefetch}, fsync on"
          + (f", {args.fail}% failed with a delay" if args.fail else ""))
    print(f"  end to end     {gw['rate']:>10,.0f} msgs/s  ({gw['elapsed']:.2f} s; publish side "
          f"{gw['publish_rate']:,.0f} msgs/s)")
    if args.phases:
        consume_s = gw["elapsed"] - args.messages / gw["publish_rate"]
        print(f"  phases         publish {gw['publish_rate']:,.0f} msgs/s "
              f"({gw['publish_cpu'] * 1e6 / args.messages:.0f} us/msg), then consume "
              f"{args.messages / consume_s:,.0f} msgs/s "
              f"({(gw['cpu'] - gw['publish_cpu']) * 1e6 / args.messages:.0f} us/msg)")
    else:
        print(f"  latency        p50 {gw['p50']:.1f} ms  p99 {gw['p99']:.1f} ms")
    print(f"  gateway CPU    {gw['cpu']:.2f} s  ({gw['cpu'] / gw['elapsed'] * 100:.0f}% of one "
          f"core; {gw['cpu'] * 1e6 / args.messages:.0f} us/msg; system {gw['sys']:.2f} s)")
    busy = sorted(gw["threads"].items(), key=lambda item: -item[1])
    print("  by thread      " + ", ".join(f"{name} {cpu:.2f} s ({cpu / gw['elapsed'] * 100:.0f}%)"
                                          for name, cpu in busy if cpu >= 0.01))
    print(f"  client CPU     {gw['client_cpu']:.2f} s (this process: publishers and consumer)")
    print(f"  gateway RSS    peak {gw['hwm']:.0f} MiB (VmHWM, with its writer process)")
    print(f"peer: plain gRPC echo stream, 100 msgs/frame: {peer['rate']:,.0f} msgs/s "
          f"(server CPU {peer['cpu']:.2f} s)")
    print(f"ratio gateway/peer: {gw['rate'] / peer['rate']:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--publishers", type=int, default=4)
    parser.add_argument("--prefetch", type=int, default=1000)
    parser.add_argument("--unary", action="store_true",
                        help="publish with one Publish call per batch (default: each publisher "
                             "on a PublishStream of its own)")
    parser.add_argument("--dir", default=None, help="where to put the store (default: tmp)")
    parser.add_argument("--telemetry", action="store_true",
                        help="run the gateway with its telemetry spool on")
    parser.add_argument("--settle-batch", type=int, default=0,
                        help="acks sent per settle frame (default: the client's choice)")
    parser.add_argument("--fail", type=int, default=0, choices=range(0, 101), metavar="PCT",
                        help="fail this many of every 100 deliveries (delay level 18, two hours) "
                             "instead of acking them")
    parser.add_argument("--phases", action="store_true",
                        help="publish every message first, then consume them: each side alone")
    parser.add_argument("--switch-interval", type=float, default=0.0,
                        help="run the gateway with this sys.setswitchinterval (seconds)")
    parser.add_argument("--profile", default="",
                        help="write py-spy raw stacks of the gateway to this file (SPY_NATIVE=1: "
                             "with C frames; SPY_IDLE=1: idle threads too)")
    parser.add_argument("--echo-server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.echo_server:
        asyncio.run(serve_echo())
    else:
        asyncio.run(run(args))


if __name__ == "__main__":
    main()
