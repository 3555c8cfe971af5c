"""Restart of the embedded store with many pending retries: `python -m bench.restart`.

For each code version (the old one: `--old-ref`, main by default, exported with `git archive`;
the new one: this tree), a gateway (embedded store, fsync on) is filled with `--pending` pending
retries: that many messages are published, consumed and failed with delay level 18 (two hours,
policy rocketmq), so each waits as a delayed copy in the group's retry topic. Once the store has
scanned them all (DescribeGroup counts them waiting), the gateway's RSS with its writer process is
taken ("before") and the gateway is killed with SIGKILL; its data directory is the snapshot.

Then `--trials` restarts per version, old and new alternating: the snapshot is copied, a gateway
is started on it, and the benchmark takes from the process start
* SERVING: the first health check (service "") that answers SERVING;
* usable: a round trip on the same topic and group: publish one message, consume it, ack;
* RSS: gateway + writer VmRSS `--settle-s` seconds after the round trip, the consumer still open
  (steady: the dispatcher has looked at the retry topic meanwhile).

Each round also starts the new code on an empty store (the floor: interpreter, imports, gRPC).
Prints one row per trial and the medians with the ratio new / old.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pathlib
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.gateway import children
from gateway.client import GatewayClient

TOPIC = "restart"
GROUP = "restart-group"
POLICY = "rocketmq"
LONGEST_LEVEL = 18
"""The delay table's last level: 2 h, so no retry falls due during the benchmark."""
REPO = pathlib.Path(__file__).resolve().parents[1]


@dataclass
class Trial:
    version: str
    serving_s: float
    usable_s: float
    rss_mib: float


@dataclass
class Version:
    name: str
    src: pathlib.Path
    snapshot: pathlib.Path = pathlib.Path()
    fill_s: float = 0.0
    rss_before_mib: float = 0.0
    trials: list[Trial] = field(default_factory=list)


def rss_parts_mib(pid: int) -> list[float]:
    """VmRSS of `pid` and of each of its children (the store's writer process), MiB."""
    parts = []
    for one in (pid, *children(pid)):
        try:
            status = pathlib.Path(f"/proc/{one}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                parts.append(int(line.split()[1]) / 1024)
    return parts


def rss_mib(pid: int) -> float:
    """VmRSS of `pid` and its children (the store's writer process), MiB."""
    return sum(rss_parts_mib(pid))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def export(ref: str, into: pathlib.Path) -> str:
    """Write the tree of `ref` into `into`; return its commit hash."""
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", ref], check=True,
                            capture_output=True, text=True).stdout.strip()
    into.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(REPO), "archive", commit], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    archive.wait()
    return commit


def start(src: pathlib.Path, data_dir: pathlib.Path, port: int,
          extra: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(src))
    # A deployed gateway starts from compiled bytecode: let both versions write and use theirs.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(data_dir),
         "--listen", f"127.0.0.1:{port}", "--log-level", "warning", *extra],
        cwd=src, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


async def wait_serving(target: str, started: float, timeout_s: float = 120.0) -> float:
    """Seconds from `started` (perf_counter) to the first SERVING answer."""
    deadline = started + timeout_s
    async with grpc.aio.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.perf_counter() < deadline:
            try:
                answer = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=0.5)
                if answer.status == health_pb2.HealthCheckResponse.SERVING:
                    return time.perf_counter() - started
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.01)
    raise RuntimeError(f"{target} not SERVING within {timeout_s} s")


def scanned(data: pathlib.Path) -> int:
    """Rows of the store's unacked table (read-only, beside the running gateway)."""
    conn = sqlite3.connect(f"file:{data / 'store.sqlite3'}?mode=ro", uri=True, timeout=30)
    try:
        return int(conn.execute("SELECT count(*) FROM unacked").fetchone()[0])
    finally:
        conn.close()


async def waiting(client: GatewayClient) -> int:
    described = await client.describe(TOPIC, GROUP)
    return int(described.waiting_retry)


async def fill(version: Version, work: pathlib.Path, args: argparse.Namespace) -> None:
    """Fill a store with `args.pending` pending retries, kill -9 it, keep its directory."""
    data = work / f"{version.name}-snapshot"
    port = free_port()
    target = f"127.0.0.1:{port}"
    proc = start(version.src, data, port)
    try:
        await wait_serving(target, time.perf_counter())
        began = time.perf_counter()
        body = b"r" * args.size
        async with GatewayClient(target) as client:
            left = args.pending
            while left:
                count = min(10_000, left)
                await client.publish(TOPIC, [body] * count)
                left -= count
            async with client.consume(TOPIC, GROUP, policy=POLICY, prefetch=5000) as stream:
                failed = 0
                futures = []
                while failed < args.pending:
                    msg = await stream.next(60)
                    if msg is None:
                        raise RuntimeError(f"no delivery after {failed} failures")
                    futures.append(stream.settle_nowait(_fail(msg.delivery.receipt)))
                    failed += 1
                    if len(futures) >= 20_000:
                        await _all_ok(futures)
                        futures = []
                await _all_ok(futures)
                # The dispatcher scans the retry topic 4096 copies at a time: wait until it
                # has looked at every copy (each has a row in the unacked table then).
                deadline = time.monotonic() + 600
                while (count := scanned(data)) < args.pending:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"only {count} retries scanned")
                    await asyncio.sleep(0.5)
                if (count := await waiting(client)) != args.pending:
                    raise RuntimeError(f"{count} retries waiting, not {args.pending}")
                version.fill_s = time.perf_counter() - began
                await asyncio.sleep(args.settle_s)
                parts = rss_parts_mib(proc.pid)
                version.rss_before_mib = sum(parts)
                print(f"{version.name}: RSS before the kill: "
                      + " + ".join(f"{part:.0f}" for part in parts) + " MiB", flush=True)
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    await _writer_gone(data)
    version.snapshot = data


def _fail(receipt: str) -> object:
    from gateway.v1 import gateway_pb2

    return gateway_pb2.Settlement(
        receipt=receipt, fail=gateway_pb2.Fail(delay_level=LONGEST_LEVEL))


async def _all_ok(futures: list[asyncio.Future[object]]) -> None:
    for result in await asyncio.gather(*futures):
        if not getattr(result, "ok", False):
            raise RuntimeError(f"a fail was refused: {result}")


async def _writer_gone(data: pathlib.Path) -> None:
    """Wait until the killed gateway's writer process has committed and let go of the lock."""
    import fcntl

    with (data / "writer.lock").open("a") as handle:
        deadline = time.monotonic() + 60
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(handle, fcntl.LOCK_UN)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the writer of the killed gateway did not end") from None
                await asyncio.sleep(0.05)


async def trial(version: Version, work: pathlib.Path, args: argparse.Namespace) -> Trial:
    data = work / f"{version.name}-trial"
    shutil.rmtree(data, ignore_errors=True)
    shutil.copytree(version.snapshot, data)
    subprocess.run(["sync"], check=False)
    port = free_port()
    target = f"127.0.0.1:{port}"
    started = time.perf_counter()
    proc = start(version.src, data, port)
    try:
        serving = await wait_serving(target, started)
        async with GatewayClient(target) as client:
            await client.publish(TOPIC, [b"after the restart"])
            async with client.consume(TOPIC, GROUP, policy=POLICY, prefetch=16) as stream:
                msg = await stream.next(120)
                if msg is None:
                    raise RuntimeError("no delivery after the restart")
                result = await msg.ack()
                usable = time.perf_counter() - started
                if not result.ok:
                    raise RuntimeError(f"ack refused: {result}")
                await asyncio.sleep(args.settle_s)
                rss = rss_mib(proc.pid)
                left = await waiting(client)
                if version.name != "empty" and left != args.pending:
                    raise RuntimeError(f"{left} retries waiting after the restart, not "
                                       f"{args.pending}")
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    shutil.rmtree(data, ignore_errors=True)
    return Trial(version.name, serving, usable, rss)


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


async def run(args: argparse.Namespace) -> None:
    with contextlib.ExitStack() as stack:
        if args.reuse:
            work = pathlib.Path(args.reuse)
        elif args.keep:
            work = pathlib.Path(tempfile.mkdtemp(dir=args.dir, prefix="bench-restart-"))
            print(f"keeping the snapshots in {work}")
        else:
            work = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory(dir=args.dir)))
        old_src = work / "old-src"
        if args.reuse and old_src.exists():
            commit = (old_src / "bench-commit").read_text()
        else:
            shutil.rmtree(old_src, ignore_errors=True)
            commit = export(args.old_ref, old_src)
            (old_src / "bench-commit").write_text(commit)
        versions = [Version("old", old_src), Version("new", REPO)]
        print(f"old: {args.old_ref} ({commit[:10]}), new: {REPO}; {args.pending:,} pending "
              f"retries of {args.size} B; load {os.getloadavg()}", flush=True)
        for version in versions:
            info = work / f"{version.name}-snapshot" / "bench-fill.json"
            if args.reuse and info.exists():
                version.snapshot = info.parent
                vars(version).update(json.loads(info.read_text()))
            else:
                await fill(version, work, args)
                info.write_text(json.dumps({"fill_s": version.fill_s,
                                            "rss_before_mib": version.rss_before_mib}))
            size = sum(p.stat().st_size for p in version.snapshot.iterdir()) / (1 << 20)
            print(f"{version.name}: filled in {version.fill_s:.1f} s; RSS before the kill "
                  f"{version.rss_before_mib:.0f} MiB; data {size:.0f} MiB", flush=True)
        # The floor: the new code on an empty store, in the same rounds.
        empty = Version("empty", REPO, snapshot=work / "empty-snapshot")
        empty.snapshot.mkdir(exist_ok=True)
        print(f"{'trial':>5} {'code':>5} {'SERVING s':>10} {'usable s':>9} {'RSS MiB':>8}")
        for number in range(args.trials):
            order = versions if number % 2 == 0 else versions[::-1]
            for version in [*order, empty]:
                one = await trial(version, work, args)
                version.trials.append(one)
                print(f"{number + 1:>5} {one.version:>5} {one.serving_s:>10.2f} "
                      f"{one.usable_s:>9.2f} {one.rss_mib:>8.0f}", flush=True)
        print(f"medians over {args.trials} trials; load {os.getloadavg()}")
        old, new = versions
        for label, attr in (("SERVING s", "serving_s"), ("usable s", "usable_s"),
                            ("RSS after MiB", "rss_mib")):
            o = _median([getattr(t, attr) for t in old.trials])
            n = _median([getattr(t, attr) for t in new.trials])
            print(f"  {label:<14} old {o:8.2f}  new {n:8.2f}  new/old {n / o:.2f}")
        for label, attr in (("SERVING s", "serving_s"), ("usable s", "usable_s"),
                            ("RSS after MiB", "rss_mib")):
            print(f"  {label:<14} empty store (new code): "
                  f"{_median([getattr(t, attr) for t in empty.trials]):.2f}")
        print(f"  {'RSS before MiB':<14} old {old.rss_before_mib:8.0f}  new "
              f"{new.rss_before_mib:8.0f}  new/old {new.rss_before_mib / old.rss_before_mib:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pending", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=128, help="message body bytes")
    parser.add_argument("--trials", type=int, default=3, help="restarts per version")
    parser.add_argument("--old-ref", default="main", help="git ref of the old code")
    parser.add_argument("--settle-s", type=float, default=3.0,
                        help="wait before taking RSS (after the fill; after the round trip)")
    parser.add_argument("--dir", default=None, help="where to put the stores (default: tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the snapshots (and say where)")
    parser.add_argument("--reuse", default="",
                        help="the directory of a --keep run: restart from its snapshots (those "
                             "that are complete; the others are filled anew)")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
