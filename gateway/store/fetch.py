"""Fetch: hand out what a group may consume at the caller's `now_ms`, under new leases.

Visible positions the group has seen come from its ready heap first (oldest visible first,
skipping excluded keys), paged in from disk first when they do not all fit in memory
(`gateway.store.paging`); only once that is empty are positions the group has not seen yet
scanned: from the topic's tail in memory when it covers them all (`gateway.store.tail`), else
from SQLite on the reader thread (`reader.scan`). The tail keeps a message delayed when it was
published without its body: one the scan finds due goes to the ready heap, and the same fetch
reads it from SQLite. Scanned positions and the cursor are written without waiting (leases are
not durable).
"""

from __future__ import annotations

import heapq

from gateway.backend.base import Lease, StoredMessage
from gateway.errors import Unavailable
from gateway.store import guard, paging, writes
from gateway.store import reader as rd
from gateway.store.catalog import Catalog, write_scanned
from gateway.store.codec import stored
from gateway.store.index import Entry, GroupIndex, ReadyEntry
from gateway.store.supervisor import Supervisor
from gateway.store.tail import TailCache
from gateway.store.writer import GroupCommitWriter
from gateway.store.writes import UnackedRow

SCAN_CAP = 4096
"""Most not-yet-seen messages one fetch looks at."""
EXAMINE_CAP = 4096
"""Most ready entries one fetch looks at (skipping excluded keys)."""


async def fetch(
    catalog: Catalog,
    supervisor: Supervisor,
    topic: str,
    group: str,
    max_messages: int,
    now_ms: int,
    *,
    exclude_keys: frozenset[str] = frozenset(),
    max_bytes: int | None = None,
    publish_delays: bool = True,
) -> list[StoredMessage]:
    """`Backend.fetch` on the store's index (see the module docstring). `max_bytes` bounds the
    bodies read from SQLite (the tail's are in memory already). Without `publish_delays`,
    positions the group has not seen are taken as due whatever their `deliver_at_ms` (their
    rows say visible at 0)."""
    supervisor.ready()
    if max_messages <= 0:
        return []
    if now_ms >> 63:  # negative or beyond SQLite's INTEGER
        guard.count("now_ms", now_ms)
    index = catalog.topic(topic)
    state = catalog.group(index, group)
    async with state.lock:
        state.dirty = False
        state.seen = index.committed
        state.advance(now_ms)
        if paging.wanted(state, now_ms):
            await paging.page_in(catalog, supervisor, state)
            state.advance(now_ms)
        state.unhold(exclude_keys)
        out, again = await _take(catalog, supervisor, state, max_messages, now_ms, exclude_keys,
                                 max_bytes, publish_delays)
        left = max_bytes
        if again and left is not None:
            left -= sum([len(m.body) for m in out])
        if again and len(out) < max_messages and (left is None or left > 0):
            # The tail's scan put messages due in the ready heap that it keeps without their
            # body (delayed when published): read them now, not in the next fetch.
            more, _ = await _take(
                catalog, supervisor, state, max_messages - len(out), now_ms, exclude_keys, left,
                publish_delays,
            )
            out += more
        return out


async def _take(
    catalog: Catalog,
    supervisor: Supervisor,
    state: GroupIndex,
    max_messages: int,
    now_ms: int,
    exclude_keys: frozenset[str],
    max_bytes: int | None = None,
    publish_delays: bool = True,
) -> tuple[list[StoredMessage], bool]:
    """One pass of `fetch` under the group's lock: the ready heap first, then a scan. True
    with what it hands out when a scan of the tail made messages ready that it could not hand
    out (kept without their body). Ready entries left unread for `max_bytes` go back."""
    writer, reader = supervisor.ready()
    index = state.topic
    generation = catalog.generation
    candidates: list[ReadyEntry] = []
    examined = 0
    while state.ready and len(candidates) < max_messages and examined < EXAMINE_CAP:
        entry = heapq.heappop(state.ready)
        examined += 1
        if entry[2] is not None and entry[2] in exclude_keys:
            state.hold(entry, entry[2])
        else:
            candidates.append(entry)
    # Older visible entries not looked at yet go first: scan only once the heap is empty.
    need = 0 if state.ready else max_messages - len(candidates)
    if not candidates and TailCache.covers(index, state.cursor):
        return _fetch_tail(catalog, writer, state, need, now_ms, exclude_keys, publish_delays)
    args = (
        index.topic_id,
        state.gid,
        [entry[1] for entry in candidates],
        state.cursor,
        index.next_pos,
        need,
        now_ms,
        exclude_keys,
        SCAN_CAP,
        max_bytes,
        publish_delays,
    )
    try:
        scan = await reader.run(lambda conn: rd.scan(conn, *args))
    except BaseException:
        for entry in candidates:
            heapq.heappush(state.ready, entry)
        raise
    if generation != catalog.generation or supervisor.failure is not None:
        # The store failed meanwhile: this index is gone, its leases would be void.
        raise Unavailable("embedded store failed during the fetch")
    out: list[StoredMessage] = []
    again: list[tuple[int, int, int]] = []
    cut = frozenset(scan.cut)
    for entry in candidates:
        visible_at, pos, _ = entry
        if pos in cut:  # not read: over the fetch's max_bytes
            heapq.heappush(state.ready, entry)
            state.dirty = True
            continue
        row = scan.rows.get(pos)
        if row is None:
            continue
        if row.key in exclude_keys:
            state.hold((visible_at, pos, row.key), row.key)
            state.dirty = True
            continue
        out.append(stored(state, row, catalog.lease_token(state, row.pos)))
        again.append((row.attempt + 1, state.gid, pos))
    if again:
        writer.submit_nowait(writes.leased(again))
    if scan.taken or scan.passed:
        rows = state.absorb(scan.passed, now_ms, exclude_keys)
        for meta in scan.taken:
            row = scan.rows[meta.pos]
            out.append(stored(state, row, catalog.lease_token(state, meta.pos)))
            rows.append(  # written as delivered once more: see `writes.leased`
                (state.gid, meta.pos, meta.deliver_at_ms, meta.attempt + 1, meta.retries)
            )
        state.cursor = scan.next_pos
        write_scanned(writer, state, rows)
    if scan.more or state.ready or len(out) >= max_messages:
        state.dirty = True
    return out, False


def _fetch_tail(
    catalog: Catalog,
    writer: GroupCommitWriter,
    state: GroupIndex,
    need: int,
    now_ms: int,
    exclude_keys: frozenset[str],
    publish_delays: bool = True,
) -> tuple[list[StoredMessage], bool]:
    """`fetch` of not yet scanned positions, all of them in the topic's tail (no SQLite
    read): the same choices as `reader.scan` makes over the message rows, except that a
    message due that is kept without its body goes to the ready heap (True: one did)."""
    index = state.topic
    tail = index.tail
    cursor = state.cursor
    end = min(index.committed, cursor + SCAN_CAP)
    out: list[StoredMessage] = []
    passed: list[rd.Meta] = []
    rows: list[UnackedRow] = []
    gid = state.gid
    pos = cursor
    bodiless = False
    while pos < end and len(out) < need:
        entry = tail[pos]
        _, key, _, body, _, _, deliver_at, attempt, retries = entry
        if not publish_delays:
            deliver_at = 0
        if deliver_at > now_ms or key in exclude_keys:
            passed.append(rd.Meta(pos, key, deliver_at, attempt, retries))
        elif body is None:  # due now, delayed when published: `absorb` makes it ready
            if not publish_delays:
                # Due only for this group: it goes out in topic order, read from SQLite with
                # what follows it (by the next take, or the next fetch when some went out).
                if not out:
                    passed.append(rd.Meta(pos, key, deliver_at, attempt, retries))
                    bodiless = True
                    pos += 1
                state.dirty = True
                break
            passed.append(rd.Meta(pos, key, deliver_at, attempt, retries))
            bodiless = True
        else:
            out.append(_lease_entry(catalog, state, pos, entry))
            rows.append((gid, pos, deliver_at, attempt + 1, retries))
        pos += 1
    if pos > cursor:
        rows.extend(state.absorb(passed, now_ms, exclude_keys))
        state.cursor = pos
        write_scanned(writer, state, rows)
    if len(out) >= need or pos - cursor >= SCAN_CAP or state.ready:
        state.dirty = True
    return out, bodiless

def _lease_entry(catalog: Catalog, group: GroupIndex, pos: int, entry: Entry) -> StoredMessage:
    token = catalog.lease_token(group, pos)
    message_id, key, tag, body, properties, publish_ms, deliver_at, attempt, retries = entry
    assert body is not None  # `_fetch_tail` hands out only entries with their body
    return StoredMessage(
        lease=Lease(group.topic.name, group.name, pos, token),
        message_id=message_id,
        topic=group.topic.name,
        body=body,
        properties=properties,
        key=key,
        tag=tag,
        publish_ms=publish_ms,
        deliver_at_ms=deliver_at,
        attempt=attempt,
        retries=retries,
    )
