"""The changes the store queues on its writer, as data: `(operation, arguments)`.

The writer process (`gateway.store.writer_proc`) runs them with `apply`, in order, inside its
batch transaction; being plain data, they cross the process boundary as one pickle per batch.
Rows go in multi-row statements (`INSERT ... VALUES (...), (...)`), one statement step per
chunk instead of one per row.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from gateway.store.schema import POS_MASK, topic_base

Write = tuple[str, tuple[Any, ...]]
"""An operation's name in `OPERATIONS` and its arguments (picklable)."""
UnackedRow = tuple[int, int, int, int, int]
"""(gid, pos, visible_at_ms, attempt, retries)."""
MessageRow = tuple[int, str, str, str, bytes, str, int, int, int, int]
"""(id, message_id, key, tag, body, props, publish_ms, deliver_at_ms, attempt, retries)."""

MAX_PARAMS = 30_000
"""Bound parameters per statement (SQLite allows 32766)."""

_INSERT_UNACKED = "INSERT OR IGNORE INTO unacked(gid, pos, visible_at_ms, attempt, retries) VALUES"
_UPSERT_UNACKED = (
    "INSERT INTO unacked(gid, pos, visible_at_ms, attempt, retries) VALUES",
    " ON CONFLICT(gid, pos) DO UPDATE SET visible_at_ms = excluded.visible_at_ms,"
    " attempt = excluded.attempt, retries = excluded.retries",
)
_UPSERT_CURSOR = (
    "INSERT INTO cursors(gid, topic_id, grp, next_pos) VALUES(?, ?, ?, ?)"
    " ON CONFLICT(gid) DO UPDATE SET next_pos = excluded.next_pos"
)
_COUNT_DELIVERY = "UPDATE unacked SET attempt = ? WHERE gid = ? AND pos = ?"
_LOWEST_UNACKED = "SELECT min(pos) FROM unacked WHERE gid = ?"
_DELETE_MESSAGES = "DELETE FROM messages WHERE id >= ? AND id < ?"
_INSERT_TOPIC = "INSERT OR IGNORE INTO topics(id, name) VALUES(?, ?)"
_INSERT_MESSAGE = "INSERT INTO messages VALUES"
_DELETE_UNACKED_OF_GROUP = "DELETE FROM unacked WHERE gid = ? AND pos IN ("


# ------------------------------------------------------------------- the writes, as data
def append(topic: tuple[int, str] | None, rows: Sequence[MessageRow]) -> Write:
    """Append message rows (and record the topic first when it is new)."""
    return ("append", (topic, rows))


def scanned(rows: Sequence[UnackedRow], cursor: tuple[int, int, str, int]) -> Write:
    """Record positions a group has looked at, and its cursor (gid, topic id, group, next pos)."""
    return ("scanned", (rows, cursor))


def released(rows: Sequence[UnackedRow]) -> Write:
    """Set visible-at time and counters of released positions."""
    return ("released", (rows,))


def leased(rows: Sequence[tuple[int, int, int]]) -> Write:
    """Count a delivery of scanned positions, (attempt, gid, pos): the deliveries a position
    had, written when it is leased again, so that one in flight at a crash comes back counted
    (a position settled or forgotten meanwhile is left alone)."""
    return ("leased", (rows,))


def settled(rows: Sequence[tuple[int, int]]) -> Write:
    """Forget (gid, pos) positions: acked or removed."""
    return ("settled", (rows,))


def purged(
    topic: tuple[int, str], gid: int, group: str, next_pos: int, kept: Sequence[int] = ()
) -> Write:
    """Forget every scanned position of a group but those `kept` (leased ones, which a purge
    leaves to their consumers) and move its cursor to `next_pos`. Its result is the number of
    positions forgotten."""
    return ("purged", (topic, gid, group, next_pos, tuple(kept)))


def dropped(gid: int) -> Write:
    """Forget a group: its cursor and every position it has scanned."""
    return ("dropped", (gid,))


def trimmed(topic_id: int, gids: Sequence[int], first: int, below: int, max_rows: int) -> Write:
    """Delete the topic's messages from `first` up to the lowest position any of `gids` may
    still need: `below` (the lowest group cursor) or a lower unacked position. At most
    `max_rows` positions per call; the newest message always stays (on open the topic's next
    position is read from it). Its result is the new first retained position."""
    return ("trimmed", (topic_id, gids, first, below, max_rows))


def statement(sql: str, params: Sequence[object] = ()) -> Write:
    """One SQL statement with its parameters."""
    return ("statement", (sql, params))


def together(parts: Sequence[Write]) -> Write:
    """Several writes that commit together or not at all (they are one write: the writer never
    splits a write across transactions). Its result is the list of the parts' results."""
    return ("together", (tuple(parts),))


def copied(ledger: str, keys: Sequence[str]) -> Write:
    """Record that the copies of these source keys are stored (`migrate copy`'s ledger)."""
    return ("copied", (ledger, tuple(keys)))


BARRIER: Write = ("barrier", ())
"""A write that writes nothing: awaiting it waits for every write queued before it."""


# ------------------------------------------------------------------- applying them
def apply(conn: sqlite3.Connection, write: Write) -> object:
    """Run one write on the writer's connection; return its result (None for most)."""
    operation, args = write
    return OPERATIONS[operation](conn, *args)


def _append(
    conn: sqlite3.Connection, topic: tuple[int, str] | None, rows: Sequence[MessageRow]
) -> None:
    if topic is not None:
        conn.execute(_INSERT_TOPIC, topic)
    insert_rows(conn, _INSERT_MESSAGE, rows=rows)


def _scanned(
    conn: sqlite3.Connection, rows: Sequence[UnackedRow], cursor: tuple[int, int, str, int]
) -> None:
    insert_rows(conn, _INSERT_UNACKED, rows=rows)
    conn.execute(_UPSERT_CURSOR, cursor)


def _released(conn: sqlite3.Connection, rows: Sequence[UnackedRow]) -> None:
    insert_rows(conn, *_UPSERT_UNACKED, rows=rows)


def _leased(conn: sqlite3.Connection, rows: Sequence[tuple[int, int, int]]) -> None:
    conn.executemany(_COUNT_DELIVERY, rows)


def _settled(conn: sqlite3.Connection, rows: Sequence[tuple[int, int]]) -> None:
    by_group: dict[int, list[int]] = {}
    for gid, pos in rows:
        by_group.setdefault(gid, []).append(pos)
    for gid, positions in by_group.items():
        delete_positions(conn, gid, positions)


def delete_positions(conn: sqlite3.Connection, gid: int, positions: Sequence[int]) -> None:
    """Delete the group's unacked rows of `positions`: `gid = ? AND pos IN (...)`, which SQLite
    answers from the primary key. (The row-value form `(gid, pos) IN (VALUES ...)` scanned the
    whole table for every statement: a cost per ack that grew with every pending retry.)"""
    start = 0
    left = len(positions)
    for size in CHUNK_SIZES:
        if left < size:
            continue
        sql = _sql(_DELETE_UNACKED_OF_GROUP, ")", 1, size)
        while left >= size:
            conn.execute(sql, [gid, *positions[start : start + size]])
            start += size
            left -= size


def _purged(
    conn: sqlite3.Connection, topic: tuple[int, str], gid: int, group: str, next_pos: int,
    kept: Sequence[int] = (),
) -> int:
    conn.execute(_INSERT_TOPIC, topic)
    if kept:
        keep = set(kept)
        gone = [pos for (pos,) in conn.execute("SELECT pos FROM unacked WHERE gid = ?", (gid,))
                if pos not in keep]
        delete_positions(conn, gid, gone)
        forgotten = len(gone)
    else:
        forgotten = conn.execute("DELETE FROM unacked WHERE gid = ?", (gid,)).rowcount
    conn.execute(_UPSERT_CURSOR, (gid, topic[0], group, next_pos))
    return forgotten


def _dropped(conn: sqlite3.Connection, gid: int) -> None:
    conn.execute("DELETE FROM unacked WHERE gid = ?", (gid,))
    conn.execute("DELETE FROM cursors WHERE gid = ?", (gid,))


def _trimmed(
    conn: sqlite3.Connection, topic_id: int, gids: Sequence[int], first: int, below: int,
    max_rows: int,
) -> int:
    base = topic_base(topic_id)
    low = below
    for gid in gids:
        (lowest,) = conn.execute(_LOWEST_UNACKED, (gid,)).fetchone()
        if lowest is not None and lowest < low:
            low = lowest
    (last,) = conn.execute(
        "SELECT max(id) FROM messages WHERE id > ? AND id <= ?", (base, base + POS_MASK)
    ).fetchone()
    stop: int = first if last is None else min(low, last - base, first + max_rows)
    if stop > first:
        conn.execute(_DELETE_MESSAGES, (base + first, base + stop))
    return stop


def _statement(conn: sqlite3.Connection, sql: str, params: Sequence[object]) -> int:
    """Run one statement; its result is the number of rows it changed."""
    return conn.execute(sql, params).rowcount


def _barrier(conn: sqlite3.Connection) -> None:
    pass


def _together(conn: sqlite3.Connection, parts: Sequence[Write]) -> list[object]:
    return [apply(conn, part) for part in parts]


def _copied(conn: sqlite3.Connection, ledger: str, keys: Sequence[str]) -> None:
    insert_rows(conn, "INSERT OR IGNORE INTO copied(ledger, key) VALUES",
                rows=[(ledger, key) for key in keys])


OPERATIONS: dict[str, Callable[..., object]] = {
    "append": _append,
    "scanned": _scanned,
    "released": _released,
    "leased": _leased,
    "settled": _settled,
    "purged": _purged,
    "dropped": _dropped,
    "trimmed": _trimmed,
    "statement": _statement,
    "barrier": _barrier,
    "together": _together,
    "copied": _copied,
}


def insert_rows(
    conn: sqlite3.Connection, head: str, tail: str = "", *, rows: Sequence[tuple[object, ...]]
) -> None:
    """Run `head (?, ..), (?, ..) tail` over `rows` (all of one width), in few statements.

    A statement holds a power of four of rows (up to the parameter limit), the biggest that
    fits first: so each (head, tail, width) has at most CHUNK_SIZES statements, and SQLite's
    statement cache holds a few dozen compiled statements in all. One statement per distinct
    row count, as before, filled that cache with hundreds of large ones (hundreds of MiB in the
    writer process when batch sizes vary)."""
    if not rows:
        return
    width = len(rows[0])
    per = max(1, MAX_PARAMS // width)
    start = 0
    left = len(rows)
    for size in CHUNK_SIZES:
        if size > per:
            continue
        if left >= size:
            sql = _sql(head, tail, width, size)
            while left >= size:
                chunk = rows[start : start + size]
                conn.execute(sql, [v for row in chunk for v in row])
                start += size
                left -= size


CHUNK_SIZES = (4096, 1024, 256, 64, 16, 4, 1)
"""Rows per multi-row statement (`insert_rows`), biggest first."""

_SQL: dict[tuple[str, str, int, int], str] = {}


def _sql(head: str, tail: str, width: int, count: int) -> str:
    key = (head, tail, width, count)
    sql = _SQL.get(key)
    if sql is None:
        one = "?" if width == 1 else "(" + ",".join("?" * width) + ")"
        sql = _SQL[key] = f"{head} {','.join([one] * count)}{tail}"
    return sql
