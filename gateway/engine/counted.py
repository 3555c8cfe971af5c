"""Names the back end holds (topics, groups), counted against a limit on new ones.

Client-chosen names each make something the back end keeps for good (a topic, a group's
position); `--max-topics` and `--max-stored-groups` bound them, and each principal's share of
them (`--max-topics-per-principal`, `--max-stored-groups-per-principal`) keeps one client from
taking every name there is. The names are read from the back end at the first new one after a
start and again when a count is at its limit (so names removed meanwhile leave the counts; at
most once a second, so that new names sent at a limit cost no more than a set lookup each), and
added one by one in between: a known name costs one set lookup.

A name taken less than `SETTLE_S` before a read stays counted though the read does not list it:
it may not be in the back end yet (its publish still waits its turn), and dropping it let
clients that kept many new names under way pass the limit at every read (200 publishers on new
names took 499 topics under a limit of 300). One taken earlier and not listed has left the back
end (or was never made): it no longer counts.

A principal's share counts the names it made since the gateway started (which principal made a
name is not kept in the back end): after a restart, the names made before count against the
whole limit only. Its names leave it as above.
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
never made): it no longer counts."""
Refusal = Literal["limit", "share"]
"""Why a new name is refused: the whole limit is reached, or the principal's share of it."""


class Counted(Generic[K]):
    __slots__ = ("_clock", "_held", "_made", "_read", "_read_at", "_recent", "limit", "share")

    def __init__(self, limit: int, read: Callable[[], Awaitable[Iterable[K]]],
                 clock: Callable[[], float] = time.monotonic, *, share: int = 0) -> None:
        self.limit = limit
        self.share = min(share or limit, limit)
        """New names one principal may make (`limit`: no share of its own)."""
        self._read = read
        self._clock = clock
        self._held: set[K] | None = None
        """The back end's names and the new ones taken since; None until the first new one."""
        self._recent: dict[K, float] = {}
        """The names taken since `SETTLE_S` before the last read, with when each was taken."""
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
        taken = self._recent[name] = self._clock()
        if mine is not None:
            mine[name] = taken
        return None

    def _forget_removed(self, held: set[K], before: float) -> None:
        """Count again in `held` (just read) the names taken after `before` that it does not
        list, and drop from the shares those taken at `before` or earlier (see the module's
        docstring)."""
        recent = self._recent
        for n, taken in list(recent.items()):
            if taken <= before:
                del recent[n]
            else:
                held.add(n)
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
