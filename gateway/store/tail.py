"""Recently published messages kept in memory, so fetches of fresh messages skip SQLite.

A topic's tail is the run of positions `[tail_first, tail_end)` whose messages are in
`TopicIndex.tail`. Publishes add their messages before the write commits; a position is read from
the tail only once its commit is done (`committed` moves up in commit order, which is position
order: one writer applies writes in submission order). The oldest batches, over all topics, leave
the tail when it holds more than its byte budget, which counts each message's body, key, tag and
properties (a batch larger than the whole budget leaves at once). A fetch reads the tail only
when it covers every committed position from the group's cursor on (`covers`); otherwise it
reads the database. A message delayed when it is published (a retry copy, say) is kept without
its body and properties, which only its key and tag count: a timer brings it back, and that fetch
reads SQLite, so its body would only take the place of messages a consumer reads next.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from types import MappingProxyType

from gateway.store.index import Entry, TopicIndex

ENTRY_OVERHEAD = 460
"""Bytes counted per message on top of the characters of its body, key, tag and properties: its
objects (entry tuple, id, string and bytes headers, dict slot), measured with tracemalloc."""
BODILESS_OVERHEAD = 240
"""The same for a message kept without its body (delayed when published: no id, body or
properties kept), measured the same way (232 bytes)."""
NO_PROPERTIES: Mapping[str, str] = MappingProxyType({})
"""The properties of an entry kept without its body (a message delayed when published)."""
PROPERTY_OVERHEAD = 130
"""Bytes counted per property on top of its characters (two string objects, a dict slot), and
once more for a message that has properties (its dict)."""


class TailCache:
    """The byte budget shared by every topic's tail, spent oldest batch first."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget = budget_bytes
        self.used = 0
        self._batches: deque[tuple[TopicIndex, int, int, int]] = deque()
        """(topic, first position, end position, bytes) in publish order."""

    def add(
        self, topic: TopicIndex, first: int, entries: list[Entry], size: int, bodiless: int = 0
    ) -> None:
        """Keep `entries` as positions `first, first + 1, ...` of `topic`. `size` is what their
        bodies, keys, tags and properties take: the characters of each (properties as their
        JSON text) plus PROPERTY_OVERHEAD per property and per message with properties;
        ENTRY_OVERHEAD per entry is added here (BODILESS_OVERHEAD for the `bodiless` ones kept
        without their body)."""
        if self.budget <= 0 or not entries:
            return
        size += ENTRY_OVERHEAD * (len(entries) - bodiless) + BODILESS_OVERHEAD * bodiless
        tail = topic.tail
        if first != topic.tail_end:
            # Not contiguous with the tail (cannot happen while publishes allocate positions in
            # order): start the tail over here rather than leave a hole in it.
            tail.clear()
            topic.tail_first = first
        for offset, entry in enumerate(entries):
            tail[first + offset] = entry
        topic.tail_end = end = first + len(entries)
        self._batches.append((topic, first, end, size))
        self.used += size
        while self.used > self.budget and self._batches:
            old, lo, hi, bytes_ = self._batches.popleft()
            self.used -= bytes_
            for pos in range(lo, hi):
                old.tail.pop(pos, None)
            if old.tail_first < hi:
                old.tail_first = hi

    @staticmethod
    def committed(topic: TopicIndex, end: int) -> None:
        """Positions below `end` of `topic` are durable."""
        if end > topic.committed:
            topic.committed = end

    @staticmethod
    def covers(topic: TopicIndex, cursor: int) -> bool:
        """Whether every committed position of `topic` from `cursor` on is in its tail."""
        return topic.tail_first <= cursor and topic.tail_end >= topic.committed

    def clear(self) -> None:
        """Forget every tail (the store closes)."""
        for topic, _, _, _ in self._batches:
            topic.tail.clear()
        self._batches.clear()
        self.used = 0
