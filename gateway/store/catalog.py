"""Every topic and group of the store's in-memory index, and how it is rebuilt from the tables.

The index of one topic or group is `gateway.store.index`; here are the lookups by name (creating
what is new), the rebuild from what `reader.load` read, and the generation that counts rebuilds.
"""

from __future__ import annotations

import heapq
import uuid

from gateway.errors import InvalidArgument
from gateway.store import guard, writes
from gateway.store.index import GroupIndex, TopicIndex
from gateway.store.reader import Loaded, Reader, scan_meta
from gateway.store.writer import GroupCommitWriter
from gateway.store.writes import UnackedRow
from gateway.timewheel import TimerWheel


class Catalog:
    """Topics by name and groups by id, with the next ids to assign."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicIndex] = {}
        self.groups: dict[int, GroupIndex] = {}
        self._next_topic_id = 1
        self._next_gid = 1
        self.generation = 0
        """Counts rebuilds: a verb that awaited across one must not use what it looked up."""
        self._session = ""
        """Part of every lease token: new with each rebuild, so no token is handed out twice."""
        self._seq = 0

    def topic(self, name: str) -> TopicIndex:
        """The topic `name`, created (in memory only) if new."""
        topic = self.topics.get(name)
        if topic is None:
            if not name:
                raise InvalidArgument("topic", name, "a non-empty topic name")
            guard.text("topic", name)
            topic = TopicIndex(self._next_topic_id, name, 1, 1, False)
            self._next_topic_id += 1
            self.topics[name] = topic
        return topic

    def group(self, topic: TopicIndex, name: str) -> GroupIndex:
        """The group `name` of `topic`, created (in memory only) if new."""
        group = topic.groups.get(name)
        if group is None:
            if not name:
                raise InvalidArgument("group", name, "a non-empty group name")
            guard.text("group", name)
            # The wheel's time is the callers' `now_ms` (fetch, stats): it starts at 0 and moves
            # on their first call, so a caller clock unlike the store's one is still honoured.
            group = GroupIndex(self._next_gid, topic, name, topic.first_pos, TimerWheel(0))
            self._next_gid += 1
            topic.groups[name] = self.groups[group.gid] = group
        return group

    def look(self, topic: str, group: str) -> GroupIndex:
        """The group for a look that changes nothing (stats, peek): the known one, or a new one
        that is not kept when the topic or the group is not known (of a new topic: with no
        message), so that looks at made-up names make no topic and no group. (They made both,
        in memory until a restart: an admin describe of a made-up name kept three of each.)"""
        index = self.topics.get(topic)
        if index is None:
            if not topic:
                raise InvalidArgument("topic", topic, "a non-empty topic name")
            guard.text("topic", topic)
            index = TopicIndex(0, topic, 1, 1, False)
        found = index.groups.get(group)
        if found is not None:
            return found
        if not group:
            raise InvalidArgument("group", group, "a non-empty group name")
        guard.text("group", group)
        return GroupIndex(0, index, group, index.first_pos, TimerWheel(0))

    def known_group(self, topic: str, group: str) -> GroupIndex | None:
        """The group, or None when the topic or the group is not known (nothing is created)."""
        found = self.topics.get(topic)
        return None if found is None else found.groups.get(group)

    def lease_token(self, group: GroupIndex, pos: int) -> str:
        """A new lease token for `pos`, recorded as the group's lease of it."""
        self._seq += 1
        token = f"{self._session}.{self._seq}"
        group.leased[pos] = token
        return token

    def wake_all(self) -> None:
        """Wake every group's waiters (they look again: at a new index, or at a failure)."""
        for group in self.groups.values():
            group.wake()

    def rebuild(self, loaded: Loaded) -> None:
        """Forget everything and load the index from `loaded`: a new generation, whose leases
        are a new session."""
        self.topics.clear()
        self.groups.clear()
        by_id: dict[int, TopicIndex] = {}
        for topic_id, name, first, nxt in loaded.topics:
            by_id[topic_id] = self.topics[name] = TopicIndex(topic_id, name, first, nxt, True)
        self._next_topic_id = max(by_id, default=0) + 1
        for gid, topic_id, grp, next_pos in loaded.groups:
            topic = by_id.get(topic_id)
            if topic is not None:
                group = GroupIndex(gid, topic, grp, next_pos, TimerWheel(0), durable=True)
                topic.groups[grp] = self.groups[gid] = group
            self._next_gid = max(self._next_gid, gid + 1)
        for gid, pos, visible_at in loaded.unacked:
            group_or_none = self.groups.get(gid)
            if group_or_none is None:
                continue
            # Anything with a visible-at time waits in the wheel: the first fetch's `now_ms`
            # (not the store's clock) decides whether it is visible yet.
            if visible_at > 0:
                group_or_none.timers.schedule(visible_at, pos)
            else:
                group_or_none.ready.append((visible_at, pos, None))
        for gid, spill in loaded.spill.items():
            if gid in self.groups:
                self.groups[gid].spill_at = spill
        for group in self.groups.values():
            heapq.heapify(group.ready)
        self._session = uuid.uuid4().hex[:12]
        self.generation += 1


def write_scanned(writer: GroupCommitWriter, group: GroupIndex, rows: list[UnackedRow]) -> None:
    """Persist scanned positions and the group's cursor; not awaited (leases are not durable)."""
    cursor = (group.gid, group.topic.topic_id, group.name, group.cursor)
    group.durable = True
    writer.submit_nowait(writes.scanned(rows, cursor))


async def scan_through(
    writer: GroupCommitWriter, reader: Reader, state: GroupIndex, positions: set[int]
) -> None:
    """Bring the group's index up to the highest of `positions` (not past the topic's end):
    the positions it has not scanned yet are read and written as scanned, so that an admin
    action or a move on those positions finds them in the index."""
    index = state.topic
    top = min(max(positions) + 1, index.next_pos)
    if top <= state.cursor:
        return
    args = (index.topic_id, state.cursor, top, -1)
    metas = await reader.run(lambda conn: scan_meta(conn, *args))
    if metas:
        rows = state.absorb(metas, state.timers.now_ms)
        state.cursor = metas[-1].pos + 1
        write_scanned(writer, state, rows)
