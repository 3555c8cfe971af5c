"""A failed commit fails its callers with Unavailable and marks the store unhealthy."""

from __future__ import annotations

import pathlib

import pytest

from gateway.backend.base import OutMessage
from gateway.errors import Unavailable
from gateway.store import EmbeddedStore, writes


async def test_failed_commit_makes_store_unavailable(tmp_path: pathlib.Path) -> None:
    store = EmbeddedStore(tmp_path, fsync=False)
    await store.open()
    try:
        assert store.healthy()
        await store.publish("t", [OutMessage(body=b"kept")])
        writer = store._writer
        assert writer is not None
        with pytest.raises(Unavailable):
            await writer.submit(writes.statement("INSERT INTO no_such_table VALUES (1)"))
        assert not store.healthy()
        with pytest.raises(Unavailable):
            await store.publish("t", [OutMessage(body=b"refused")])
    finally:
        await store.close()

    reopened = EmbeddedStore(tmp_path, fsync=False)
    await reopened.open()
    try:
        assert reopened.healthy()
        got = await reopened.fetch("t", "g", 10, 2**62)
        assert [m.body for m in got] == [b"kept"]
    finally:
        await reopened.close()
