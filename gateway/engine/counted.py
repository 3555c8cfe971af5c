"""Names the back end holds (topics, groups), counted against a limit on new ones.

Client-chosen names each make something the back end keeps for good (a topic, a group's
position); `--max-topics` and `--max-stored-groups` bound them, and each principal's share of
them (`--max-topics-per-principal`, `--max-stored-groups-per-principal`) keeps one client from
taking every name there is. The names are read from the back end at the first new one after a
start and again when a count is at its limit (so names removed meanwhile leave the counts; at
most once a second, so that new names sent at a limit cost no more than a set lookup each), and
added one by one in between: a known name costs one set lookup.

A principal's share counts the names it made since the gateway started (which principal made a
name is not kept in the back end): after a restart, the names made before count against the
whole limit only. A name leaves its principal's share when a read no longer lists it and it was
taken at least `SETTLE_S` before: one taken just before a read may not be in the back end yet
(its publish still waits its turn), and dropping it then would let a principal that keeps many
new names under way at each read pass its share a little more every time.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Generic, Literal, TypeVar

K = TypeVar("K", bound=Hashable)
RECOUNT_S = 1.0
"""At a limit, the back end's names are read again at most this often."""
SETTLE_S = 60.0
"""A name taken this long before a read that does not list it has left the back end (or was
never made): it no longer counts against its principal's share."""
Refusal = Literal["limit", "share"]
"""Why a new name is refused: the whole limit is reached, or the principal's share of it."""


class Counted(Generic[K]):
    __slots__ = ("_clock", "_held", "_made", "_read", "_read_at", "limit", "share")

    def __init__(self, limit: int, read: Callable[[], Awaitable[Iterable[K]]],
                 clock: Callable[[], float] = time.monotonic, *, share: int = 0) -> None:
        self.limit = limit
        self.share = min(share or limit, limit)
        """New names one principal may make (`limit`: no share of its own)."""
        self._read = read
        self._clock = clock
        self._held: set[K] | None = None
        """The back end's names and the new ones taken since; None until the first new one."""
        self._made: dict[str, dict[K, float]] = {}
        """The names each principal made since the start that the back end still holds, with
        when each was taken (kept only while shares are smaller than the limit)."""
        self._read_at = -RECOUNT_S

    async def admit(self, name: K, owner: str | None = None) -> Refusal | None:
        """None when `name` is held or may be made (by `owner`: None is the gateway's own,
        counted against the limit only); else why it may not."""
        held = self._held
        if held is not None and name in held:
            return None
        mine = (None if owner is None or self.share >= self.limit
                else self._made.setdefault(owner, {}))
        if held is not None and mine is not None and name in mine:
            held.add(name)  # its own, taken before the last read and not listed yet
            return None
        if held is None or self._refused(held, mine) is not None:
            if held is not None and self._clock() - self._read_at < RECOUNT_S:
                return self._refused(held, mine)
            self._read_at = self._clock()
            held = self._held = set(await self._read())
            self._forget_removed(held, self._read_at - SETTLE_S)
            if name in held:
                return None
            refusal = self._refused(held, mine)
            if refusal is not None:
                return refusal
        held.add(name)
        if mine is not None:
            mine[name] = self._clock()
        return None

    def _forget_removed(self, held: set[K], before: float) -> None:
        """Drop from the shares the names `held` (just read) does not list that were taken
        at `before` or earlier; the names under way stay counted (see the module's docstring)."""
        for names in self._made.values():
            gone = [n for n, taken in names.items() if taken <= before and n not in held]
            for n in gone:
                del names[n]

    def _refused(self, held: set[K], mine: dict[K, float] | None) -> Refusal | None:
        if len(held) >= self.limit:
            return "limit"
        if mine is not None and len(mine) >= self.share:
            return "share"
        return None
