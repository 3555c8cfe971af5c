"""The in-memory back end's tables (`gateway.backend.memory`): a topic's messages, a group's
slots and heaps."""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field

Entry = tuple[int, int, int]
"""A waiting slot in a heap: (visible-at ms, position, the slot's entry number). An entry whose
number is no longer its slot's is stale (the slot moved, was leased or is gone) and is skipped."""


@dataclass(slots=True, eq=False)
class Message:
    message_id: str
    key: str
    tag: str
    body: bytes
    properties: Mapping[str, str]
    publish_ms: int
    deliver_at_ms: int
    attempt: int
    retries: int


@dataclass(slots=True, eq=False)
class Slot:
    """A position a group has looked at and not acked."""

    visible_at: int
    attempt: int
    retries: int
    token: str = ""
    """The lease token while leased, else ""."""
    entry: int = 0
    """The number of its one live heap entry while waiting (0 while leased)."""


@dataclass(eq=False)
class Group:
    name: str
    cursor: int
    """The first position the group has not looked at."""
    slots: dict[int, Slot] = field(default_factory=dict)
    ready: list[Entry] = field(default_factory=list)
    """Visible waiting slots, a heap by visible-at then position."""
    delayed: list[Entry] = field(default_factory=list)
    """Waiting slots that may not be visible yet (released or delayed), a heap by visible-at."""
    held: dict[str, list[Entry]] = field(default_factory=dict)
    """Visible waiting slots whose key a fetch excluded, parked until a fetch does not."""
    dirty: bool = True
    """Something may be fetchable that the last fetch did not see."""
    waiters: list[asyncio.Future[None]] = field(default_factory=list)
    placed: bool = False  # it looked at positions or was created: it keeps its position

    def reset(self, cursor: int) -> None:
        """Forget every position looked at; read on from `cursor`."""
        self.cursor, self.placed = cursor, True
        for table in (self.slots, self.ready, self.delayed, self.held):
            table.clear()
        self.wake()

    def wake(self) -> None:
        self.dirty = True
        waiters, self.waiters = self.waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def live(self, entry: Entry) -> bool:
        slot = self.slots.get(entry[1])
        return slot is not None and slot.entry == entry[2]

    def next_delayed(self) -> int | None:
        """The earliest visible-at time among delayed slots (stale heap tops dropped)."""
        delayed = self.delayed
        while delayed and not self.live(delayed[0]):
            heapq.heappop(delayed)
        return delayed[0][0] if delayed else None


@dataclass(eq=False)
class Topic:
    name: str
    messages: dict[int, Message] = field(default_factory=dict)
    next_pos: int = 1
    published: bool = False
    newest: str = ""
    """The id of the newest message published ("": none), kept when a trim forgets it."""
    groups: dict[str, Group] = field(default_factory=dict)

    def properties_after(self, message_id: str, limit: int) -> list[tuple[str, Mapping[str, str]]]:
        """`Backend.properties_after` on this topic's messages (kept in position order)."""
        kept = list(self.messages.values())
        start = next((i + 1 for i, m in enumerate(kept) if m.message_id == message_id), 0)
        return [(m.message_id, m.properties) for m in kept[start:start + max(limit, 0)]]
