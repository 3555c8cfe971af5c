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
