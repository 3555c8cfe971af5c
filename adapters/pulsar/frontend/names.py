"""One lock per (topic, subscription) name, so that the commands that change a subscription
(SUBSCRIBE, UNSUBSCRIBE, SEEK, and the drop of a reader group when its last consumer leaves)
run one at a time per name across every connection of a front end: a check (is this name a
durable subscription? has it other consumers?) and the change that relies on it cannot be
interleaved with another command's. Locks are made on demand and forgotten when unused."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class NameLocks:
    """`hold(topic, name)` serializes the holders of one name."""

    def __init__(self) -> None:
        self._locks: dict[tuple[str, str], tuple[asyncio.Lock, list[int]]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, topic: str, name: str) -> AsyncIterator[None]:
        key = (topic, name)
        entry = self._locks.get(key)
        if entry is None:
            entry = self._locks[key] = (asyncio.Lock(), [0])
        lock, users = entry
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if not users[0]:
                del self._locks[key]

    def __len__(self) -> int:
        """Names with a lock (held or waited for)."""
        return len(self._locks)
