"""The changes the store queues on its writer: each builds a `Write` (a function of the connection).

Only the writer thread runs them, inside its batch transaction. Rows go in multi-row statements
(`INSERT ... VALUES (...), (...)`): the sqlite3 module gives up and retakes the GIL around every
statement step, so one step per chunk instead of one per row keeps the writer from queueing
behind the event loop for the GIL hundreds of times per transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from gateway.store.schema import POS_MASK, topic_base
from gateway.store.writer import Write

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
_LOWEST_UNACKED = "SELECT min(pos) FROM unacked WHERE gid = ?"
_DELETE_MESSAGES = "DELETE FROM messages WHERE id >= ? AND id < ?"
_INSERT_TOPIC = "INSERT OR IGNORE INTO topics(id, name) VALUES(?, ?)"
_INSERT_MESSAGE = "INSERT INTO messages VALUES"
_DELETE_UNACKED = ("DELETE FROM unacked WHERE (gid, pos) IN (VALUES", ")")


def append(topic: tuple[int, str] | None, rows: Sequence[MessageRow]) -> Write:
    """Append message rows (and record the topic first when it is new)."""

    def write(conn: sqlite3.Connection) -> None:
        if topic is not None:
            conn.execute(_INSERT_TOPIC, topic)
        insert_rows(conn, _INSERT_MESSAGE, rows=rows)

    return write


def scanned(rows: Sequence[UnackedRow], cursor: tuple[int, int, str, int]) -> Write:
    """Record positions a group has looked at, and its cursor (gid, topic id, group, next pos)."""

    def write(conn: sqlite3.Connection) -> None:
        insert_rows(conn, _INSERT_UNACKED, rows=rows)
        conn.execute(_UPSERT_CURSOR, cursor)

    return write


def released(rows: Sequence[UnackedRow]) -> Write:
    """Set visible-at time and counters of released positions."""
    return lambda conn: insert_rows(conn, *_UPSERT_UNACKED, rows=rows)


def settled(rows: Sequence[tuple[int, int]]) -> Write:
    """Forget (gid, pos) positions: acked or removed."""
    return lambda conn: insert_rows(conn, *_DELETE_UNACKED, rows=rows)


def purged(topic: tuple[int, str], gid: int, group: str, next_pos: int) -> Write:
    """Forget every scanned position of a group and move its cursor past the topic's end."""

    def write(conn: sqlite3.Connection) -> None:
        conn.execute(_INSERT_TOPIC, topic)
        conn.execute("DELETE FROM unacked WHERE gid = ?", (gid,))
        conn.execute(_UPSERT_CURSOR, (gid, topic[0], group, next_pos))

    return write


def dropped(gid: int) -> Write:
    """Forget a group: its cursor and every position it has scanned."""

    def write(conn: sqlite3.Connection) -> None:
        conn.execute("DELETE FROM unacked WHERE gid = ?", (gid,))
        conn.execute("DELETE FROM cursors WHERE gid = ?", (gid,))

    return write


def trimmed(
    topic_id: int, gids: Sequence[int], first: int, below: int, max_rows: int, out: list[int]
) -> Write:
    """Delete the topic's messages from `first` up to the lowest position any of `gids` may
    still need: `below` (the lowest group cursor) or a lower unacked position. At most
    `max_rows` positions per call; the newest message always stays (on open the topic's next
    position is read from it). Appends the new first retained position to `out`."""

    def write(conn: sqlite3.Connection) -> None:
        base = topic_base(topic_id)
        low = below
        for gid in gids:
            (lowest,) = conn.execute(_LOWEST_UNACKED, (gid,)).fetchone()
            if lowest is not None and lowest < low:
                low = lowest
        (last,) = conn.execute(
            "SELECT max(id) FROM messages WHERE id > ? AND id <= ?", (base, base + POS_MASK)
        ).fetchone()
        stop = first if last is None else min(low, last - base, first + max_rows)
        if stop > first:
            conn.execute(_DELETE_MESSAGES, (base + first, base + stop))
        out.append(stop)

    return write


def barrier(conn: sqlite3.Connection) -> None:
    """A write that writes nothing: awaiting it waits for every write queued before it."""


def insert_rows(
    conn: sqlite3.Connection, head: str, tail: str = "", *, rows: Sequence[tuple[object, ...]]
) -> None:
    """Run `head (?, ..), (?, ..) tail` over `rows` (all of one width), in as few statements
    as the parameter limit allows."""
    if not rows:
        return
    width = len(rows[0])
    per = max(1, MAX_PARAMS // width)
    for start in range(0, len(rows), per):
        chunk = rows[start : start + per]
        conn.execute(_statement(head, tail, width, len(chunk)), [v for row in chunk for v in row])


_SQL: dict[tuple[str, str, int, int], str] = {}


def _statement(head: str, tail: str, width: int, count: int) -> str:
    key = (head, tail, width, count)
    sql = _SQL.get(key)
    if sql is None:
        one = "(" + ",".join("?" * width) + ")"
        sql = f"{head} {','.join([one] * count)}{tail}"
        if len(_SQL) < 4096:
            _SQL[key] = sql
    return sql
