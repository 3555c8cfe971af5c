"""The engine over a store that healed from a failure: deliveries handed out before are void
(settling one says so clearly), and their messages are delivered again; nothing is lost."""

from __future__ import annotations

import asyncio
import pathlib
import time
from collections.abc import Callable

from adapters import builtin_registry
from gateway.backend.base import OutMessage
from gateway.engine.api import ACK, SettleAction, Settlement, SubscriptionSpec
from gateway.engine.clock import ManualClock
from gateway.engine.engine import Engine
from gateway.errors import Unavailable
from gateway.store import EmbeddedStore, writes

T0 = 1_700_000_000_000


async def until(condition: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        await asyncio.sleep(0.01)
    return condition()


async def break_and_heal(store: EmbeddedStore) -> None:
    """Fail one commit (its caller gets Unavailable), then wait until the store has healed."""
    writer = store._supervisor.writer
    assert writer is not None
    try:
        await writer.submit(writes.statement("INSERT INTO no_such_table VALUES (1)"))
    except Unavailable:
        pass
    else:
        raise AssertionError("the broken write committed")
    assert not store.healthy()
    assert await until(store.healthy), "the store did not heal"


async def engine_on(tmp_path: pathlib.Path) -> tuple[Engine, EmbeddedStore, ManualClock]:
    clock = ManualClock(T0)
    store = EmbeddedStore(tmp_path, clock.now_ms, fsync=False)
    engine = Engine(store, builtin_registry(), clock)
    await engine.start()
    return engine, store, clock


async def test_pulled_deliveries_are_stale_after_a_reset_and_come_again(
    tmp_path: pathlib.Path,
) -> None:
    engine, store, _ = await engine_on(tmp_path)
    spec = SubscriptionSpec("t", "g", "rocketmq")
    try:
        ids = await engine.publish("t", [OutMessage(body=str(i).encode()) for i in range(3)])
        before = await engine.receive(spec, 10, None, 0)
        assert [d.message_id for d in before] == ids
        assert not (await engine.ack([before[0].receipt]))
        await break_and_heal(store)
        assert not engine.inflight
        results = await engine.settle([Settlement(d.receipt, ACK) for d in before[1:]])
        assert [(r.ok, r.error_code) for r in results] == [(False, "FAILED_PRECONDITION")] * 2
        again = await engine.receive(spec, 10, None, 0)
        assert [d.message_id for d in again] == ids[1:]
        assert not (await engine.ack([d.receipt for d in again]))
        assert await engine.receive(spec, 10, None, 0) == []
    finally:
        await engine.close()


async def test_pushed_deliveries_not_sent_yet_are_dropped_and_their_credit_returned(
    tmp_path: pathlib.Path,
) -> None:
    engine, store, _ = await engine_on(tmp_path)
    spec = SubscriptionSpec("t", "g", "rocketmq")
    try:
        ids = await engine.publish("t", [OutMessage(body=str(i).encode()) for i in range(5)])
        consumer = await engine.open_consumer(spec, credit=5)
        first = await asyncio.wait_for(consumer.next_batch(1), 10)
        assert await until(lambda: len(consumer.outbox) == 4)
        await break_and_heal(store)
        results = await engine.settle([Settlement(first[0].receipt, ACK)])
        assert results[0].error_code == "FAILED_PRECONDITION"
        consumer.add_credit(1)  # the client's credit for the one it had taken
        seen: list[str] = []
        while len(seen) < 5:
            batch = await asyncio.wait_for(consumer.next_batch(), 10)
            seen += [d.message_id for d in batch]
            assert not (await engine.ack([d.receipt for d in batch]))
            consumer.add_credit(len(batch))
        assert sorted(seen) == sorted(ids)
        assert consumer.credit == 5
    finally:
        await engine.close()


async def test_an_ordered_retry_held_in_the_engine_is_dropped_and_its_key_freed(
    tmp_path: pathlib.Path,
) -> None:
    engine, store, _ = await engine_on(tmp_path)
    spec = SubscriptionSpec("t", "g", "rocketmq-orderly")
    try:
        ids = await engine.publish("t", [OutMessage(body=b"1", key="k"),
                                         OutMessage(body=b"2", key="k")])
        consumer = await engine.open_consumer(spec, credit=10)
        first = await asyncio.wait_for(consumer.next_batch(), 10)
        assert [d.message_id for d in first] == ids[:1]  # the key's next waits behind it
        failed = await engine.settle([Settlement(first[0].receipt, SettleAction.FAIL)])
        assert failed[0].ok  # held in the engine until its suspend time (1 s) has passed
        await break_and_heal(store)
        # Without the clock moving: the store hands the message out again, in order.
        again = await asyncio.wait_for(consumer.next_batch(), 10)
        assert [d.message_id for d in again] == ids[:1]
        assert not (await engine.ack([again[0].receipt]))
        last = await asyncio.wait_for(consumer.next_batch(), 10)
        assert [d.message_id for d in last] == ids[1:]
        assert not (await engine.ack([last[0].receipt]))
        # The dropped hold left no timer behind that could deliver it once more.
        assert len(engine.timers) == 0
        assert not consumer.outbox and not engine.inflight
    finally:
        await engine.close()
