"""The bytes of bodies each principal's deliveries hold unsettled, pushed and pulled together.

A push consumer holds at most `max_unacked_bytes` of bodies (its window), but a principal may
open as many consumers as it likes, and a pull (`receive`) had no window at all: a client that
received a backlog with a long invisible time made the engine hold every body until it was
settled or timed out (1,000 pulls of 1 MiB: +991 MiB), and one that opened streams it never read
held 64 MiB in each. Each principal now holds at most `max_held_bytes` (`EngineConfig`)
together: its consumers get no more deliveries and its receives wait or answer none, until
some are settled or time out; the other principals go on. The one delivery that passes the
limit is the last, as in a consumer's window.

The count is kept by the engine's table of deliveries (`gateway.engine.inflight.InFlightTable`),
on every way a delivery enters or leaves it, so it cannot drift from what is held.
"""

from __future__ import annotations

import asyncio
from typing import Protocol


class Wakeable(Protocol):
    """A subscription whose dispatcher waits for room (`Subscription.wake`)."""

    wake: asyncio.Event


class Holdings:
    """Bytes held by principal, within one limit each."""

    __slots__ = ("_freed", "limit", "starved", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used: dict[str, int] = {}
        """Bytes held by deliveries (and reserved by fetches under way), by principal."""
        self.starved: set[Wakeable] = set()
        """Subscriptions that found a consumer's principal at its limit: woken when any
        principal's holdings go under it again (they check again)."""
        self._freed: asyncio.Future[None] | None = None

    def full(self, owner: str) -> bool:
        return self.used.get(owner, 0) >= self.limit

    def room(self, owner: str) -> int:
        """Bytes `owner` may still take (the delivery that passes them is the last)."""
        return self.limit - self.used.get(owner, 0)

    def add(self, owner: str, size: int) -> None:
        """`size` more bytes held (or reserved for a fetch under way) by `owner`."""
        self.used[owner] = self.used.get(owner, 0) + size

    def less(self, owner: str, size: int) -> None:
        """`size` bytes given back by `owner`: wakes who waits for room."""
        used = self.used.get(owner, 0)
        left = used - size
        if left > 0:
            self.used[owner] = left
        else:
            self.used.pop(owner, None)
        if used >= self.limit > left:
            self._room_again()

    def _room_again(self) -> None:
        """A principal went under the limit: who waits for room checks again."""
        for sub in self.starved:
            sub.wake.set()
        self.starved.clear()
        freed = self._freed
        if freed is not None and not freed.done():
            freed.set_result(None)

    def freed(self) -> asyncio.Future[None]:
        """Done when a principal next goes under the limit (a receive at it waits on this)."""
        if self._freed is None or self._freed.done():
            self._freed = asyncio.get_running_loop().create_future()
        return self._freed
