"""What the replica tests share besides the ledger: publishers through the replicas, the run
around the kill of replica 0, the checks at the end."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from client_gateway import GatewayProcess
from replicas_ledger import Ledger

from gateway.client import GatewayClient


async def publisher(ledger: Ledger, target: str, topic: str, numbers: Iterator[int],
                    lock: asyncio.Lock, bad_every: int) -> None:
    """Publish batches of 20 through one replica until the numbers run out or it dies."""
    async with GatewayClient(target) as client:
        while True:
            async with lock:
                batch = list(itertools.islice(numbers, 20))
            if not batch:
                return
            bodies = [f"{'bad' if n % bad_every == 0 else 'ok'}-{n}" for n in batch]
            ledger.attempted.update(bodies)
            try:
                await client.publish(topic, [b.encode() for b in bodies])
            except Exception:  # the killed replica: maybe stored, not confirmed
                return
            ledger.published.update(bodies)
            await asyncio.sleep(0.01)


async def wait_until(condition: Callable[[], object], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        await asyncio.sleep(0.1)
    return bool(condition())


async def until_stopped(stop: asyncio.Event, consume: Callable[[], Awaitable[None]]) -> None:
    """Run a consumer again, 0.2 s after it ended, until `stop`: the one that rejoins the
    restarted replica. Its first calls may be refused: gRPC shares one connection per address
    across a process's channels, and the one to the killed replica may still report its last
    failure ("Connection refused") for a moment after the new process listens."""
    while not stop.is_set():
        await consume()
        await asyncio.sleep(0.2)


async def run_group(ledger: Ledger, procs: list[GatewayProcess], topic: str, messages: int,
                    bad_every: int, consumers: list[asyncio.Future[None]],
                    rejoin: Callable[[], Awaitable[None]], linger_s: float,
                    deadline_s: float) -> bool:
    """Publish `messages` through every replica while `consumers` run, until replica 0 has
    been killed (by a consumer) and the publishers are done; start replica 0 again with the
    consumer `rejoin()`, wait until every confirmed message is acked or dead-lettered, then
    `linger_s` for late duplicates, and stop the consumers (the caller's `stop` event must be
    set by then: this sets `ledger`'s times only). True if everything was settled in time."""
    numbers, lock = iter(range(messages)), asyncio.Lock()
    publishers = [asyncio.ensure_future(
        publisher(ledger, proc.target, topic, numbers, lock, bad_every)) for proc in procs]
    assert await wait_until(lambda: ledger.kill_at is not None, 90), \
        "replica 0 was never killed: the group made no progress there"
    await asyncio.gather(*publishers)
    ledger.restart_at = time.monotonic()
    procs[0].start()  # same port and data directory: it rejoins the group
    consumers.append(asyncio.ensure_future(rejoin()))
    finished = await wait_until(ledger.done, deadline_s)
    await asyncio.sleep(linger_s)
    return finished


def check(ledger: Ledger, finished: bool, tmp: Path) -> None:
    """The ledger's rules, and that every replica took part and replica 0 came back."""
    problems = ledger.violations()
    ledger.dump(tmp / "ledger.json", problems)
    assert finished, (f"not finished: {len(ledger.acked())} acked, "
                      f"{len(ledger.dead())} dead of {len(ledger.published)}\n"
                      + "\n".join(problems[:40]))
    assert not problems, "\n".join(problems[:40])
    assert ledger.kill_at is not None
    assert any(s.replica == 0 and s.at <= ledger.kill_at for s in ledger.seen)
    assert {s.replica for s in ledger.seen} == {0, 1, 2}
    assert any(s.consumer == "grpc-0.rejoined" for s in ledger.seen)
