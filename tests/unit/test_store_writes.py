"""Multi-row statements come in a few fixed sizes: every row is written, and the writer's
statement cache stays small whatever the batch sizes."""

from __future__ import annotations

import pathlib
import random

from gateway.store import schema, writes


def test_every_row_in_a_few_statement_sizes(tmp_path: pathlib.Path) -> None:
    schema.create(tmp_path, fsync=False)
    conn = schema.connect(tmp_path, fsync=False)
    rng = random.Random(5)
    writes._SQL.clear()
    pos = 0
    try:
        for _ in range(300):
            count = rng.randrange(1, 9000)
            rows = [(1, pos + i, pos + i, 0, 0) for i in range(count)]
            writes.insert_rows(conn, writes._INSERT_UNACKED, rows=rows)
            pos += count
        (stored,) = conn.execute("SELECT count(*) FROM unacked").fetchone()
        assert stored == pos
        (last,) = conn.execute("SELECT max(pos) FROM unacked").fetchone()
        assert last == pos - 1
        sizes = {key[3] for key in writes._SQL}
        assert sizes <= set(writes.CHUNK_SIZES)
        assert len(writes._SQL) <= len(writes.CHUNK_SIZES)
    finally:
        conn.close()


def test_settled_deletes_exactly_those_rows_through_the_primary_key(
    tmp_path: pathlib.Path,
) -> None:
    """An ack's delete is a primary-key search: its cost does not grow with the rows other
    groups (pending retries) keep in the table."""
    schema.create(tmp_path, fsync=False)
    conn = schema.connect(tmp_path, fsync=False)
    try:
        writes.insert_rows(conn, writes._INSERT_UNACKED,
                           rows=[(gid, pos, 7, 0, 0) for gid in (1, 2, 3) for pos in range(500)])
        gone = [(1, pos) for pos in range(0, 500, 2)] + [(3, pos) for pos in range(100, 401)]
        writes.apply(conn, writes.settled(gone))
        left = set(conn.execute("SELECT gid, pos FROM unacked").fetchall())
        expected = {(gid, pos) for gid in (1, 2, 3) for pos in range(500)} - set(gone)
        assert left == expected
        sql = writes._sql(writes._DELETE_UNACKED_OF_GROUP, ")", 1, 4)
        plan = conn.execute(f"EXPLAIN QUERY PLAN {sql}", [1, 2, 3, 4, 5]).fetchall()
        assert all("SCAN" not in step[3] for step in plan), plan
        assert any("PRIMARY KEY" in step[3] for step in plan), plan
    finally:
        conn.close()
