"""Concurrent writes share transactions (group commit), and commits come in order."""

from __future__ import annotations

import asyncio
import pathlib

from gateway.backend.base import OutMessage
from gateway.store import EmbeddedStore


async def test_concurrent_publishes_share_transactions(tmp_path: pathlib.Path) -> None:
    store = EmbeddedStore(tmp_path)
    await store.open()
    try:
        before_tx, before_writes = store.transactions, store.writes
        results = await asyncio.gather(
            *(store.publish("t", [OutMessage(body=str(i).encode())]) for i in range(200))
        )
        writes = store.writes - before_writes
        transactions = store.transactions - before_tx
        print(f"group commit: {writes} writes in {transactions} transactions")
        assert writes == 200
        assert 1 <= transactions <= 50, f"{transactions} transactions for 200 publishes"
        ids = [r[0] for r in results]
        got = await store.fetch("t", "g", 500, 2**62)
        assert [m.message_id for m in got] == ids
        assert [m.body for m in got] == [str(i).encode() for i in range(200)]
    finally:
        await store.close()


async def test_sequential_publishes_commit_one_by_one(tmp_path: pathlib.Path) -> None:
    store = EmbeddedStore(tmp_path)
    await store.open()
    try:
        before = store.transactions
        for i in range(5):
            await store.publish("t", [OutMessage(body=str(i).encode())])
        assert store.transactions - before == 5
    finally:
        await store.close()


async def test_writes_nobody_awaits_ride_with_the_next_awaited_one(
    tmp_path: pathlib.Path,
) -> None:
    """Fetches record what they looked at without waiting; those writes join the next awaited
    write's transaction instead of paying a commit each."""
    store = EmbeddedStore(tmp_path)
    await store.open()
    try:
        await store.publish("t", [OutMessage(body=str(i).encode()) for i in range(5)])
        before = store.transactions
        for _ in range(5):
            assert len(await store.fetch("t", "g", 1, 2**62)) == 1
            await asyncio.sleep(0.001)  # each fetch's write goes out on its own
        await store.publish("t", [OutMessage(body=b"awaited")])
        assert store.transactions - before <= 2
    finally:
        await store.close()
