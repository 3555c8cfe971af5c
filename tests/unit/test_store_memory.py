"""The in-memory index stays small: bodies stay on disk, a delayed message costs < 200 bytes."""

from __future__ import annotations

import gc
import pathlib
import tracemalloc

from gateway.backend.base import OutMessage
from gateway.store import EmbeddedStore
from gateway.store.fetch import SCAN_CAP

T0 = 1_700_000_000_000
COUNT = 20_000


async def test_pending_delayed_messages_cost_under_200_bytes_each(tmp_path: pathlib.Path) -> None:
    store = EmbeddedStore(tmp_path, lambda: T0, fsync=False)
    await store.open()
    try:
        for start in range(0, COUNT, 1000):
            batch = [
                OutMessage(body=b"b" * 1024, key=f"k{i}", deliver_at_ms=T0 + 3_600_000 + i)
                for i in range(start, start + 1000)
            ]
            await store.publish("delayed", batch)
        await store.fetch("other", "g", 1, T0)
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for _ in range(COUNT // SCAN_CAP + 2):
                assert await store.fetch("delayed", "g", 100, T0) == []
            gc.collect()
            used = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        stats = await store.stats("delayed", "g", T0)
        assert stats.delayed == COUNT
        per_message = used / COUNT
        print(f"index memory: {per_message:.0f} bytes per delayed message")
        assert per_message < 200, f"{per_message:.0f} bytes per delayed message"
        (first,) = await store.fetch("delayed", "g", 1, T0 + 3_600_000)
        assert first.key == "k0"
    finally:
        await store.close()
