"""Destinations whose names hold no `{group}` (the `rabbitmq` scheme's `{topic}.retry` and
`{topic}.dlq`) are shared by every group of a topic: each copy records the group it came from,
so a group's retries come back to that group only, and the admin verbs of one group see, move
and remove its own dead letters and waiting retries only (on a back end whose groups read
independently, as the embedded store's and the in-memory one's do)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.core.properties import ORIGIN_GROUP
from gateway.engine.api import Scans, SettleAction

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


async def test_a_rename_into_a_shared_name_is_not_fooled_by_another_groups_copy(
    h: Harness,
) -> None:
    """On a back end that does not move atomically (the in-memory one, the brokers'), rename
    skips a message whose id is already at the new name (copied by an interrupted run) and
    only removes it at the old one. It looked for the id among every group's copies at a
    shared new name: group a's dead letter of a message that group b had dead-lettered too was
    removed from `{topic}-a-DLQ` and never written to `{topic}.dlq` (lost)."""
    assert not h.backend.atomic_moves
    admin = h.engine.admin
    a = replace(h.spec("rocketmq", {"max_retries": 0}, group="a"), naming="pulsar-2.9")
    b = _spec(h, "b", 0)
    await h.publish(b"poison")
    for spec in (a, b):
        (d,) = await h.receive(spec)
        assert (await h.settle(d.receipt, SettleAction.DEAD_LETTER, reason="no")).ok
    assert len(await h.stored(f"{TOPIC}-a-DLQ")) == 1 and len(await h.stored(DLQ)) == 1
    moved = await admin.rename(TOPIC, "a", "pulsar-2.9", "rabbitmq")
    assert moved.dead_letters == 1 and moved.left == 0
    assert sorted(m.properties[ORIGIN_GROUP] for m in await h.stored(DLQ)) == ["a", "b"]
    page = await admin.export(TOPIC, "a", "dead-letter", -1, 10, "rabbitmq")
    assert [m.body for m in page.messages] == [b"poison"]


async def test_describing_many_groups_reads_a_shared_destination_a_bounded_number_of_times(
    h: Harness, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each group sees `{topic}.dlq` in its own view, so describing N groups of one topic read
    it N times: 20 groups with 20,000 dead letters took ListGroups (the console's overview,
    every 5 s) 3.6 s over gRPC, 0.18 s for one group, without bound in the number of groups.
    One request now reads SCANS_MAX_ROWS of shared destinations at most; past that a group's
    count is the destination's own (every group's dead letters there)."""
    specs = [_spec(h, g, 0) for g in ("a", "b", "c")]
    await h.publish(b"m1", b"m2", b"m3")
    for spec in specs:
        for d in await h.receive(spec):
            assert (await h.settle(d.receipt, SettleAction.DEAD_LETTER, reason="no")).ok
    assert len(await h.stored(DLQ)) == 9
    admin = h.engine.admin
    peeks: list[str] = []
    peek = h.backend.peek

    async def counted(topic: str, *args: object) -> object:
        peeks.append(topic)
        return await peek(topic, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(h.backend, "peek", counted)
    monkeypatch.setattr("gateway.engine.admin.SCANS_MAX_ROWS", 9, raising=False)
    scans: Scans = {}
    counts = [(await admin.describe(TOPIC, g, scans)).dead_letters for g in ("a", "b", "c")]
    assert peeks == [DLQ]  # read for a only
    assert counts == [3, 9, 9]
    assert (await admin.describe(TOPIC, "c")).dead_letters == 3  # alone: exact
