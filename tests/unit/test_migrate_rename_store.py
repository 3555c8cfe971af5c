"""`migrate rename` and `migrate copy` below the API: which names move and how copies look
(`gateway.migrate.rename`), the embedded store's one-transaction move and its copy ledger
(`Backend.move`, `Backend.store_once`), and the base class's copy-then-remove."""

from __future__ import annotations

import pathlib
import sqlite3

import pytest

from adapters.amqp.naming import RABBITMQ
from adapters.pulsar.naming import PULSAR_2_7, PULSAR_2_9
from adapters.rocketmq.naming import ROCKETMQ
from gateway.backend.base import KeyedCopy, Lease, Move, OutMessage, Release, StoredMessage
from gateway.backend.memory import InMemoryBackend
from gateway.core.properties import ORIGIN_GROUP, ORIGIN_TOPIC
from gateway.errors import FailedPrecondition, InvalidArgument
from gateway.migrate import rename as rn
from gateway.store import EmbeddedStore, schema, writes

T0 = 1_700_000_000_000
TOPIC = "persistent://t/ns/orders"


def stored(topic: str, props: dict[str, str], position: int = 1) -> StoredMessage:
    return StoredMessage(Lease(topic, "sub", position), "id1", topic, b"b", props, "k", "tag",
                         T0, T0 + 5000, 3, 2)


def test_parts_of_pulsar_27_to_29() -> None:
    parts = rn.parts(TOPIC, "sub", PULSAR_2_7, PULSAR_2_9)
    assert [(p.part, p.old, p.new, p.topic_specific) for p in parts] == [
        (rn.RETRIES, "persistent://t/ns/sub-RETRY", "persistent://t/ns/orders-sub-RETRY", False),
        (rn.DEAD_LETTERS, "persistent://t/ns/sub-DLQ", "persistent://t/ns/orders-sub-DLQ",
         False),
    ]
    assert rn.parts(TOPIC, "sub", PULSAR_2_9, PULSAR_2_9) == []
    back = rn.parts("orders", "g", PULSAR_2_9, ROCKETMQ)
    assert [(p.old, p.new, p.topic_specific) for p in back] == [
        ("orders-g-RETRY", "%RETRY%g", True), ("orders-g-DLQ", "%DLQ%g", True)]


def test_a_shared_name_moves_only_the_topics_copies() -> None:
    part = rn.parts(TOPIC, "sub", PULSAR_2_7, PULSAR_2_9)[0]
    assert rn.belongs(stored(part.old, {ORIGIN_TOPIC: TOPIC}), TOPIC, "sub", part)
    assert not rn.belongs(stored(part.old, {ORIGIN_TOPIC: "other"}), TOPIC, "sub", part)
    assert not rn.belongs(stored(part.old, {}), TOPIC, "sub", part)  # whose? not ours to move
    specific = rn.parts("orders", "g", PULSAR_2_9, ROCKETMQ)[0]
    assert rn.belongs(stored(specific.old, {}), "orders", "g", specific)


def test_a_name_shared_by_groups_moves_only_the_groups_copies() -> None:
    """`{topic}.dlq` holds every group's dead letters of the topic: each records its group."""
    part = rn.parts("orders", "g", RABBITMQ, PULSAR_2_9)[1]
    assert part.old == "orders.dlq"
    assert rn.belongs(stored(part.old, {ORIGIN_GROUP: "g"}), "orders", "g", part)
    assert not rn.belongs(stored(part.old, {ORIGIN_GROUP: "h"}), "orders", "g", part)
    assert rn.belongs(stored(part.old, {}), "orders", "g", part)  # before groups were recorded


def test_a_copy_keeps_everything_and_renames_old_names() -> None:
    names = {"persistent://t/ns/sub-RETRY": "persistent://t/ns/orders-sub-RETRY"}
    m = stored("persistent://t/ns/sub-RETRY", {
        "RETRY_TOPIC": "persistent://t/ns/sub-RETRY", "REAL_TOPIC": TOPIC, "n": "1"})
    copy = rn.copy_of(m, names, TOPIC, "sub")
    assert copy == OutMessage(b"b", {"RETRY_TOPIC": "persistent://t/ns/orders-sub-RETRY",
                                     "REAL_TOPIC": TOPIC, "n": "1", ORIGIN_TOPIC: TOPIC,
                                     ORIGIN_GROUP: "sub"}, "k", "tag", T0 + 5000,
                              "id1", 3, 2)


async def opened(path: pathlib.Path) -> EmbeddedStore:
    store = EmbeddedStore(path, lambda: T0, fsync=False)
    await store.open()
    return store


async def test_the_store_moves_in_one_go_and_keeps_it_across_reopen(
        tmp_path: pathlib.Path) -> None:
    store = await opened(tmp_path)
    try:
        await store.publish("old", [OutMessage(f"m{i}".encode(), {"i": str(i)},
                                               deliver_at_ms=T0 + 1000 * i, message_id=f"id{i}",
                                               attempt=i, retries=i) for i in range(5)])
        leased = await store.fetch("old", "sub", 1, T0)  # m0 is due: it is handed out
        assert [m.message_id for m in leased] == ["id0"]
        page = await store.peek("old", "sub", 10)
        moves = [Move(m.lease, "new", OutMessage(m.body, m.properties, m.key, m.tag,
                                                 m.deliver_at_ms, m.message_id, m.attempt,
                                                 m.retries)) for m in page]
        assert store.atomic_moves
        assert await store.move(moves) == 4  # not the one a consumer holds
        assert [m.message_id for m in await store.peek("old", "sub", 10)] == ["id0"]
    finally:
        await store.close()
    store = await opened(tmp_path)
    try:
        moved = await store.peek("new", "sub", 10)
        assert [(m.message_id, m.deliver_at_ms, m.attempt, m.retries, m.properties["i"])
                for m in moved] == [(f"id{i}", T0 + 1000 * i, i, i, str(i))
                                    for i in range(1, 5)]
        assert [m.message_id for m in await store.peek("old", "sub", 10)] == ["id0"]
        with pytest.raises(InvalidArgument):
            await store.move([Move(moved[0].lease, "", OutMessage(b"x"))])
        assert len(await store.peek("new", "sub", 10)) == 4  # a refused move changes nothing
    finally:
        await store.close()


async def test_the_ledger_stores_each_copy_once_across_reopen(tmp_path: pathlib.Path) -> None:
    store = await opened(tmp_path)
    copies = [KeyedCopy(f"k{i}", "dest", OutMessage(f"c{i}".encode())) for i in range(3)]
    try:
        assert await store.store_once("src", copies[:2]) == [True, True]
    finally:
        await store.close()
    store = await opened(tmp_path)
    try:
        again = [*copies, KeyedCopy("k2", "dest", OutMessage(b"twice in one batch"))]
        assert await store.store_once("src", again) == [False, False, True, False]
        assert await store.store_once("other", copies[:1]) == [True]  # another ledger
        first = KeyedCopy("k0", "dest", OutMessage(b"same again"), first_delivery=True)
        assert await store.store_once("src", [first]) == [True]  # never handed out before
        bodies = [m.body for m in await store.peek("dest", "g", 10)]
        assert bodies == [b"c0", b"c1", b"c2", b"c0", b"same again"]
        with pytest.raises(InvalidArgument):
            await store.store_once("", copies)
        with pytest.raises(InvalidArgument):
            await store.store_once("src", [KeyedCopy("x" * 2000, "dest", OutMessage(b""))])
    finally:
        await store.close()


def test_together_is_one_transaction(tmp_path: pathlib.Path) -> None:
    """The writer runs a frame in BEGIN ... COMMIT: a failing part takes the others with it."""
    schema.create(tmp_path, fsync=False)
    conn = schema.connect(tmp_path, fsync=False)
    row = (schema.topic_base(1) + 1, "id", "", "", b"x", "{}", T0, 0, 0, 0)
    conn.execute("BEGIN IMMEDIATE")
    with pytest.raises(sqlite3.Error):
        writes.apply(conn, writes.together([writes.append((1, "t"), [row]),
                                            writes.copied("l", ["k"]),
                                            writes.statement("INSERT INTO nowhere VALUES(1)")]))
    conn.execute("ROLLBACK")
    assert conn.execute("SELECT count(*) FROM messages").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM copied").fetchone() == (0,)
    conn.close()


async def test_other_back_ends_copy_then_remove_and_keep_no_ledger() -> None:
    backend = InMemoryBackend()
    await backend.open()
    await backend.publish("old", [OutMessage(b"a", message_id="a")])
    page = await backend.peek("old", "g", 10)
    assert not backend.atomic_moves
    assert await backend.move([Move(page[0].lease, "new", OutMessage(b"a", message_id="a"))])
    assert [m.message_id for m in await backend.peek("new", "g", 10)] == ["a"]
    assert await backend.peek("old", "g", 10) == []
    with pytest.raises(FailedPrecondition):
        await backend.store_once("l", [KeyedCopy("k", "t", OutMessage(b""))])


async def test_peek_shows_when_a_message_released_in_place_is_due(
        tmp_path: pathlib.Path) -> None:
    store = await opened(tmp_path)
    try:
        await store.publish("t", [OutMessage(b"a"), OutMessage(b"b")])
        first, second = await store.fetch("t", "g", 2, T0)
        await store.release([Release(first.lease, T0 + 60_000, 1, 1)])
        await store.ack([second.lease])
        (waiting,) = await store.peek("t", "g", 10)
        assert (waiting.body, waiting.deliver_at_ms, waiting.attempt) == (b"a", T0 + 60_000, 1)
    finally:
        await store.close()
