"""Names the back end holds (topics, groups), counted against a limit on new ones.

Client-chosen names each make something the back end keeps for good (a topic, a group's
position); `--max-topics` and `--max-stored-groups` bound them. The names are read from the
back end at the first new one after a start and again when the count is at the limit (so
names removed meanwhile leave the count; at most once a second, so that new names sent at the
limit cost no more than a set lookup each), and added one by one in between: a known name costs
one set lookup.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
RECOUNT_S = 1.0
"""At the limit, the back end's names are read again at most this often."""


class Counted(Generic[K]):
    __slots__ = ("_clock", "_held", "_read", "_read_at", "limit")

    def __init__(self, limit: int, read: Callable[[], Awaitable[Iterable[K]]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self._read = read
        self._clock = clock
        self._held: set[K] | None = None
        """The back end's names and the new ones taken since; None until the first new one."""
        self._read_at = -RECOUNT_S

    async def admit(self, name: K) -> bool:
        """True when `name` is held or may be made; False at the limit."""
        held = self._held
        if held is not None and name in held:
            return True
        if held is None or len(held) >= self.limit:
            if held is not None and self._clock() - self._read_at < RECOUNT_S:
                return False
            self._read_at = self._clock()
            held = self._held = set(await self._read())
            if name in held:
                return True
            if len(held) >= self.limit:
                return False
        held.add(name)
        return True
