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
