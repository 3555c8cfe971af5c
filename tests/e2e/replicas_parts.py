"""What the replica tests share besides the ledger: publishers through a replica, waiting."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Iterator

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
