"""Looks at a group (`stats`, `peek`: what admin describe, retries and dead-letter listings
read) make no topic and no group in the embedded store: made-up names cannot grow its memory.
(Each look kept a topic and a group, in memory until a restart: 3,000 admin describes of
made-up names took 30 MB.) A look at a new group of a known topic still sees what that group
would get."""

from __future__ import annotations

import pathlib

import pytest

from gateway.backend.base import OutMessage
from gateway.errors import InvalidArgument
from gateway.store import EmbeddedStore

T0 = 1_700_000_000_000


async def test_looks_at_made_up_names_make_nothing(tmp_path: pathlib.Path) -> None:
    store = EmbeddedStore(tmp_path, lambda: T0, fsync=False)
    await store.open()
    try:
        await store.publish("real", [OutMessage(b"a"), OutMessage(b"b")])
        catalog = store._catalog
        before = (set(catalog.topics), set(catalog.groups), set(catalog.topics["real"].groups))
        for i in range(20):
            made_up = await store.stats(f"made-up-{i}", f"g{i}", T0)
            assert (made_up.ready, made_up.delayed, made_up.leased) == (0, 0, 0)
            assert await store.peek(f"made-up-{i}", f"g{i}", 10) == []
            fresh = await store.stats("real", f"g{i}", T0)
            assert (fresh.ready, fresh.leased) == (2, 0)
            assert [m.body for m in await store.peek("real", f"g{i}", 10)] == [b"a", b"b"]
        after = (set(catalog.topics), set(catalog.groups), set(catalog.topics["real"].groups))
        assert after == before
        with pytest.raises(InvalidArgument, match="group"):
            await store.stats("real", "", T0)
        # A group that consumes is the one looked at from then on.
        (taken,) = await store.fetch("real", "g0", 1, T0)
        view = await store.stats("real", "g0", T0)
        assert (view.ready, view.leased) == (1, 1)
        assert taken.body == b"a"
    finally:
        await store.close()


async def test_a_look_at_a_made_up_group_does_not_hold_the_topic_back(
    tmp_path: pathlib.Path,
) -> None:
    """The group a look made sat at the topic's first message, so the topic kept every message
    (trim deleted nothing) until a restart."""
    store = EmbeddedStore(tmp_path, lambda: T0, fsync=False, trim_interval_s=0)
    await store.open()
    try:
        await store.fetch("t", "a", 1, T0)
        await store.publish("t", [OutMessage(b"m%d" % i) for i in range(5)])
        got = await store.fetch("t", "a", 10, T0)
        await store.stats("t", "looked-at", T0)
        await store.peek("t", "peeked-at", 10)
        await store.ack([m.lease for m in got])
        assert await store.trim() == 4  # the newest message always stays
    finally:
        await store.close()
