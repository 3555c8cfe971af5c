"""The engine's deliveries by receipt, counting the bodies pulled deliveries hold, by principal.

A push consumer holds at most `max_unacked_bytes` of bodies (its window). A pull (`receive`, by
every front end whose clients lease messages one call at a time) had no such window: a client that
received a backlog with a long invisible time made the engine hold every body until settled or
timed out (300 pulls of 1 MiB with a 1-hour invisible time: +305 MB), bounded by nothing but the
backlog. Now each principal's pulls hold at most `max_pulled_bytes` together (`take` before a
fetch reserves the room it asks the back end for; the one message that passes the room is the
last, as in a push window), so one principal at it waits without holding up anyone else.

`InFlightTable` is the engine's `inflight` mapping itself: the bytes of a delivery a pull holds
(`InFlight.pulled`) are counted when it enters the table and given back on every way it leaves
(`pop`, `del`, `clear`), so the count cannot drift from what the table holds.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.engine.dispatch import InFlight

Owner = str
"""A principal (`SubscriptionSpec.owner`; "" is the anonymous one)."""


class InFlightTable(dict[str, InFlight]):
    """`receipt -> InFlight`, with the bytes of bodies each principal's pulls hold."""

    __slots__ = ("_freed", "held")

    def __init__(self) -> None:
        super().__init__()
        self.held: dict[Owner, int] = {}
        """Bytes held by pulled deliveries and reserved by fetches under way, by principal."""
        self._freed: asyncio.Future[None] | None = None

    def __setitem__(self, receipt: str, inf: InFlight) -> None:
        owner = inf.pulled
        if owner is not None:
            old = dict.get(self, receipt)
            if old is not None:
                self._gone(old)
            self.held[owner] = self.held.get(owner, 0) + len(inf.stored.body)
        dict.__setitem__(self, receipt, inf)

    def __delitem__(self, receipt: str) -> None:
        inf = dict.pop(self, receipt)
        if inf.pulled is not None:
            self._gone(inf)

    def pop(self, receipt: str, *default: Any) -> Any:
        inf = dict.pop(self, receipt, *default)
        if inf is not None and inf.pulled is not None:
            self._gone(inf)
        return inf

    def clear(self) -> None:
        for inf in dict.values(self):
            if inf.pulled is not None:
                self._gone(inf)
        dict.clear(self)

    def popitem(self) -> tuple[str, InFlight]:
        raise TypeError("InFlightTable: pop a receipt by name")

    def setdefault(self, *args: Any) -> Any:
        raise TypeError("InFlightTable: set a receipt with []")

    def update(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("InFlightTable: set a receipt with []")

    # -------------------------------------------------------------- the pulls' room
    def room(self, owner: Owner, limit: int) -> int:
        """Bytes `owner`'s pulls may still take within `limit`."""
        return limit - self.held.get(owner, 0)

    def take(self, owner: Owner, size: int) -> None:
        """Reserve `size` bytes for a fetch under way (`give` them back once it has counted
        what it delivered, with no await in between)."""
        self.held[owner] = self.held.get(owner, 0) + size

    def give(self, owner: Owner, size: int) -> None:
        """Give back bytes reserved with `take`."""
        self._less(owner, size)

    def count(self, receipts: list[str], owner: Owner) -> None:
        """The deliveries of `receipts` (just made) are held by `owner`'s pull."""
        held = 0
        for receipt in receipts:
            inf = dict.__getitem__(self, receipt)
            inf.pulled = owner
            held += len(inf.stored.body)
        self.held[owner] = self.held.get(owner, 0) + held

    def freed(self) -> asyncio.Future[None]:
        """Done when a pull's bytes are next given back (a receive at its limit waits on it)."""
        if self._freed is None or self._freed.done():
            self._freed = asyncio.get_running_loop().create_future()
        return self._freed

    def _gone(self, inf: InFlight) -> None:
        assert inf.pulled is not None
        self._less(inf.pulled, len(inf.stored.body))

    def _less(self, owner: Owner, size: int) -> None:
        left = self.held.get(owner, 0) - size
        if left > 0:
            self.held[owner] = left
        else:
            self.held.pop(owner, None)
        freed = self._freed
        if freed is not None and not freed.done():
            freed.set_result(None)
