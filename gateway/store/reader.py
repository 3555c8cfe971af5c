"""The read side: one thread with its own connection, and the queries the store runs on it.

Reads never block the event loop and never wait for the writer (WAL readers see the last commit).
"""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from gateway.store.schema import POS_MASK, connect, topic_base

T = TypeVar("T")

_IN_CHUNK = 500
_MAX_RUNS = 8
"""Up to this many runs of consecutive positions are read as ranges, else with IN lists."""


@dataclass(frozen=True, slots=True)
class Row:
    """A full message row with the counters it has for one group."""

    pos: int
    message_id: str
    key: str
    tag: str
    body: bytes
    props: str
    publish_ms: int
    deliver_at_ms: int
    attempt: int
    retries: int


@dataclass(frozen=True, slots=True)
class Meta:
    """What the cursor scan needs to know about a message (no body)."""

    pos: int
    key: str
    deliver_at_ms: int
    attempt: int
    retries: int


@dataclass(frozen=True, slots=True)
class Scan:
    """Result of one fetch read: rows to hand out and scanned rows left visible or delayed."""

    rows: dict[int, Row]
    taken: list[Meta]
    passed: list[Meta]
    next_pos: int
    more: bool
    cut: tuple[int, ...] = ()
    """Candidates left unread: their bodies would have passed the fetch's `max_bytes`."""


@dataclass(frozen=True, slots=True)
class Loaded:
    """Everything the in-memory index is rebuilt from on open."""

    topics: list[tuple[int, str, int, int]]
    """(id, name, first position, next position)."""
    groups: list[tuple[int, int, str, int]]
    """(gid, topic id, group name, next position)."""
    unacked: list[tuple[int, int, int]]
    """(gid, pos, visible_at_ms): every position without a visible-at time, and per group the
    `page` earliest with one."""
    spill: dict[int, tuple[int, int]]
    """gid -> (visible_at_ms, pos) of the first position `unacked` leaves on disk, for the
    groups that have more than `page` positions with a visible-at time."""


@dataclass(frozen=True, slots=True)
class Backlog:
    """Counts over a group's not yet scanned messages."""

    visible: int
    delayed: int
    first_visible_pos: int | None
    next_visible_ms: int | None


class Reader:
    """Runs read queries on a dedicated thread and connection."""

    def __init__(self, data_dir: pathlib.Path) -> None:
        self._local = threading.local()
        self._data_dir = data_dir
        self._pool = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="store-reader", initializer=self._init
        )

    def _init(self) -> None:
        self._local.conn = connect(self._data_dir, fsync=False)

    def _close(self) -> None:
        self._local.conn.close()

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn(connection)` on the reader thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, lambda: fn(self._local.conn))

    async def close(self) -> None:
        """Close the connection and end the thread."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._pool, self._close)
        self._pool.shutdown(wait=True)


def load(conn: sqlite3.Connection, page: int) -> Loaded:
    """Read the durable state the in-memory index is rebuilt from: of each group's positions
    with a visible-at time only the `page` earliest (`gateway.store.paging`)."""
    topics = []
    for topic_id, name in conn.execute("SELECT id, name FROM topics").fetchall():
        base = topic_base(topic_id)
        # Two queries: SQLite answers a lone min() or max() from the rowid b-tree's edge, but
        # scans the whole range for both in one query (a second per million rows).
        (lo,) = conn.execute(
            "SELECT min(id) FROM messages WHERE id > ? AND id <= ?", (base, base + POS_MASK)
        ).fetchone()
        (hi,) = conn.execute(
            "SELECT max(id) FROM messages WHERE id > ? AND id <= ?", (base, base + POS_MASK)
        ).fetchone()
        first = 1 if lo is None else lo - base
        nxt = 1 if hi is None else hi - base + 1
        topics.append((topic_id, name, first, nxt))
    groups = conn.execute("SELECT gid, topic_id, grp, next_pos FROM cursors").fetchall()
    unacked: list[tuple[int, int, int]] = conn.execute(
        "SELECT gid, pos, 0 FROM unacked WHERE visible_at_ms <= 0"
    ).fetchall()
    spill: dict[int, tuple[int, int]] = {}
    for gid, _, _, _ in groups:
        rows = due_page(conn, gid, (1, 0), page + 1)
        if len(rows) > page:
            spill[gid] = rows[page]
            del rows[page:]
        unacked.extend((gid, pos, visible_at) for visible_at, pos in rows)
    return Loaded(topics, groups, unacked, spill)


def due_page(
    conn: sqlite3.Connection, gid: int, start: tuple[int, int], limit: int
) -> list[tuple[int, int]]:
    """(visible_at_ms, pos) of the group's first `limit` positions with a visible-at time, from
    the key `start` = (visible_at_ms, pos) on, in that order (the partial index `unacked_due`)."""
    return conn.execute(
        "SELECT visible_at_ms, pos FROM unacked WHERE gid = ? AND visible_at_ms > 0"
        " AND (visible_at_ms, pos) >= (?, ?) ORDER BY visible_at_ms, pos LIMIT ?",
        (gid, start[0], start[1], limit),
    ).fetchall()


def due_counts(
    conn: sqlite3.Connection, gid: int, start: tuple[int, int], now_ms: int
) -> tuple[int, int, int | None]:
    """Of the group's positions from the key `start` on: how many are visible at `now_ms`, how
    many are not, and the earliest visible-at time of those."""
    visible, delayed, first = conn.execute(
        "SELECT coalesce(sum(visible_at_ms <= ?), 0), coalesce(sum(visible_at_ms > ?), 0),"
        " min(CASE WHEN visible_at_ms > ? THEN visible_at_ms END) FROM unacked"
        " WHERE gid = ? AND visible_at_ms > 0 AND (visible_at_ms, pos) >= (?, ?)",
        (now_ms, now_ms, now_ms, gid, start[0], start[1]),
    ).fetchone()
    return int(visible), int(delayed), first


def due_of(
    conn: sqlite3.Connection, gid: int, positions: Sequence[int]
) -> list[tuple[int, int]]:
    """(visible_at_ms, pos) of those of `positions` (sorted) the group has a row for."""
    select = f"SELECT visible_at_ms, pos FROM unacked WHERE gid = {int(gid)} AND"
    return [(int(v), int(p)) for v, p in _by_ids(conn, select, "pos", positions)]


def load_rows(
    conn: sqlite3.Connection,
    topic_id: int,
    gid: int,
    positions: Iterable[int],
    counted: Iterable[int] = (),
    due: bool = False,
) -> dict[int, Row]:
    """Full rows of `positions`; those in `counted` carry the group's counters (unacked table)
    and, with `due`, the time they are visible again as their `deliver_at_ms` when that is
    later (a message released to come again later: a retry in place)."""
    base = topic_base(topic_id)
    out: dict[int, Row] = {}
    select = (
        "SELECT id, message_id, key, tag, body, props, publish_ms, deliver_at_ms, attempt,"
        " retries FROM messages WHERE"
    )
    ids = sorted(base + pos for pos in positions)
    for rid, mid, key, tag, body, props, pub, dat, att, ret in _by_ids(conn, select, "id", ids):
        out[rid - base] = Row(rid - base, mid, key, tag, body, props, pub, dat, att, ret)
    wanted = sorted(pos for pos in counted if pos in out)
    if wanted:
        select = ("SELECT pos, attempt, retries, visible_at_ms FROM unacked WHERE"
                  f" gid = {int(gid)} AND")
        for pos, attempt, retries, visible_at in _by_ids(conn, select, "pos", wanted):
            row = out[pos]
            later = due and visible_at > row.deliver_at_ms
            out[pos] = dataclasses.replace(
                row, attempt=attempt, retries=retries,
                deliver_at_ms=visible_at if later else row.deliver_at_ms)
    return out


def _by_ids(
    conn: sqlite3.Connection, select: str, column: str, ids: Sequence[int]
) -> Iterator[tuple[Any, ...]]:
    """Rows of `select ... WHERE` for sorted `ids` of `column`: as ranges when few, else IN."""
    runs = _runs(ids)
    if len(runs) <= _MAX_RUNS:
        for lo, hi in runs:
            yield from conn.execute(f"{select} {column} >= ? AND {column} <= ?", (lo, hi))
        return
    for start in range(0, len(ids), _IN_CHUNK):
        chunk = ids[start : start + _IN_CHUNK]
        marks = ",".join("?" * len(chunk))
        yield from conn.execute(f"{select} {column} IN ({marks})", chunk)


def _runs(ids: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted ids as (first, last) runs of consecutive values."""
    runs: list[tuple[int, int]] = []
    for value in ids:
        if runs and runs[-1][1] == value - 1:
            runs[-1] = (runs[-1][0], value)
        else:
            runs.append((value, value))
    return runs


def scan(
    conn: sqlite3.Connection,
    topic_id: int,
    gid: int,
    candidates: Sequence[int],
    cursor: int,
    until: int,
    need: int,
    now_ms: int,
    exclude: frozenset[str],
    scan_cap: int,
    max_bytes: int | None = None,
    publish_delays: bool = True,
) -> Scan:
    """Scan from `cursor` (below `until`) for up to `need` visible messages not in `exclude`.

    Scanned messages that are delayed or excluded are returned in `passed`; `candidates` (already
    scanned positions) are loaded in full together with the taken ones. With `max_bytes`, the
    candidates and then the taken ones are loaded only while their bodies stay within it (the
    one that passes it is the last): the rest of the candidates are `cut`, and the scan ends
    before the first taken one left out (it is scanned again next time). Without
    `publish_delays` every scanned message counts as due (its meta says visible at 0).
    """
    base = topic_base(topic_id)
    taken: list[Meta] = []
    passed: list[Meta] = []
    sizes: list[int] = []
    next_pos = cursor
    more = False
    if need > 0 and cursor < until:
        rows = conn.execute(
            "SELECT id, key, deliver_at_ms, attempt, retries, length(body) FROM messages"
            " WHERE id >= ? AND id < ? ORDER BY id LIMIT ?",
            (base + cursor, base + until, scan_cap),
        )
        seen = 0
        for rid, key, deliver_at, attempt, retries, size in rows:
            seen += 1
            if not publish_delays:
                deliver_at = 0
            meta = Meta(rid - base, key, deliver_at, attempt, retries)
            next_pos = meta.pos + 1
            if deliver_at > now_ms or key in exclude:
                passed.append(meta)
                continue
            taken.append(meta)
            sizes.append(size or 0)
            if len(taken) >= need:
                break
        rows.close()
        more = len(taken) >= need or seen >= scan_cap
    cut: tuple[int, ...] = ()
    if max_bytes is not None and (candidates or taken):
        kept, left = _within(conn, base, candidates, max_bytes)
        cut = tuple(candidates[kept:])
        candidates = candidates[:kept]
        count = _count_within(sizes, left) if left > 0 and not cut else 0
        if count < len(taken):
            next_pos = taken[count].pos
            taken = taken[:count]
            passed = [meta for meta in passed if meta.pos < next_pos]
            more = True
    positions = list(candidates) + [meta.pos for meta in taken]
    full = load_rows(conn, topic_id, gid, positions, candidates) if positions else {}
    return Scan(full, taken, passed, next_pos, more, cut)


def _within(
    conn: sqlite3.Connection, base: int, candidates: Sequence[int], max_bytes: int
) -> tuple[int, int]:
    """How many of `candidates` (in their order) to load within `max_bytes` (`_count_within`),
    and the bytes left after them (0 or less: none)."""
    if not candidates:
        return 0, max_bytes
    found: dict[int, int] = {}
    select = "SELECT id, length(body) FROM messages WHERE"
    for rid, size in _by_ids(conn, select, "id", sorted(base + pos for pos in candidates)):
        found[rid - base] = size or 0
    sizes = [found.get(pos, 0) for pos in candidates]
    count = _count_within(sizes, max_bytes)
    return count, max_bytes - sum(sizes[:count])


def _count_within(sizes: Sequence[int], max_bytes: int) -> int:
    """How many of `sizes` (in order) fit within `max_bytes`, the one that passes it included."""
    left = max_bytes
    for n, size in enumerate(sizes):
        left -= size
        if left <= 0:
            return n + 1
    return len(sizes)


def scan_meta(
    conn: sqlite3.Connection, topic_id: int, cursor: int, until: int, limit: int = -1
) -> list[Meta]:
    """Metadata of messages from `cursor` below `until` (at most `limit`; -1: all)."""
    base = topic_base(topic_id)
    return [
        Meta(rid - base, key, deliver_at, attempt, retries)
        for rid, key, deliver_at, attempt, retries in conn.execute(
            "SELECT id, key, deliver_at_ms, attempt, retries FROM messages"
            " WHERE id >= ? AND id < ? ORDER BY id LIMIT ?",
            (base + cursor, base + until, limit),
        )
    ]


def backlog(
    conn: sqlite3.Connection, topic_id: int, cursor: int, until: int, now_ms: int
) -> Backlog:
    """Counts over messages from `cursor` below `until` (not scanned by the group yet)."""
    base = topic_base(topic_id)
    visible, delayed, first_visible, next_visible = conn.execute(
        "SELECT coalesce(sum(deliver_at_ms <= ?), 0), coalesce(sum(deliver_at_ms > ?), 0),"
        " min(CASE WHEN deliver_at_ms <= ? THEN id END),"
        " min(CASE WHEN deliver_at_ms > ? THEN deliver_at_ms END)"
        " FROM messages WHERE id >= ? AND id < ?",
        (now_ms, now_ms, now_ms, now_ms, base + cursor, base + until),
    ).fetchone()
    first_pos = None if first_visible is None else first_visible - base
    return Backlog(visible, delayed, first_pos, next_visible)


def publish_ms_of(conn: sqlite3.Connection, topic_id: int, pos: int) -> int | None:
    """Publish time of one message."""
    row = conn.execute(
        "SELECT publish_ms FROM messages WHERE id = ?", (topic_base(topic_id) + pos,)
    ).fetchone()
    return None if row is None else int(row[0])


def count_from(conn: sqlite3.Connection, topic_id: int, cursor: int, until: int) -> int:
    """How many messages sit from `cursor` below `until`."""
    base = topic_base(topic_id)
    (count,) = conn.execute(
        "SELECT count(*) FROM messages WHERE id >= ? AND id < ?", (base + cursor, base + until)
    ).fetchone()
    return int(count)


def unacked_page(conn: sqlite3.Connection, gid: int, after: int, limit: int) -> list[int]:
    """Positions the group has scanned and not acked, after `after`, in order."""
    return [
        pos
        for (pos,) in conn.execute(
            "SELECT pos FROM unacked WHERE gid = ? AND pos > ? ORDER BY pos LIMIT ?",
            (gid, after, limit),
        )
    ]


def count_unacked(conn: sqlite3.Connection, gid: int) -> int:
    """How many scanned positions the group has not acked."""
    (count,) = conn.execute("SELECT count(*) FROM unacked WHERE gid = ?", (gid,)).fetchone()
    return int(count)


def copied_keys(conn: sqlite3.Connection, ledger: str, keys: Sequence[str]) -> set[str]:
    """Which of `keys` the ledger records as copied."""
    found: set[str] = set()
    unique = list(dict.fromkeys(keys))
    for start in range(0, len(unique), _IN_CHUNK):
        chunk = unique[start:start + _IN_CHUNK]
        marks = ",".join("?" * len(chunk))
        found.update(key for (key,) in conn.execute(
            f"SELECT key FROM copied WHERE ledger = ? AND key IN ({marks})", (ledger, *chunk)))
    return found
