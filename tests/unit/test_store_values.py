"""Defence in depth: the store itself refuses a value it cannot keep (out of SQLite's INTEGER
range, negative where that means nothing, not text where text is kept), with InvalidArgument for
that caller only and before anything is queued, so it never fails a transaction that carries
other callers' writes (issue 16, defect 1: an OverflowError in a group commit disabled the store
for everyone)."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import pytest

from gateway.backend.base import OutMessage, Release
from gateway.errors import InvalidArgument
from gateway.store import EmbeddedStore

T0 = 1_700_000_000_000
INT64_MAX = 2**63 - 1

BAD_MESSAGES: list[tuple[str, dict[str, Any], str]] = [
    ("rocketmq 2**62 s as ms", {"deliver_at_ms": 2**62 * 1000}, "deliver_at_ms"),
    ("deliver_at 2**63", {"deliver_at_ms": 2**63}, "deliver_at_ms"),
    ("negative deliver_at", {"deliver_at_ms": -1}, "deliver_at_ms"),
    ("attempt too large", {"attempt": 2**64}, "attempt"),
    ("negative retries", {"retries": -5}, "retries"),
    ("not an int", {"deliver_at_ms": 1.5e300}, "deliver_at_ms"),
    ("int property key", {"properties": {1: "x"}}, "properties"),
    ("None property value", {"properties": {"k": None}}, "properties"),
    ("None key", {"key": None}, "key"),
    ("surrogate tag", {"tag": "\udcff"}, "tag"),
    ("surrogate key", {"key": "a\ud800"}, "key"),
    ("int message id", {"message_id": 5}, "message_id"),
    # upb gives bytes for a proto2 string that is not UTF-8 (the Pulsar wire is proto2).
    ("bytes key", {"key": b"k"}, "key"),
    ("bytes message id", {"message_id": b"\xff"}, "message_id"),
    ("str body", {"body": "text"}, "body"),
    ("int body", {"body": 2**40}, "body"),
]


@pytest.mark.parametrize(("label", "fields", "field"), BAD_MESSAGES,
                         ids=[b[0] for b in BAD_MESSAGES])
async def test_a_bad_value_fails_only_its_own_publish(
    tmp_path: pathlib.Path, label: str, fields: dict[str, Any], field: str
) -> None:
    store = EmbeddedStore(tmp_path, lambda: T0, fsync=False)
    await store.open()
    try:
        writer = store._supervisor.writer
        assert writer is not None
        # In one turn of the loop: without the store's own check both would share a commit.
        good = asyncio.ensure_future(store.publish("t", [OutMessage(body=b"good")]))
        bad = asyncio.ensure_future(
            store.publish("t", [OutMessage(**{"body": b"bad", **fields})])
        )
        other = asyncio.ensure_future(store.publish("u", [OutMessage(body=b"other")]))
        await asyncio.wait([good, bad, other])
        error = bad.exception()
        assert isinstance(error, InvalidArgument), error
        assert error.field == field
        assert len(error.message) < 400
        good_ids, other_ids = good.result(), other.result()
        assert store.healthy() and store._supervisor.writer is writer
        got = await store.fetch("t", "g", 10, T0)
        assert [m.message_id for m in got] == good_ids
        assert [m.body for m in got] == [b"good"]
        assert [m.message_id for m in await store.fetch("u", "g", 10, T0)] == other_ids
        later = await store.publish("t", [OutMessage(body=b"later")])
        assert [m.message_id for m in await store.fetch("t", "g", 10, T0)] == later
    finally:
        await store.close()


async def test_the_largest_values_sqlite_keeps_are_accepted(tmp_path: pathlib.Path) -> None:
    store = EmbeddedStore(tmp_path, lambda: T0, fsync=False)
    await store.open()
    try:
        edge = OutMessage(body=b"edge", deliver_at_ms=INT64_MAX, attempt=INT64_MAX,
                          retries=INT64_MAX, key="\u00e9\U0001f600", properties={"\u00e9": ""})
        await store.publish("t", [edge])
        await store.publish("t", [OutMessage(body=b"now")])
        got = await store.fetch("t", "g", 10, T0)
        assert [m.body for m in got] == [b"now"]
        stats = await store.stats("t", "g", T0)
        assert stats.delayed == 1
    finally:
        await store.close()


@pytest.mark.parametrize(("release", "field"), [
    ({"visible_at_ms": 2**63}, "visible_at_ms"),
    ({"visible_at_ms": -1}, "visible_at_ms"),
    ({"attempt": -1}, "attempt"),
    ({"retries": 2**70}, "retries"),
])
async def test_a_bad_release_fails_only_its_caller(
    tmp_path: pathlib.Path, release: dict[str, int], field: str
) -> None:
    store = EmbeddedStore(tmp_path, lambda: T0, fsync=False)
    await store.open()
    try:
        await store.publish("t", [OutMessage(body=b"a"), OutMessage(body=b"b")])
        a, b = await store.fetch("t", "g", 2, T0)
        values = {"visible_at_ms": T0, "attempt": 1, "retries": 1, **release}
        bad = asyncio.ensure_future(store.release([Release(a.lease, **values)]))
        good = asyncio.ensure_future(store.release([Release(b.lease, T0, 1, 1)]))
        published = asyncio.ensure_future(store.publish("t", [OutMessage(body=b"c")]))
        await asyncio.wait([bad, good, published])
        error = bad.exception()
        assert isinstance(error, InvalidArgument) and error.field == field
        assert good.exception() is None and published.exception() is None
        assert store.healthy()
        got = await store.fetch("t", "g", 10, T0)
        assert sorted(m.body for m in got) == [b"b", b"c"]
        await store.ack([a.lease])  # the refused release left its lease as it was
    finally:
        await store.close()


@pytest.mark.parametrize(("call", "field"), [
    ("peek_after", "after_position"),
    ("fetch_now", "now_ms"),
    ("stats_now", "now_ms"),
    ("topic_name", "topic"),
    ("group_name", "group"),
])
async def test_other_out_of_range_arguments_are_refused(
    tmp_path: pathlib.Path, call: str, field: str
) -> None:
    store = EmbeddedStore(tmp_path, lambda: T0, fsync=False)
    await store.open()
    try:
        with pytest.raises(InvalidArgument) as refused:
            if call == "peek_after":
                await store.peek("t", "g", 10, after_position=99999999999999999999999)
            elif call == "fetch_now":
                await store.fetch("t", "g", 10, 2**64)
            elif call == "stats_now":
                await store.stats("t", "g", -(2**64))
            elif call == "topic_name":
                await store.publish("bad\udcfftopic", [OutMessage(body=b"x")])
            else:
                await store.fetch("t", "bad\udcffgroup", 10, T0)
        assert refused.value.field == field
        assert store.healthy()
        ids = await store.publish("t", [OutMessage(body=b"fine")])
        assert [m.message_id for m in await store.fetch("t", "g2", 10, T0)] == ids
    finally:
        await store.close()
