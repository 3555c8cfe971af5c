"""A failed commit fails its callers with Unavailable and marks the store unhealthy until it
has recovered by itself (issue 16: it used to stay failed until the process restarted)."""

from __future__ import annotations

import asyncio
import pathlib
import time

import pytest

from gateway.backend.base import OutMessage
from gateway.errors import Unavailable
from gateway.store import EmbeddedStore, writes


async def until_healthy(store: EmbeddedStore, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not store.healthy() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return store.healthy()


async def test_failed_commit_makes_store_unavailable_until_it_recovers(
    tmp_path: pathlib.Path,
) -> None:
    store = EmbeddedStore(tmp_path, fsync=False)
    await store.open()
    try:
        assert store.healthy()
        await store.publish("t", [OutMessage(body=b"kept")])
        writer = store._supervisor.writer
        assert writer is not None
        with pytest.raises(Unavailable):
            await writer.submit(writes.statement("INSERT INTO no_such_table VALUES (1)"))
        assert not store.healthy()
        with pytest.raises(Unavailable):
            await store.publish("t", [OutMessage(body=b"refused")])
        assert await until_healthy(store)
        await store.publish("t", [OutMessage(body=b"healed")])
    finally:
        await store.close()

    reopened = EmbeddedStore(tmp_path, fsync=False)
    await reopened.open()
    try:
        assert reopened.healthy()
        got = await reopened.fetch("t", "g", 10, 2**62)
        assert [m.body for m in got] == [b"kept", b"healed"]
    finally:
        await reopened.close()
