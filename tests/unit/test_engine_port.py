"""The engine's public surface (`gateway.engine.port`) and its one time base, on a manual clock."""

from __future__ import annotations

import pathlib

import pytest

from adapters import builtin_registry
from gateway.backend.base import OutMessage
from gateway.engine.api import ConsumerType, SettleAction, Settlement, SubscriptionSpec
from gateway.engine.clock import ManualClock, TimeBase
from gateway.engine.config import EngineConfig
from gateway.engine.engine import Engine
from gateway.engine.port import ConsumerPort, EngineControl, EnginePort, EngineQueries
from gateway.store import EmbeddedStore

T0 = 1_700_000_000_000


def test_one_conversion_between_policy_and_real_time() -> None:
    clock = ManualClock(T0)
    time = TimeBase(clock, scale=0.01)
    assert time.now_ms() == T0 and time.policy_now() == T0 and time.both() == (T0, T0)
    clock.advance(600)  # 600 real ms are 60 policy seconds
    assert time.both() == (T0 + 60_000, T0 + 600)
    assert time.policy_now() == T0 + 60_000
    assert time.real_ms(60_000) == 600 and time.policy_ms(600) == 60_000
    assert time.real_after(30_000) == T0 + 900
    plain = TimeBase(clock)
    assert plain.both() == (T0 + 600, T0 + 600) and plain.real_ms(1234) == 1234
    with pytest.raises(ValueError, match="scale"):
        TimeBase(clock, scale=0.0)


async def engine_on(tmp_path: pathlib.Path, scale: float = 1.0) -> tuple[Engine, ManualClock]:
    clock = ManualClock(T0)
    store = EmbeddedStore(tmp_path, clock.now_ms, fsync=False)
    engine = Engine(store, builtin_registry(), clock, EngineConfig(time_scale=scale))
    await engine.start()
    return engine, clock


async def test_the_engine_serves_every_port(tmp_path: pathlib.Path) -> None:
    engine, _ = await engine_on(tmp_path)
    try:
        port: EnginePort = engine
        queries: EngineQueries = engine
        control: EngineControl = engine
        consumer: ConsumerPort = await port.open_consumer(
            SubscriptionSpec("t", "g", "pulsar", consumer_type=ConsumerType.EXCLUSIVE), 5
        )
        assert consumer.group == "g" and consumer.credit == 5
        assert dict(consumer.policy.settings)["subscription_type"] == "exclusive"
        assert [(g.topic, g.group, g.consumers) for g in queries.groups()] == [("t", "g", 1)]
        assert queries.accepting and control.accepting
        await consumer.close()
        state = queries.group_state("t", "g")
        assert state is not None and state.consumers == 0
        assert queries.group_state("t", "other") is None
    finally:
        await engine.close()


async def test_queries_follow_deliveries_and_deadlines_in_scaled_time(
    tmp_path: pathlib.Path,
) -> None:
    """rocketmq-simple at time scale 0.01: a 30 s invisible duration ends 300 real ms later,
    and the deadline a delivery shows is real time."""
    engine, clock = await engine_on(tmp_path, scale=0.01)
    spec = SubscriptionSpec("t", "g", "rocketmq-simple")
    try:
        await engine.publish("t", [OutMessage(body=b"a"), OutMessage(body=b"b")])
        first, second = await engine.receive(spec, 2, 30_000, 0)
        assert first.deadline_ms == T0 + 300
        assert engine.unsettled_count() == 2 and engine.pending_timers() == 2
        assert sorted(u.receipt for u in engine.unsettled("t", "g")) == sorted(
            [first.receipt, second.receipt]
        )
        assert all(u.consumer_id == "" and not u.held for u in engine.unsettled("t", "g"))
        (extended,) = await engine.settle(
            [Settlement(first.receipt, SettleAction.EXTEND, invisible_ms=60_000)]
        )
        assert extended.ok and extended.deadline_ms == T0 + 600
        assert not await engine.ack([second.receipt])
        assert engine.unsettled_count() == 1 and engine.pending_timers() == 1
        clock.advance(600)
        await engine.run_due_timers()
        again = await engine.receive(spec, 2, 30_000, 0)
        assert [d.message_id for d in again] == [first.message_id]
        assert again[0].attempt == 2
    finally:
        await engine.close()
