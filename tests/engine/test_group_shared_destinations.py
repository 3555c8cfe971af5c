"""Destinations whose names hold no `{group}` (the `rabbitmq` scheme's `{topic}.retry` and
`{topic}.dlq`) are shared by every group of a topic: each copy records the group it came from,
so a group's retries come back to that group only, and the admin verbs of one group see, move
and remove its own dead letters and waiting retries only (on a back end whose groups read
independently, as the embedded store's and the in-memory one's do)."""

from __future__ import annotations

from dataclasses import replace

from gateway.core.properties import ORIGIN_GROUP
from gateway.engine.api import SettleAction

from .harness import TOPIC, Harness

SECOND = 1000
RETRY = f"{TOPIC}.retry"
DLQ = f"{TOPIC}.dlq"


def _spec(h: Harness, group: str, max_retries: int = 16):
    return replace(h.spec("rocketmq", {"max_retries": max_retries}, group=group),
                   naming="rabbitmq")


async def test_a_retry_comes_back_to_its_own_group_only(h: Harness) -> None:
    a, b = _spec(h, "a"), _spec(h, "b")
    await h.publish(b"m")
    (da,) = await h.receive(a)
    (db,) = await h.receive(b)
    assert (await h.fail(da)).ok  # a's first retry waits 10 s on orders.retry
    assert (await h.ack(db)).ok  # b is done with it
    (copy,) = await h.stored(RETRY)
    assert copy.properties[ORIGIN_GROUP] == "a"
    await h.advance(10 * SECOND)
    assert await h.receive(b) == []  # b never sees a's retry
    (again,) = await h.receive(a)
    assert again.body == b"m" and again.attempt == 2
    assert (await h.ack(again)).ok
    assert await h.receive(a) == [] and await h.receive(b) == []


async def test_admin_verbs_of_a_group_touch_its_own_copies_only(h: Harness) -> None:
    admin = h.engine.admin
    a, b = _spec(h, "a", 0), _spec(h, "b")
    await h.publish(b"dead-a")
    (da,) = await h.receive(a)
    (db,) = await h.receive(b)
    assert (await h.settle(da.receipt, SettleAction.DEAD_LETTER, reason="x")).ok
    assert (await h.ack(db)).ok
    await h.publish(b"retry-b")
    (da,) = await h.receive(a)
    (db,) = await h.receive(b)
    assert (await h.ack(da)).ok
    assert (await h.fail(db)).ok  # b's retry waits on orders.retry

    assert (await admin.describe(TOPIC, "a")).dead_letters == 1
    assert (await admin.describe(TOPIC, "b")).dead_letters == 0
    assert (await admin.dead_letters(TOPIC, "b", 10, -1)).views == ()
    assert [v.message.body for v in (await admin.dead_letters(TOPIC, "a", 10, -1)).views] == [
        b"dead-a"]
    assert (await admin.waiting_retries(TOPIC, "a")).total == 0
    assert (await admin.waiting_retries(TOPIC, "b")).total == 1
    assert (await admin.describe(TOPIC, "a")).waiting_retry == 0
    assert (await admin.describe(TOPIC, "b")).waiting_retry == 1
    assert await admin.delete(TOPIC, "b", []) == 0
    assert await admin.resend(TOPIC, "b", []) == 0
    assert await admin.purge(TOPIC, "a") == 0
    assert (await admin.waiting_retries(TOPIC, "b")).total == 1
    assert [v.message.body for v in (await admin.dead_letters(TOPIC, "a", 10, -1)).views] == [
        b"dead-a"]
    assert await admin.delete(TOPIC, "a", []) == 1
