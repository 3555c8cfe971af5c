"""Room for published messages read and not yet stored, over every AMQP connection together.

Each connection holds at most `Limits.pending_publish_bytes` of them (it is not read from past
that); this bounds their sum over all connections (`Limits.total_pending_publish_bytes`). A
message whose last frame has arrived is admitted when it fits (or when nothing at all is held:
a message larger than the room still goes, alone); otherwise its connection stops reading until
stored messages make room for it. Connections are admitted in the order they came to wait, and
none is admitted past one that waits, so a large message is not starved by small ones.

What is held drains only as messages are stored (or given up), never by what a client does
next: no client can keep the room full by stopping half-way through a message (what arrives
of a message is bounded per connection on its own, `Limits.max_partial_bytes`).
"""

from __future__ import annotations

from collections import deque
from typing import Protocol


class Waiter(Protocol):
    def admitted(self) -> None:
        """The room its message waited for was taken for it: read on."""
        ...


class PublishRoom:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        """Bytes of admitted messages not yet stored."""
        self.most = 0
        """The most ever held at once."""
        self.in_transactions = 0
        """Bytes of messages channel transactions hold until their commit (`txn`): out of
        `held`, bounded by `limit` on their own."""
        self._waiting: deque[tuple[Waiter, int]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def take(self, waiter: Waiter, size: int) -> bool:
        """Hold `size` bytes for `waiter`'s message now (True), or queue it: `waiter.admitted()`
        is called once they are held for it."""
        if not self._waiting and self._fits(size):
            self._hold(size)
            return True
        self._waiting.append((waiter, size))
        return False

    def hold_now(self, size: int) -> None:
        """Hold `size` bytes at once, room or not (a commit's messages, already in memory)."""
        self._hold(size)

    def give(self, size: int) -> None:
        """`size` held bytes were stored or given up: admit who waits, in order, while they
        fit."""
        self.held = max(self.held - size, 0)
        self._wake()

    def cancel(self, waiter: Waiter) -> None:
        """`waiter` waits no more (its connection closed)."""
        if any(queued is waiter for queued, _ in self._waiting):
            self._waiting = deque(item for item in self._waiting if item[0] is not waiter)
            self._wake()

    def _fits(self, size: int) -> bool:
        return self.held == 0 or self.held + size <= self.limit

    def _hold(self, size: int) -> None:
        self.held += size
        self.most = max(self.most, self.held)

    def _wake(self) -> None:
        waiting = self._waiting
        while waiting and self._fits(waiting[0][1]):
            waiter, size = waiting.popleft()
            self._hold(size)
            waiter.admitted()  # may give back at once (its channel closed): re-read the head
