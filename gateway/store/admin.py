"""The embedded store's admin verbs: stats, peek, remove, purge, drop_group, and trim.

None of them is on the hot path. Each takes the store's index (`Catalog`) and the writer and
reader it gets from the store once the store is serving (`Supervisor.ready`).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence

from gateway.backend.base import Lease, StoredMessage, TopicStats
from gateway.store import guard, paging, writes
from gateway.store import reader as rd
from gateway.store.catalog import Catalog, scan_through
from gateway.store.codec import stored
from gateway.store.index import GroupIndex, TopicIndex
from gateway.store.supervisor import Supervisor
from gateway.store.writer import GroupCommitWriter
from gateway.timewheel import TimerWheel

TRIM_ROWS = 50_000
"""Most message rows one topic's trim deletes in one transaction."""
TRIM_BATCH = 16
"""Topics whose trims are submitted together (and so share a transaction)."""
MAX_MS = 2**63 - 1
"""A time every `deliver_at_ms` is at or before (SQLite's largest integer)."""


async def stats(
    catalog: Catalog, supervisor: Supervisor, topic: str, group: str, now_ms: int,
    *, publish_delays: bool = True,
) -> TopicStats:
    """See `Backend.stats`."""
    supervisor.ready()
    guard.count("now_ms", now_ms)
    # Positions the group has not scanned yet are all due for a group that skips publish
    # delays (`fetch` hands them out at once); scanned ones keep the time the scan gave them.
    due_by = now_ms if publish_delays else MAX_MS
    state = catalog.look(topic, group)
    index = state.topic
    async with state.lock:
        state.advance(now_ms)
        cursor, until, topic_id = state.cursor, index.next_pos, index.topic_id
        visible = state.visible()
        first_ready = min((entry[1] for entry in visible), default=None)

        def query(conn: sqlite3.Connection) -> tuple[rd.Backlog, int | None]:
            backlog = rd.backlog(conn, topic_id, cursor, until, due_by)
            firsts = [p for p in (first_ready, backlog.first_visible_pos) if p is not None]
            oldest = rd.publish_ms_of(conn, topic_id, min(firsts)) if firsts else None
            return backlog, oldest

        _, reader = supervisor.ready()
        backlog, oldest = await reader.run(query)
        disk_visible, disk_delayed, disk_next = await paging.counts(supervisor, state, now_ms)
        next_times = []
        next_timer = state.timers.next_deadline_ms()
        for time_ms in (next_timer, backlog.next_visible_ms, disk_next):
            if time_ms is not None:
                next_times.append(time_ms)
        return TopicStats(
            ready=len(visible) + backlog.visible + disk_visible,
            delayed=len(state.timers) + backlog.delayed + disk_delayed,
            leased=len(state.leased) + len(state.releasing),
            oldest_ready_ms=oldest,
            next_visible_ms=min(next_times, default=None),
        )


async def peek(
    catalog: Catalog,
    writer: GroupCommitWriter,
    reader: rd.Reader,
    topic: str,
    group: str,
    limit: int,
    after_position: int,
) -> list[StoredMessage]:
    guard.position("after_position", after_position)
    if limit <= 0:
        return []
    guard.count("limit", limit)
    state = catalog.look(topic, group)
    index = state.topic
    async with state.lock:
        await writer.submit(writes.BARRIER)
        start = max(state.cursor, after_position + 1)
        until, topic_id, gid = index.next_pos, index.topic_id, state.gid

        def query(conn: sqlite3.Connection) -> dict[int, rd.Row]:
            seen = rd.unacked_page(conn, gid, after_position, limit)
            fresh = [m.pos for m in rd.scan_meta(conn, topic_id, start, until, limit)]
            chosen = sorted(set(seen) | set(fresh))[:limit]
            return rd.load_rows(conn, topic_id, gid, chosen, seen, due=True)

        rows = await reader.run(query)
    return [stored(state, rows[pos], "") for pos in sorted(rows)]


async def remove(
    catalog: Catalog, supervisor: Supervisor, leases: Sequence[Lease], keep_leased: bool = False
) -> int:
    """`Backend.remove`; with `keep_leased`, positions handed out (leased, or being released)
    are left alone."""
    wanted: dict[tuple[str, str], set[int]] = {}
    for lease in leases:
        wanted.setdefault((lease.topic, lease.group), set()).add(lease.position)
    removed = 0
    for (topic, group), positions in wanted.items():
        index = catalog.topics.get(topic)
        if index is None:
            continue
        state = catalog.group(index, group)
        async with state.lock:
            if keep_leased:
                positions -= {*state.leased, *state.releasing}
            if positions:
                removed += await _remove(supervisor, state, positions)
    return removed


async def _remove(supervisor: Supervisor, state: GroupIndex, positions: set[int]) -> int:
    writer, reader = supervisor.ready()
    index = state.topic
    await scan_through(writer, reader, state, positions)
    gone: set[int] = set()
    for pos in positions:
        handed_out = state.leased.pop(pos, "") or state.releasing.pop(pos, "")
        if handed_out or state.timers.cancel(pos):
            gone.add(pos)
    gone |= state.drop_visible(positions - gone)
    gone |= await paging.on_disk(supervisor, state, positions - gone)
    writer, _ = supervisor.ready()
    if not gone:
        return 0
    deletes = [(state.gid, pos) for pos in gone]
    index.settled += 1
    await writer.submit(writes.settled(deletes))
    return len(gone)


async def purge(
    catalog: Catalog,
    writer: GroupCommitWriter,
    reader: rd.Reader,
    topic: str,
    group: str,
    *,
    leased: bool = False,
) -> int:
    """`Backend.purge`: one write forgets the group's positions but the leased ones (or every
    one, with `leased`) and moves its cursor to the topic's end. A position being released
    stays too: its release is written (before or after the purge) and places it again."""
    index = catalog.topics.get(topic)
    if index is None:
        return 0
    state = catalog.group(index, group)
    async with state.lock:
        until, cursor, topic_id = index.next_pos, state.cursor, index.topic_id
        await writer.submit(writes.BARRIER)
        gid = state.gid

        def count(conn: sqlite3.Connection) -> int:
            return rd.count_from(conn, topic_id, cursor, until)

        unscanned = await reader.run(count)
        if leased:
            state.leased.clear()
            state.releasing.clear()
        kept = sorted({*state.leased, *state.releasing})
        state.timers = TimerWheel(state.timers.now_ms)
        state.spill_at = None
        state.ready.clear()
        state.held.clear()
        state.cursor = until
        state.durable = True
        index.settled += 1
        forgotten = await writer.submit(
            writes.purged((topic_id, index.name), gid, state.name, until, kept))
        state.wake()
        return unscanned + (forgotten if isinstance(forgotten, int) else 0)


async def drop_group(catalog: Catalog, writer: GroupCommitWriter, topic: str, group: str) -> bool:
    state = catalog.known_group(topic, group)
    if state is None:
        return False
    generation = catalog.generation
    async with state.lock:
        index = state.topic
        if index.groups.get(group) is not state or generation != catalog.generation:
            return False
        del index.groups[group]
        index.settled += 1
        catalog.groups.pop(state.gid, None)
        state.leased.clear()
        state.releasing.clear()
        state.wake()
        await writer.submit(writes.dropped(state.gid))
    return True


async def reset_retries(
    catalog: Catalog, writer: GroupCommitWriter, topic: str, group: str
) -> int:
    """`Backend.reset_retries`: the group's counters live in its unacked rows only (a fetch
    reads them there), so one statement resets them. The rows of leased messages are reset
    too: settling one writes its counters anew (or deletes the row), and one left leased at a
    crash comes back counted from 0, as the product's own count does after a restart."""
    state = catalog.known_group(topic, group)
    if state is None:
        return 0
    changed = await writer.submit(writes.statement(
        "UPDATE unacked SET retries = 0 WHERE gid = ? AND retries > 0", (state.gid,)))
    return changed if isinstance(changed, int) else 0


async def trim(catalog: Catalog, writer: GroupCommitWriter) -> int:
    """Delete the messages of every topic that all of its groups have acked; return how many
    positions were deleted. Topics nobody consumes keep everything (a group created later starts
    at the earliest message still kept).

    A topic is looked at only when something may be deleted: the newest message always stays,
    and one whose last try deleted nothing is tried again only once its groups moved on, it got
    new messages, or one of its positions was settled (`TopicIndex.settled`). The tries go to the
    writer TRIM_BATCH topics at a time, in one transaction: one at a time, 10,000 topics made
    10,000 transactions every TRIM_INTERVAL_S."""
    todo: list[tuple[TopicIndex, tuple[int, int, int, int], list[int], int]] = []
    for index in list(catalog.topics.values()):
        if not index.groups or not index.persisted:
            continue
        below = min(group.cursor for group in index.groups.values())
        first = index.first_pos
        if min(below, index.next_pos - 1) <= first:
            continue
        key = (below, index.next_pos, index.settled, len(index.groups))
        if index.trim_idle == key:
            continue
        todo.append((index, key, [group.gid for group in index.groups.values()], below))
    deleted = 0
    for start in range(0, len(todo), TRIM_BATCH):
        chunk = todo[start : start + TRIM_BATCH]
        stops = await asyncio.gather(*(
            writer.submit(writes.trimmed(index.topic_id, gids, index.first_pos, below, TRIM_ROWS))
            for index, _, gids, below in chunk
        ))
        for (index, key, _, _), stop in zip(chunk, stops, strict=True):
            if isinstance(stop, int) and stop > index.first_pos:
                deleted += stop - index.first_pos
                index.first_pos = stop
                index.trim_idle = None
            else:
                index.trim_idle = key
    return deleted
