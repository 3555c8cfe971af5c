"""The embedded store names the groups whose position it keeps (`Backend.groups`), also after a
restart, and not those only looked at: `migrate copy` tells a group that consumed before a
restart from a misspelt one (which a look must not make known)."""

from __future__ import annotations

import pathlib

from gateway.backend.base import OutMessage
from gateway.store import EmbeddedStore

T0 = 1_700_000_000_000


async def _open(path: pathlib.Path) -> EmbeddedStore:
    store = EmbeddedStore(path, lambda: T0, fsync=False, trim_interval_s=0)
    await store.open()
    return store


async def test_groups_with_a_kept_position_are_named_after_a_restart(
    tmp_path: pathlib.Path,
) -> None:
    store = await _open(tmp_path)
    try:
        await store.publish("orders", [OutMessage(body=b"m0"), OutMessage(body=b"m1")])
        got = await store.fetch("orders", "billing", 1, T0)
        await store.ack([m.lease for m in got])
        await store.create_group("audit", "ops")
        # Looks at made-up names: no group kept.
        await store.stats("orders", "biling", T0)
        await store.peek("orders", "biling", 10)
        assert await store.groups() == [("audit", "ops"), ("orders", "billing")]
    finally:
        await store.close()
    store = await _open(tmp_path)
    try:
        assert await store.groups() == [("audit", "ops"), ("orders", "billing")]
        await store.peek("orders", "biling", 10)
        assert ("orders", "biling") not in await store.groups()
    finally:
        await store.close()
