"""The in-memory back end: every `Backend` capability in plain dicts and heaps.

Everything stays in the process: no threads, no I/O, time only from the engine's `Clock`, so
engine tests run on a `ManualClock`. Its semantics are the embedded store's:

* positions count from 1 per topic; message ids are 32 hex characters, time-ordered (publish ms,
  the instance's tag, a counter) unless the caller gives one;
* a group starts at the earliest message kept (or where `create_group`, `seek` put it); each
  position it has looked at and not acked has a *slot* (its visible-at time and counters):
  waiting, parked under an excluded key, or leased; from the group's cursor on, none yet;
* `fetch` hands out waiting slots in visible-at order first, then new positions in topic order;
  a key in `exclude_keys` is skipped with every later message of it (per-key order);
* a lease is void once acked, released, removed, dropped or the back end closed (`purge` keeps
  leases); `close` keeps the messages (an `open` again is a restart): what was leased is visible
  again at once, released messages keep their visible-at times and counters;
* `trim()` forgets messages every group has acked (the embedded store does it periodically).

Durability is the process's lifetime. `poke()` wakes `wait` callers (after a manual clock moved).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping, Sequence

from gateway.backend.base import Backend, Lease, OutMessage, Release, StoredMessage, TopicStats
from gateway.backend.memory_state import Entry, Group, Message, Slot, Topic
from gateway.backend.waiting import park
from gateway.engine.clock import Clock, SystemClock
from gateway.errors import InvalidArgument, NotFound, Unavailable

_instances = itertools.count(1)
"""Instance numbers, the middle of every message id: ids stay unique across instances."""


class InMemoryBackend(Backend):
    """Topics and groups in memory; see the module docstring."""

    name = "memory"
    seekable = skips_delays = removes_by_position = True
    capabilities = frozenset({"delayed-delivery", "per-key-order", "independent-groups",
                              "oldest-ready-time", "backlog-view", "positions", "retry-reset",
                              "purge-keeps-inflight", "delay-skip", "catch-up"})

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock: Clock = clock or SystemClock()
        self._topics: dict[str, Topic] = {}
        self._tag = f"{next(_instances) & 0xFFFFFFFF:08x}"
        self._ids = itertools.count(1)
        self._entries = itertools.count(1)
        self._tokens = itertools.count(1)
        self._session = 0
        self._open = False

    # ----------------------------------------------------------------- lifecycle

    async def open(self) -> None:
        if not self._open:
            self._session, self._open = self._session + 1, True

    async def close(self) -> None:
        """Stop serving; leases are dropped: what was leased is visible again at its old time."""
        if not self._open:
            return
        self._open = False
        for topic in self._topics.values():
            for group in topic.groups.values():
                for pos, slot in group.slots.items():
                    if slot.token:
                        self._delay(group, pos, slot)
                group.wake()

    def healthy(self) -> bool:
        return self._open

    def _ready(self) -> None:
        if not self._open:
            raise Unavailable("in-memory back end is not open")

    # ----------------------------------------------------------------- helpers

    def _topic(self, name: str) -> Topic:
        topic = self._topics.get(name)
        if topic is None:
            if not name:
                raise InvalidArgument("topic", name, "a non-empty topic name")
            topic = self._topics[name] = Topic(name)
        return topic

    def _group(self, topic: Topic, name: str) -> Group:
        group = topic.groups.get(name)
        if group is None:
            if not name:
                raise InvalidArgument("group", name, "a non-empty group name")
            start = min(topic.messages, default=topic.next_pos)
            group = topic.groups[name] = Group(name, start)
        return group

    def _known(self, lease: Lease) -> tuple[Topic, Group] | None:
        topic = self._topics.get(lease.topic)
        group = None if topic is None else topic.groups.get(lease.group)
        return None if topic is None or group is None else (topic, group)

    def _waiting(self, pos: int, slot: Slot) -> Entry:
        """Make `slot` a waiting one (not leased); return its new heap entry, not placed."""
        slot.token = ""
        slot.entry = next(self._entries)
        return slot.visible_at, pos, slot.entry

    def _delay(self, group: Group, pos: int, slot: Slot) -> None:
        """Make `slot` a waiting one in the delayed heap (`fetch` moves it on once visible)."""
        heapq.heappush(group.delayed, self._waiting(pos, slot))

    def _look_at(self, topic: Topic, group: Group, upto: int) -> list[tuple[int, Slot]]:
        """Give slots to the positions from the cursor below `upto`; return them, not placed."""
        out: list[tuple[int, Slot]] = []
        messages = topic.messages
        for pos in range(group.cursor, min(upto, topic.next_pos)):
            message = messages.get(pos)
            if message is not None:
                slot = Slot(message.deliver_at_ms, message.attempt, message.retries)
                group.slots[pos] = slot
                out.append((pos, slot))
        group.cursor = max(group.cursor, min(upto, topic.next_pos))
        group.placed = True
        return out

    @staticmethod
    def _advance(group: Group, now_ms: int) -> None:
        """Move delayed slots visible at `now_ms` to the ready heap."""
        delayed = group.delayed
        while delayed and delayed[0][0] <= now_ms:
            entry = heapq.heappop(delayed)
            if group.live(entry):
                heapq.heappush(group.ready, entry)

    def _lease(self, topic: Topic, group: Group, pos: int, slot: Slot) -> StoredMessage:
        token = f"{self._session}.{next(self._tokens)}"
        slot.token = token
        slot.entry = 0
        return self._stored(topic, group, pos, slot, token)

    @staticmethod
    def _stored(topic: Topic, group: Group, pos: int, slot: Slot, token: str) -> StoredMessage:
        message = topic.messages[pos]
        return StoredMessage(
            lease=Lease(topic.name, group.name, pos, token),
            message_id=message.message_id,
            topic=topic.name,
            body=message.body,
            properties=message.properties,
            key=message.key,
            tag=message.tag,
            publish_ms=message.publish_ms,
            deliver_at_ms=message.deliver_at_ms,
            attempt=slot.attempt,
            retries=slot.retries,
        )

    # ----------------------------------------------------------------- verbs

    async def publish(self, topic: str, messages: Sequence[OutMessage]) -> list[str]:
        self._ready()
        if not messages:
            return []
        index = self._topic(topic)
        now_ms = self._clock.now_ms()
        prefix = f"{now_ms & 0xFFFFFFFFFFFF:012x}{self._tag}"
        ids: list[str] = []
        for message in messages:
            message_id = message.message_id or f"{prefix}{next(self._ids) & 0xFFFFFFFFFFFF:012x}"
            ids.append(message_id)
            index.messages[index.next_pos] = Message(
                message_id, message.key, message.tag, bytes(message.body), message.properties,
                now_ms, message.deliver_at_ms, message.attempt, message.retries,
            )
            index.next_pos += 1
        index.published, index.newest = True, ids[-1]
        for group in index.groups.values():
            group.wake()
        return ids

    async def fetch(
        self,
        topic: str,
        group: str,
        max_messages: int,
        now_ms: int,
        *,
        exclude_keys: frozenset[str] = frozenset(),
        max_bytes: int | None = None,
        publish_delays: bool = True,
    ) -> list[StoredMessage]:
        self._ready()
        if max_messages <= 0:
            return []
        index = self._topic(topic)
        state = self._group(index, group)
        state.dirty = False
        self._advance(state, now_ms)
        for key in [key for key in state.held if key not in exclude_keys]:
            for entry in state.held.pop(key):
                heapq.heappush(state.ready, entry)
        out: list[StoredMessage] = []
        ready = state.ready
        while ready and len(out) < max_messages:
            entry = heapq.heappop(ready)
            if not state.live(entry):
                continue
            pos = entry[1]
            key = index.messages[pos].key
            if key in exclude_keys:
                state.held.setdefault(key, []).append(entry)
            else:
                out.append(self._lease(index, state, pos, state.slots[pos]))
        # New positions only once every older visible one was looked at.
        while not ready and len(out) < max_messages and state.cursor < index.next_pos:
            for pos, slot in self._look_at(index, state, state.cursor + 1):
                message = index.messages[pos]
                if not publish_delays:  # the group gets delayed messages at once
                    slot.visible_at = 0
                if slot.visible_at > now_ms:
                    self._delay(state, pos, slot)
                elif message.key in exclude_keys:
                    state.held.setdefault(message.key, []).append(self._waiting(pos, slot))
                else:
                    out.append(self._lease(index, state, pos, slot))
        if len(out) >= max_messages or ready:
            state.dirty = True
        return out

    async def wait(self, topic: str, group: str, timeout_s: float) -> None:
        """See `Backend.wait`; delayed messages are due by the back end's clock (which should
        be the caller's: give the engine's clock to the constructor)."""
        self._ready()
        state = self._group(self._topic(topic), group)
        if state.dirty:
            return
        await park(state.waiters, timeout_s, state.next_delayed(), self._clock.now_ms())

    def poke(self) -> None:
        """Wake the `wait` callers of every group with a delayed message due by the clock now
        (after a test moved a `ManualClock`; with the system clock `wait` wakes by itself)."""
        now_ms = self._clock.now_ms()
        for topic in self._topics.values():
            for group in topic.groups.values():
                due = group.next_delayed()
                if due is not None and due <= now_ms:
                    group.wake()

    async def ack(self, leases: Sequence[Lease]) -> None:
        self._ready()
        for lease in leases:
            known = self._known(lease)
            if known is None or not lease.token:
                continue
            _, group = known
            slot = group.slots.get(lease.position)
            if slot is not None and slot.token == lease.token:
                del group.slots[lease.position]

    async def release(self, releases: Sequence[Release]) -> None:
        self._ready()
        for item in releases:
            lease = item.lease
            known = self._known(lease)
            if known is None or not lease.token:
                continue
            _, group = known
            slot = group.slots.get(lease.position)
            if slot is None or slot.token != lease.token:
                continue
            slot.visible_at, slot.attempt, slot.retries = (item.visible_at_ms, item.attempt,
                                                           item.retries)
            self._delay(group, lease.position, slot)
            group.wake()

    async def stats(
        self, topic: str, group: str, now_ms: int, *, publish_delays: bool = True
    ) -> TopicStats:
        self._ready()
        state = self._group(index := self._topic(topic), group)
        ready = delayed = leased = 0
        oldest: int | None = None
        next_visible: int | None = None

        def count(pos: int, visible_at: int) -> None:
            nonlocal ready, delayed, oldest, next_visible
            if visible_at <= now_ms:
                ready += 1
                publish_ms = index.messages[pos].publish_ms
                oldest = publish_ms if oldest is None else min(oldest, publish_ms)
            else:
                delayed += 1
                next_visible = visible_at if next_visible is None else min(next_visible, visible_at)

        for pos, slot in state.slots.items():
            if slot.token:
                leased += 1
            else:
                count(pos, slot.visible_at)
        for pos in range(state.cursor, index.next_pos):  # not looked at: due as `fetch` says
            if (message := index.messages.get(pos)) is not None:
                count(pos, message.deliver_at_ms if publish_delays else 0)
        return TopicStats(ready, delayed, leased, oldest, next_visible)

    async def peek(
        self, topic: str, group: str, limit: int, after_position: int = -1
    ) -> list[StoredMessage]:
        self._ready()
        if limit <= 0:
            return []
        index = self._topic(topic)
        state = self._group(index, group)
        seen = sorted(pos for pos in state.slots if pos > after_position)[:limit]
        fresh: list[int] = []
        pos = max(state.cursor, after_position + 1)
        while len(fresh) < limit and pos < index.next_pos:
            if pos in index.messages:
                fresh.append(pos)
            pos += 1
        out: list[StoredMessage] = []
        for pos in sorted(seen + fresh)[:limit]:
            message = index.messages[pos]
            slot = state.slots.get(pos) or Slot(0, message.attempt, message.retries)
            out.append(self._stored(index, state, pos, slot, ""))
        return out

    async def remove(self, leases: Sequence[Lease], *, keep_leased: bool = False) -> int:
        self._ready()
        removed = 0
        for lease in leases:
            index = self._topics.get(lease.topic)
            if index is None:
                continue
            state = self._group(index, lease.group)
            if lease.position >= state.cursor:
                for pos, slot in self._look_at(index, state, lease.position + 1):
                    self._delay(state, pos, slot)
            if (found := state.slots.get(lease.position)) and not (keep_leased and found.token):
                removed += state.slots.pop(lease.position) is found
        return removed

    async def purge(self, topic: str, group: str, *, leased: bool = False) -> int:
        self._ready()
        index = self._topics.get(topic)
        if index is None:
            return 0
        state = self._group(index, group)
        kept = {} if leased else {pos: s for pos, s in state.slots.items() if s.token}
        removed = len(state.slots) - len(kept) + sum(
            1 for pos in range(state.cursor, index.next_pos) if pos in index.messages)
        state.reset(index.next_pos)
        state.slots.update(kept)  # leased slots are in no heap: a release places them again
        return removed

    async def create_group(self, topic: str, group: str, *, at_end: bool = False) -> bool:
        self._ready()
        index = self._topic(topic)
        state = self._group(index, group)
        if not state.placed:
            state.reset(index.next_pos if at_end else min(index.messages, default=index.next_pos))
            return True
        return False

    async def seek(self, topic: str, group: str, *, message_id: str = "",
                   publish_ms: int = -1) -> None:
        self._ready()
        index = self._topic(topic)
        kept = index.messages
        cursor = next((p for p in sorted(kept) if kept[p].message_id == message_id
                       or (not message_id and kept[p].publish_ms >= publish_ms)), None)
        if cursor is None and message_id:
            raise NotFound(f"message {message_id!r} is not in topic {topic!r}")
        self._group(index, group).reset(index.next_pos if cursor is None else cursor)

    async def reset_retries(self, topic: str, group: str) -> int:
        self._ready()
        index = self._topics.get(topic)
        state = None if index is None else index.groups.get(group)
        if state is None:
            return 0
        counted = [slot for slot in state.slots.values() if slot.retries and not slot.token]
        for slot in counted:
            slot.retries = 0
        return len(counted)

    async def last_id(self, topic: str) -> str | None:
        """See `Backend.last_id`: the newest published, even once `trim` forgot it."""
        self._ready()
        index = self._topics.get(topic)
        return index.newest if index is not None and index.newest else None

    async def properties_after(self, topic: str, message_id: str,
                               limit: int) -> list[tuple[str, Mapping[str, str]]]:
        self._ready()
        index = self._topics.get(topic)
        return [] if index is None else index.properties_after(message_id, limit)

    async def topics(self) -> list[str]:
        self._ready()
        return sorted(name for name, index in self._topics.items() if index.published)

    async def drop_group(self, topic: str, group: str) -> bool:
        self._ready()
        index = self._topics.get(topic)
        state = None if index is None else index.groups.pop(group, None)
        if state is None:
            return False
        state.slots.clear()
        state.wake()
        return True

    def trim(self) -> int:
        """Forget the messages every group of their topic has acked; return how many. Topics
        nobody consumes keep everything (a group created later starts at the earliest kept)."""
        forgotten = 0
        for index in self._topics.values():
            groups = list(index.groups.values())
            if not groups:
                continue
            below = min(group.cursor for group in groups)
            for pos in [pos for pos in index.messages if pos < below]:
                if not any(pos in group.slots for group in groups):
                    del index.messages[pos]
                    forgotten += 1
        return forgotten
