"""The engine's admin verbs the console and the CLI use, on a manual clock: waiting retries by
attempt with their due times, dead letters by filter (bounded scans, paging), one by id, delete,
resend of those matching, and the groups the engine knows."""

from __future__ import annotations

import pytest

from gateway.engine import admin as admin_module
from gateway.engine import admin_scan
from gateway.engine.api import DeadLetterFilter, Scans, SettleAction
from gateway.errors import InvalidArgument, NotFound

from .harness import GROUP, TOPIC, Harness

SECOND = 1000


async def _dead(h: Harness, bodies: list[bytes], reason: str = "bad") -> list[str]:
    """Publish and fail each message until it is dead-lettered (rocketmq, max 1 retry)."""
    spec = h.spec("rocketmq", {"max_retries": 1})
    ids = await h.publish(*bodies)
    for d in await h.receive(spec, n=len(bodies)):
        assert (await h.fail(d, reason=reason)).ok
    await h.advance(10 * SECOND)
    for d in await h.receive(spec, n=len(bodies)):
        assert (await h.fail(d, reason=reason)).ok
    return ids


async def test_waiting_retries_by_attempt_with_due_times(h: Harness) -> None:
    spec = h.spec("rocketmq")
    await h.publish(b"a", b"b", b"c")
    start = h.now()
    first = await h.receive(spec, n=3)
    for d in first:
        await h.fail(d)  # attempt 1: due after 10 s
    await h.advance(10 * SECOND)
    again = await h.receive(spec, n=3)
    assert len(again) == 3
    await h.fail(again[0])  # attempt 2: due after 30 s
    await h.fail(again[1], delay_level=5)  # attempt 2: due after level 5 (2 min)
    waiting = await h.engine.admin.waiting_retries(TOPIC, GROUP)
    assert [(b.attempt, b.count) for b in waiting.by_attempt] == [(2, 2)]
    assert waiting.by_attempt[0].next_due_ms == start + 10 * SECOND + 30 * SECOND
    assert waiting.next_due_ms == waiting.by_attempt[0].next_due_ms
    assert waiting.total == 2 and waiting.complete
    await h.fail(again[2], delay_level=1)  # attempt 2 too (1 s)
    await h.advance(SECOND)
    third = await h.receive(spec)
    await h.fail(third[0])  # attempt 3: 1 min
    waiting = await h.engine.admin.waiting_retries(TOPIC, GROUP)
    assert [(b.attempt, b.count) for b in waiting.by_attempt] == [(2, 2), (3, 1)]
    assert waiting.by_attempt[1].next_due_ms == h.now() + 60 * SECOND
    view = await h.engine.admin.describe(TOPIC, GROUP)
    assert view.waiting_retry == 3 and view.policy == "rocketmq" and view.naming == "rocketmq"
    assert view.max_retries == 16


async def test_waiting_retries_count_only_their_topic(h: Harness) -> None:
    """`%RETRY%group` holds the group's retries of every topic: each topic counts its own."""
    other = h.spec("rocketmq", topic="payments")
    await h.publish(b"p", topic="payments")
    (d,) = await h.receive(other)
    await h.fail(d)
    assert (await h.engine.admin.waiting_retries(TOPIC, GROUP)).total == 0
    assert (await h.engine.admin.waiting_retries("payments", GROUP)).total == 1


async def test_describe_counts_only_its_topic_in_a_group_wide_retry_topic(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """describe reads `%RETRY%group` as waiting_retries does: each topic's own copies, waiting
    and due apart, with the topic's own next due time."""
    admin = h.engine.admin
    await h.publish(b"p", topic="payments")
    (d,) = await h.receive(h.spec("rocketmq", topic="payments"))
    theirs_failed = h.now()
    assert (await h.fail(d)).ok  # the first retry: 10 s
    await h.advance(SECOND)
    await h.publish(b"a", b"b")
    mine_failed = h.now()
    for m in await h.receive(h.spec("rocketmq"), n=2):
        assert (await h.fail(m, delay_level=4)).ok  # 30 s
    view, theirs = await admin.describe(TOPIC, GROUP), await admin.describe("payments", GROUP)
    assert (view.waiting_retry, view.ready, view.next_retry_ms) == (
        2, 0, mine_failed + 30 * SECOND)
    assert (theirs.waiting_retry, theirs.ready, theirs.next_retry_ms) == (
        1, 0, theirs_failed + 10 * SECOND)
    await h.advance(9 * SECOND)  # payments' retry is due; ours still wait
    view, theirs = await admin.describe(TOPIC, GROUP), await admin.describe("payments", GROUP)
    assert (view.waiting_retry, view.ready) == (2, 0)
    assert (theirs.waiting_retry, theirs.ready) == (0, 1)
    # Describing several groups in one request reads the shared destination once.
    peeks: list[str] = []
    peek = h.backend.peek

    async def counted(topic: str, *args: object) -> object:
        peeks.append(topic)
        return await peek(topic, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(h.backend, "peek", counted)
    scans: Scans = {}
    assert await admin.describe(TOPIC, GROUP, scans) == view
    assert await admin.describe("payments", GROUP, scans) == theirs
    assert peeks == [f"%RETRY%{GROUP}"] and list(scans) == [(f"%RETRY%{GROUP}", GROUP)]
    # Past the scan's bound the destination's own counts stand (an upper bound per topic).
    monkeypatch.setattr(admin_module, "MAX_WAITING_SCAN", 2)
    view = await admin.describe(TOPIC, GROUP)
    assert (view.waiting_retry, view.ready) == (2, 1)


async def test_dead_letters_filter_page_get_delete_resend(h: Harness) -> None:
    ids = await _dead(h, [b'{"id": 1}', b"plain", b"needle here"], reason="timeout")
    admin = h.engine.admin
    page = await admin.dead_letters(TOPIC, GROUP, 2, -1)
    assert [v.message.message_id for v in page.views] == ids[:2] and page.next_after >= 0
    rest = await admin.dead_letters(TOPIC, GROUP, 2, page.next_after)
    assert [v.message.message_id for v in rest.views] == ids[2:] and rest.next_after == -1
    found = await admin.dead_letters(TOPIC, GROUP, 10, -1, DeadLetterFilter(text="NEEDLE"))
    assert [v.message.message_id for v in found.views] == [ids[2]]
    assert found.scanned == 3 and found.next_after == -1
    for where, expected in [
        (DeadLetterFilter(reason="TIMEOUT"), ids),
        (DeadLetterFilter(reason="other"), []),
        (DeadLetterFilter(min_attempt=2, max_attempt=2), ids),
        (DeadLetterFilter(min_attempt=3), []),
        (DeadLetterFilter(since_ms=h.now() - 1), ids),
        (DeadLetterFilter(until_ms=h.now() - 1), []),
        (DeadLetterFilter(text=ids[1]), [ids[1]]),  # whole: its tail may be in the others
    ]:
        got = await admin.dead_letters(TOPIC, GROUP, 10, -1, where)
        assert [v.message.message_id for v in got.views] == expected, where
    one = await admin.dead_letter(TOPIC, GROUP, ids[0])
    assert one.reason.startswith("timeout") and one.original_topic == TOPIC
    with pytest.raises(NotFound):
        await admin.dead_letter(TOPIC, GROUP, "nope")
    assert await admin.delete(TOPIC, GROUP, [ids[0], "nope"]) == 1
    assert await admin.resend(TOPIC, GROUP, [], DeadLetterFilter(text="needle")) == 1
    left = await admin.dead_letters(TOPIC, GROUP, 10, -1)
    assert [v.message.message_id for v in left.views] == [ids[1]]
    (again,) = await h.receive(h.spec("rocketmq"))
    assert again.message_id == ids[2] and again.attempt == 1
    assert await admin.delete(TOPIC, GROUP, [], None) == 1  # no ids, no filter: every one
    with pytest.raises(InvalidArgument):
        await admin.dead_letters(TOPIC, GROUP, 0, -1)


async def test_a_filtered_page_scans_a_bounded_number(h: Harness,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admin_scan, "MAX_SCAN", 2)
    monkeypatch.setattr("gateway.engine.admin.MAX_SCAN", 2)
    ids = await _dead(h, [b"x1", b"x2", b"match", b"x4"])
    admin = h.engine.admin
    where = DeadLetterFilter(text="match")
    first = await admin.dead_letters(TOPIC, GROUP, 10, -1, where)
    assert first.views == () and first.scanned == 2 and first.next_after >= 0
    second = await admin.dead_letters(TOPIC, GROUP, 10, first.next_after, where)
    assert [v.message.message_id for v in second.views] == [ids[2]] and second.scanned == 2
    assert second.next_after == -1  # the end


async def test_groups_from_subscriptions_and_dead_letter_topics(h: Harness) -> None:
    await _dead(h, [b"x"])
    assert await h.engine.admin.groups() == [(TOPIC, GROUP)]
    assert await h.engine.admin.groups([("other", "g2")]) == sorted(
        [(TOPIC, GROUP), ("other", "g2")])


async def test_a_group_wide_destination_is_read_and_emptied_topic_by_topic(h: Harness) -> None:
    """`%DLQ%group` and `%RETRY%group` hold the group's messages of every topic: listing,
    showing, resending, deleting and purging one topic's touch only that topic's."""
    admin = h.engine.admin
    other = h.spec("rocketmq", topic="payments")
    mine = await _dead(h, [b"order-dead"])
    await h.publish(b"pay-dead", topic="payments")
    (d,) = await h.receive(other)
    assert (await h.settle(d.receipt, SettleAction.DEAD_LETTER, reason="x")).ok
    await h.publish(b"pay-retry", topic="payments")
    (d,) = await h.receive(other)
    assert (await h.fail(d)).ok
    assert (await admin.waiting_retries("payments", GROUP)).total == 1

    assert (await admin.describe(TOPIC, GROUP)).dead_letters == 1
    assert (await admin.describe("payments", GROUP)).dead_letters == 1
    page = await admin.dead_letters(TOPIC, GROUP, 10, -1)
    assert [v.message.message_id for v in page.views] == mine
    theirs = await admin.dead_letters("payments", GROUP, 10, -1)
    assert [v.message.body for v in theirs.views] == [b"pay-dead"]
    with pytest.raises(NotFound):
        await admin.dead_letter(TOPIC, GROUP, theirs.views[0].message.message_id)
    assert await admin.delete(TOPIC, GROUP, []) == 1  # every one of TOPIC's: its own only
    assert await admin.resend(TOPIC, GROUP, []) == 0
    assert [v.message.body for v in (await admin.dead_letters("payments", GROUP, 10,
                                                                 -1)).views] == [b"pay-dead"]
    await admin.purge(TOPIC, GROUP)
    assert (await admin.waiting_retries("payments", GROUP)).total == 1
