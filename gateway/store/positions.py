"""Where a group of the embedded store starts, and moving it: create a group at the earliest
retained message or after the last one, and seek a group to a message or a publish time.

Both are the purge's write (`writes.purged`: forget the group's scanned positions, set its
cursor), with another cursor: a new group starts there, a sought group forgets every position it
has looked at (leased, waiting or delayed) and reads the topic again from there. Messages below
the topic's first retained position are gone; a group sought before them starts at the first.
And a topic's newest message (`last_id`), where a group created at the end begins after.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping

from gateway.errors import NotFound
from gateway.store import codec, guard, writes
from gateway.store import reader as rd
from gateway.store.catalog import Catalog
from gateway.store.index import GroupIndex, TopicIndex
from gateway.store.schema import POS_MASK, topic_base
from gateway.store.writer import GroupCommitWriter
from gateway.timewheel import TimerWheel


async def create_group(
    catalog: Catalog, writer: GroupCommitWriter, topic: str, group: str, at_end: bool
) -> bool:
    """`Backend.create_group` on the store's index."""
    index = catalog.topic(topic)
    state = catalog.group(index, group)
    async with state.lock:
        if state.durable:
            return False
        cursor = index.next_pos if at_end else index.first_pos
        await _reset(writer, index, state, cursor)
        return True


async def seek(
    catalog: Catalog,
    writer: GroupCommitWriter,
    reader: rd.Reader,
    topic: str,
    group: str,
    *,
    message_id: str = "",
    publish_ms: int = -1,
) -> None:
    """`Backend.seek` on the store's index."""
    index = catalog.topic(topic)
    state = catalog.group(index, group)
    async with state.lock:
        await writer.submit(writes.BARRIER)  # every message published so far is readable
        topic_id, until = index.topic_id, index.next_pos
        if message_id:

            def find(conn: sqlite3.Connection) -> int | None:
                return position_of(conn, topic_id, message_id)

            found = await reader.run(find)
            if found is None:
                raise NotFound(f"message {message_id!r} is not in topic {topic!r}")
            cursor = found
        else:

            def first_at(conn: sqlite3.Connection) -> int:
                return first_published_at(conn, topic_id, publish_ms, until)

            cursor = await reader.run(first_at)
        await _reset(writer, index, state, max(cursor, index.first_pos))


async def _reset(
    writer: GroupCommitWriter, index: TopicIndex, state: GroupIndex, cursor: int
) -> None:
    """Forget what the group has looked at and read on from `cursor`, durably."""
    state.timers = TimerWheel(state.timers.now_ms)
    state.ready.clear()
    state.held.clear()
    state.leased.clear()
    state.releasing.clear()
    state.cursor = cursor
    state.durable = True
    await writer.submit(writes.purged((index.topic_id, index.name), state.gid, state.name, cursor))
    index.persisted = True
    state.wake()


async def last_id(catalog: Catalog, reader: rd.Reader, topic: str) -> str | None:
    """`Backend.last_id` on the store's index: the newest committed message (a trim keeps it),
    read from the table only the first time after an open."""
    index = catalog.topics.get(topic)
    if index is None or index.committed <= index.first_pos:
        return None
    if index.newest is None:
        topic_id, end, generation = index.topic_id, index.committed, catalog.generation

        def newest(conn: sqlite3.Connection) -> tuple[int, str] | None:
            return newest_below(conn, topic_id, end)

        found = await reader.run(newest)
        if found is None:
            return None
        if catalog.generation == generation:
            index.note_newest(found[0], [found[1]])
        return found[1]
    return index.newest[1]


def newest_below(conn: sqlite3.Connection, topic_id: int, end: int) -> tuple[int, str] | None:
    """(position, message id) of the topic's last message below position `end`, if any."""
    base = topic_base(topic_id)
    row = conn.execute(
        "SELECT id, message_id FROM messages WHERE id > ? AND id < ? ORDER BY id DESC LIMIT 1",
        (base, base + end),
    ).fetchone()
    return None if row is None else (int(row[0]) - base, str(row[1]))


def position_of(conn: sqlite3.Connection, topic_id: int, message_id: str) -> int | None:
    """The position of a message of the topic by its id (a scan of the topic's rows)."""
    base = topic_base(topic_id)
    row = conn.execute(
        "SELECT id FROM messages WHERE id > ? AND id <= ? AND message_id = ? LIMIT 1",
        (base, base + POS_MASK, message_id),
    ).fetchone()
    return None if row is None else int(row[0]) - base


def first_published_at(conn: sqlite3.Connection, topic_id: int, publish_ms: int, until: int) -> int:
    """The first position of the topic published at or after `publish_ms` (`until`, the end,
    when none is)."""
    base = topic_base(topic_id)
    row = conn.execute(
        "SELECT min(id) FROM messages WHERE id > ? AND id < ? AND publish_ms >= ?",
        (base, base + until, publish_ms),
    ).fetchone()
    return until if row is None or row[0] is None else int(row[0]) - base


async def properties_after(
    catalog: Catalog, reader: rd.Reader, topic: str, message_id: str, limit: int
) -> list[tuple[str, Mapping[str, str]]]:
    """`Backend.properties_after` on the store's table: the committed messages after the one
    `message_id` names, from the first kept one when it is not kept. The message is looked for
    from the topic's end back (a scan of its rows: the one asked for is usually among the
    last)."""
    index = catalog.topics.get(topic)
    if index is None or limit <= 0:
        return []
    guard.count("limit", limit)
    topic_id, first, end = index.topic_id, index.first_pos, index.committed

    def query(conn: sqlite3.Connection) -> list[tuple[str, Mapping[str, str]]]:
        base = topic_base(topic_id)
        found = conn.execute(
            "SELECT id FROM messages WHERE id > ? AND id < ? AND message_id = ?"
            " ORDER BY id DESC LIMIT 1", (base, base + end, message_id),
        ).fetchone() if message_id else None
        start = max(first, 0 if found is None else int(found[0]) - base + 1)
        rows = conn.execute(
            "SELECT message_id, props FROM messages WHERE id >= ? AND id < ? ORDER BY id LIMIT ?",
            (base + max(start, 1), base + end, limit),
        ).fetchall()
        return [(str(m), codec.props(str(p))) for m, p in rows]

    return await reader.run(query)
