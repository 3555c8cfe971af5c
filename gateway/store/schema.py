"""SQLite layout of the embedded store and how its connections are opened.

A message row's `id` packs (topic id, position): `topic_id << POS_BITS | pos`, so one topic's
messages are one contiguous rowid range, read in position order without a secondary index.
"""

from __future__ import annotations

import pathlib
import sqlite3

POS_BITS = 40
"""Positions per topic: up to 2**40; topic ids up to 2**22."""
POS_MASK = (1 << POS_BITS) - 1

DB_NAME = "store.sqlite3"

DDL = (
    "CREATE TABLE IF NOT EXISTS topics(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)",
    "CREATE TABLE IF NOT EXISTS messages(id INTEGER PRIMARY KEY, message_id TEXT NOT NULL,"
    " key TEXT NOT NULL, tag TEXT NOT NULL, body BLOB NOT NULL, props TEXT NOT NULL,"
    " publish_ms INTEGER NOT NULL, deliver_at_ms INTEGER NOT NULL, attempt INTEGER NOT NULL,"
    " retries INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS cursors(gid INTEGER PRIMARY KEY, topic_id INTEGER NOT NULL,"
    " grp TEXT NOT NULL, next_pos INTEGER NOT NULL, UNIQUE(topic_id, grp))",
    "CREATE TABLE IF NOT EXISTS unacked(gid INTEGER NOT NULL, pos INTEGER NOT NULL,"
    " visible_at_ms INTEGER NOT NULL, attempt INTEGER NOT NULL, retries INTEGER NOT NULL,"
    " PRIMARY KEY(gid, pos)) WITHOUT ROWID",
    # What `migrate copy` stored here, by the caller's ledger name and the source's message key:
    # written in the transaction that stores the copies, so a copy is never stored twice.
    "CREATE TABLE IF NOT EXISTS copied(ledger TEXT NOT NULL, key TEXT NOT NULL,"
    " PRIMARY KEY(ledger, key)) WITHOUT ROWID",
    # A group's delayed positions by due time, for paging them in (`gateway.store.paging`).
    # Partial: rows of messages without a delivery time (visible_at_ms 0, most of them) pay
    # nothing for it. A store created before it gets it when its writer first starts.
    "CREATE INDEX IF NOT EXISTS unacked_due ON unacked(gid, visible_at_ms)"
    " WHERE visible_at_ms > 0",
)


def topic_base(topic_id: int) -> int:
    """The message rowid of position 0 of a topic."""
    return topic_id << POS_BITS


def connect(data_dir: pathlib.Path, *, fsync: bool) -> sqlite3.Connection:
    """Open the store database in WAL mode; `fsync` selects synchronous=FULL (else OFF)."""
    conn = sqlite3.connect(
        data_dir / DB_NAME, isolation_level=None, timeout=30.0, cached_statements=512
    )
    conn.execute("PRAGMA page_size=8192")  # only takes effect when the file is new
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={'FULL' if fsync else 'OFF'}")
    conn.execute("PRAGMA temp_store=MEMORY")
    conn.execute("PRAGMA cache_size=-16384")
    # Deleted rows are not overwritten with zeros (Debian's SQLite does that by default): a
    # trim would write every acked message's pages once more. Their bytes stay in free pages
    # until reused, as a broker's deleted segment files stay on disk.
    conn.execute("PRAGMA secure_delete=OFF")
    return conn


def create(data_dir: pathlib.Path, *, fsync: bool) -> None:
    """Create the data directory and the tables if they do not exist yet."""
    data_dir.mkdir(parents=True, exist_ok=True)
    conn = connect(data_dir, fsync=fsync)
    try:
        conn.execute("BEGIN IMMEDIATE")
        for statement in DDL:
            conn.execute(statement)
        conn.execute("COMMIT")
    finally:
        conn.close()
