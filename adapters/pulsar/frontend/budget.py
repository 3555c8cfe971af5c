"""Memory for frames read from clients, shared by all connections of one listener.

A connection takes a frame's cost once it has read the whole frame, before handling it, and
gives it back once the frame is done with (a SEND when its receipt or error is written): what a
client only announces costs nothing. When the budget is spent, connections stop reading (TCP
then holds clients back) until earlier frames are done; nothing is refused.
One frame is always let through when nothing is held, so no frame size can deadlock.
"""

from __future__ import annotations

import asyncio

READ_BUDGET_BYTES = 64 * 1024 * 1024
"""Bytes of frames (with the cost of their decoded messages) held at once per listener."""
FRAME_COST = 1024
"""Cost of one frame beyond its bytes: the objects it becomes."""
MESSAGE_COST = 512
"""Cost of each message decoded from a SEND beyond its bytes."""


class ReadBudget:
    """Counts the bytes held; `take` waits while they would exceed the limit."""

    def __init__(self, limit: int = READ_BUDGET_BYTES) -> None:
        self.limit = limit
        self.used = 0
        self._freed = asyncio.Event()

    async def take(self, cost: int) -> None:
        """Wait until `cost` fits (or nothing is held), then hold it."""
        while self.used > 0 and self.used + cost > self.limit:
            self._freed.clear()
            await self._freed.wait()
        self.used += cost

    def charge(self, cost: int) -> None:
        """Hold `cost` more at once (what decoding a frame turned out to need)."""
        self.used += cost

    def give(self, cost: int) -> None:
        """Give back what a frame held."""
        self.used -= cost
        self._freed.set()
