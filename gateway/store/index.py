"""The in-memory consumption index: per topic its positions, per (topic, group) what is where.

Every position of a topic below a group's `cursor` that the group has not acked is in exactly
one of: `ready` (visible, a heap by visible-at then position), `held` (visible, but its key was
excluded by a fetch: parked per key until a fetch no longer excludes it), `timers` (not visible
yet: the group's timer wheel, keyed by position, holds its visible-at time), `leased` (handed
out) or `releasing` (a release is being written). Positions from `cursor` on have not been
looked at by the group yet. Each of those positions also has a row in the `unacked` table (or
one queued) -- or, from the group's `spill_at` key on, only the row: see below.

A delayed position in memory costs one wheel entry (its dict slot, the position and deadline
ints and an 8-byte bucket slot), about 100-130 bytes; message bodies and keys stay on disk, apart
from the most recently published ones, which a topic's tail (`gateway.store.tail`) keeps within
a budget.

Paging. A group keeps at most `MEMORY_HIGH` delayed positions in its wheel. Past that, the latest
ones leave memory (`evict`): their rows are on disk already, and `spill_at` says where memory
ends. It is a key (visible_at_ms, pos): every position the group has not handed out whose row's
key is below it is in memory (ready, held or in the wheel), every one at or above it is on disk
only. A position that arrives at or above it (scanned, or released) stays on disk only. The
fetch pages the next `PAGE` positions in by due time when memory runs low or the first of those
on disk falls due (`gateway.store.paging`); once a page comes back short, everything is in
memory again (`spill_at` None). So memory holds, per group, at most about `MEMORY_HIGH` delayed
positions (plus those visible and not handed out yet), whatever the number of pending retries.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gateway.store.reader import Meta
from gateway.store.writes import UnackedRow
from gateway.timewheel import TimerWheel

MEMORY_HIGH = 32_768
"""Delayed positions a group keeps in memory at most; past it the latest go to disk only."""
MEMORY_KEEP = 16_384
"""Delayed positions left in memory when some go to disk only (`GroupIndex.evict`)."""
PAGE = 8_192
"""Positions one page-in reads (`gateway.store.paging`)."""
PAGE_LOW = 4_096
"""A group with positions on disk only pages in when it holds fewer than this in memory."""

_KEY_END = 1 << 62
"""Above every position (a timer wheel key is below 2**62)."""

ReadyEntry = tuple[int, int, str | None]
"""(visible_at_ms, position, key or None when not known yet)."""

Entry = tuple[str, str, str, bytes | None, Mapping[str, str], int, int, int, int]
"""One message kept in a topic's tail (`gateway.store.tail`), as published: (message_id, key,
tag, body, properties, publish_ms, deliver_at_ms, attempt, retries); for a message delayed
when published, which is read from SQLite when due, no id ("") and no body (None) or properties.
A plain tuple: one is built per published message, at a fifth of a value class's cost."""


@dataclass(eq=False, slots=True)
class TopicIndex:
    """A topic: its id, the next position to assign and the groups that consume it."""

    topic_id: int
    name: str
    first_pos: int
    next_pos: int
    persisted: bool
    groups: dict[str, GroupIndex] = field(default_factory=dict)
    committed: int = field(init=False)
    """Positions below this are durable (`next_pos` when the index is built)."""
    tail: dict[int, Entry] = field(default_factory=dict)
    """Recently published messages by position (`gateway.store.tail`)."""
    tail_first: int = field(init=False)
    tail_end: int = field(init=False)
    waiting: set[GroupIndex] = field(default_factory=set)
    """Its groups that have `wait` callers now: a publish wakes these only (the others see the
    news at their next `wait` by `committed` > `GroupIndex.seen`)."""
    settled: int = 0
    """Counts acks (and removes, purges, dropped groups) of its positions: a trim that deleted
    nothing is tried again once this (or its groups' cursors, or its end) moved."""
    trim_idle: tuple[int, int, int, int] | None = None
    """(lowest cursor, next position, settled, groups) of the last trim that deleted nothing."""
    newest: tuple[int, str] | None = None
    """(position, message id) of the newest committed message, once known (`positions.last_id`
    reads it from the table once after an open; each commit of new messages sets it)."""

    def __post_init__(self) -> None:
        self.committed = self.tail_first = self.tail_end = self.next_pos

    def note_newest(self, last: int, ids: Sequence[str]) -> None:
        """Positions up to `last`, the last of `ids`, are committed: the newest, if it is."""
        if ids and (self.newest is None or self.newest[0] < last):
            self.newest = (last, ids[-1])


@dataclass(eq=False, slots=True)
class GroupIndex:
    """Where each unacked message of one topic stands for one group."""

    gid: int
    topic: TopicIndex
    name: str
    cursor: int
    timers: TimerWheel
    ready: list[ReadyEntry] = field(default_factory=list)
    held: dict[str, list[ReadyEntry]] = field(default_factory=dict)
    leased: dict[int, str] = field(default_factory=dict)
    """position -> lease token."""
    releasing: dict[int, str] = field(default_factory=dict)
    """position -> lease token, while its release is being written."""
    dirty: bool = True
    """Something may be fetchable that the last fetch did not see (besides new messages:
    `seen`)."""
    durable: bool = False
    """Its cursor is written (or queued): the group exists beyond this process and keeps its
    position. A group only looked up (`wait`, `stats`) is not, until it scans or is created."""
    seen: int = 0
    """The topic's `committed` when the last fetch began: it saw every message below."""
    waiters: list[asyncio.Future[None]] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    spill_at: tuple[int, int] | None = None
    """(visible_at_ms, pos): positions not handed out whose rows' keys are at or above it are on
    disk only; None: all are in memory (see the module docstring)."""
    paging: set[int] | None = None
    """While a page-in runs: the positions acked, released or removed meanwhile (its rows of
    them are out of date). None otherwise."""
    arrivals: list[tuple[int, int]] = field(default_factory=list)
    """While a page-in runs: (visible_at_ms, pos) of positions that went to disk only
    meanwhile (its read may have missed them)."""

    def wake(self) -> None:
        """Mark the group as having news and wake its `wait` callers."""
        self.dirty = True
        waiters, self.waiters = self.waiters, []
        if waiters:
            self.topic.waiting.discard(self)
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def push_ready(self, visible_at_ms: int, pos: int, key: str | None) -> None:
        """Make a position visible."""
        heapq.heappush(self.ready, (visible_at_ms, pos, key))

    def hold(self, entry: ReadyEntry, key: str) -> None:
        """Park a visible entry whose key a fetch excluded."""
        self.held.setdefault(key, []).append(entry)

    def unhold(self, exclude_keys: frozenset[str]) -> None:
        """Put back into the ready heap every held key that is no longer excluded."""
        for key in [key for key in self.held if key not in exclude_keys]:
            for entry in self.held.pop(key):
                heapq.heappush(self.ready, entry)

    def advance(self, now_ms: int) -> None:
        """Move the delayed positions whose time has come to the ready heap.

        They enter the heap in position order at `now_ms` (the wheel hands back keys only).
        """
        due = self.timers.advance(now_ms)
        if due:
            visible_at = self.timers.now_ms
            for pos in sorted(due):
                self.push_ready(visible_at, pos, None)
            self.wake()

    def absorb(
        self, metas: Sequence[Meta], now_ms: int, exclude_keys: frozenset[str] = frozenset()
    ) -> list[UnackedRow]:
        """Place scanned, not handed out messages (delayed or visible); return their rows, which
        the caller queues at once (a position may go to disk only here)."""
        rows: list[UnackedRow] = []
        gid = self.gid
        spill = self.spill_at
        for meta in metas:
            rows.append((gid, meta.pos, meta.deliver_at_ms, meta.attempt, meta.retries))
            if spill is not None and (meta.deliver_at_ms, meta.pos) >= spill:
                self.spilled(meta.deliver_at_ms, meta.pos)
            elif meta.deliver_at_ms > now_ms:
                self.timers.schedule(meta.deliver_at_ms, meta.pos)
            elif meta.key in exclude_keys:
                self.hold((meta.deliver_at_ms, meta.pos, meta.key), meta.key)
            else:
                self.push_ready(meta.deliver_at_ms, meta.pos, meta.key)
        self.bound()
        return rows

    def place(self, visible_at_ms: int, pos: int) -> None:
        """Put a released position (its row written) where it belongs: in the wheel, ready, or
        on disk only."""
        spill = self.spill_at
        if spill is not None and (visible_at_ms, pos) >= spill:
            self.spilled(visible_at_ms, pos)
        elif visible_at_ms > self.timers.now_ms:
            self.timers.schedule(visible_at_ms, pos)
            self.bound()
        else:
            self.push_ready(visible_at_ms, pos, None)

    def spilled(self, visible_at_ms: int, pos: int) -> None:
        """A position stays on disk only (at or above `spill_at`)."""
        if self.paging is not None:
            self.arrivals.append((visible_at_ms, pos))

    def touched(self, pos: int) -> None:
        """`pos` was acked, released or removed: a page-in running now must not trust its row."""
        if self.paging is not None:
            self.paging.add(pos)

    def bound(self) -> None:
        """Keep the wheel within MEMORY_HIGH positions (not while a page-in runs: it moves
        `spill_at` itself, and calls this when done)."""
        if len(self.timers) > MEMORY_HIGH and self.paging is None:
            self.evict(MEMORY_KEEP)

    def evict(self, keep: int) -> None:
        """Leave the `keep` earliest delayed positions in the wheel (and every one already due);
        the others are on disk only from now on: `spill_at` moves down to the first of them."""
        timers = self.timers
        pending = sorted(timers.entries())
        now = timers.now_ms
        first = max(keep, bisect.bisect_right(pending, (now, _KEY_END)))
        if first >= len(pending):
            return
        for _, pos in pending[first:]:
            timers.cancel(pos)
        cut = pending[first]
        if self.spill_at is None or cut < self.spill_at:
            self.spill_at = cut

    def visible(self) -> list[ReadyEntry]:
        """Every visible, not leased entry (ready and held), unordered."""
        out = list(self.ready)
        for entries in self.held.values():
            out.extend(entries)
        return out

    def drop_visible(self, positions: set[int]) -> set[int]:
        """Remove `positions` from the ready heap and the held entries; return those found."""
        found = {entry[1] for entry in self.visible()} & positions
        if found:
            self.ready = [entry for entry in self.ready if entry[1] not in found]
            heapq.heapify(self.ready)
            for key in list(self.held):
                kept = [entry for entry in self.held[key] if entry[1] not in found]
                if kept:
                    self.held[key] = kept
                else:
                    del self.held[key]
        return found
