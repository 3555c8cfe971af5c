"""The bytes of publishes being stored at once, every front end together.

A publish costs the gateway several times its bytes while the back end stores it (the request,
its messages, the store's frame to its writer and that frame's send buffer; a broker back end's
own copies). Each front end bounds what one client has unanswered (a stream, a connection), but
clients together were not bounded: twenty gRPC `Publish` calls of 57 MiB sent at once took the
gateway to 5.5 GB. The engine takes every publish through one `PublishBudget`: a publish whose
bytes do not fit waits, in arrival order, until earlier ones are stored (or fail). One publish
larger than the whole budget still goes, alone, so every publish the size limits allow can be
stored.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib


class PublishBudget:
    """At most `limit` bytes of publishes handed to the back end at once (one publish of any
    size when nothing else is)."""

    __slots__ = ("_waiters", "limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        """Bytes of the publishes the back end is storing now."""
        self._waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    @property
    def waiting(self) -> int:
        """Publishes waiting for room."""
        return len(self._waiters)

    def take_now(self, size: int) -> bool:
        """Take room for `size` bytes if it is there now and nobody waits for it."""
        if self._waiters or not self._fits(size):
            return False
        self.used += size
        return True

    async def take(self, size: int) -> None:
        """Take room for `size` bytes, waiting in arrival order until it is there."""
        if not self.take_now(size):
            await self._wait(size)

    def give(self, size: int) -> None:
        """Give back room taken with `take` or `take_now`."""
        self.used -= size
        self._wake()

    def _fits(self, size: int) -> bool:
        return self.used == 0 or self.used + size <= self.limit

    async def _wait(self, size: int) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, future)
        self._waiters.append(entry)
        try:
            await future
        except BaseException:
            if future.done() and not future.cancelled():
                # Room was given just as the wait was cancelled: give it back.
                self.used -= size
            else:
                with contextlib.suppress(ValueError):  # `_wake` may have dropped it
                    self._waiters.remove(entry)
            self._wake()
            raise

    def _wake(self) -> None:
        """Give room to the waiters at the front, in order, while they fit."""
        waiters = self._waiters
        while waiters:
            size, future = waiters[0]
            if future.done():  # cancelled: `_wait` takes it out
                waiters.popleft()
                continue
            if not self._fits(size):
                return
            waiters.popleft()
            self.used += size
            future.set_result(None)
