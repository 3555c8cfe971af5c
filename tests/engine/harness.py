"""An engine over the in-memory back end on a manual clock, and the moves the tests make.

Time moves only in `advance`/`at`: the clock is set, the engine's timers and the back end's
waiters are poked, and the event loop runs what became ready (`idle`: a bounded number of bare
yields, never a timed wait). Pull consumers (`receive`, wait 0) answer at once; push consumers'
deliveries are taken from their outbox after `idle` (`pushed`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from adapters import builtin_registry
from gateway.backend.base import OutMessage, StoredMessage
from gateway.backend.memory import InMemoryBackend
from gateway.core.plan import Plan, plan
from gateway.engine.api import (
    ConsumerType,
    Delivery,
    SettleAction,
    Settlement,
    SettleResult,
    SubscriptionSpec,
)
from gateway.engine.clock import ManualClock
from gateway.engine.config import EngineConfig
from gateway.engine.dispatch import Consumer
from gateway.engine.engine import Engine

T0 = 1_700_000_000_000
TOPIC = "orders"
GROUP = "G"
IDLE_ROUNDS = 64
"""Bare event-loop yields per `idle`: far more than a settle, a timer batch or a dispatch round
needs (each needs a handful), and still microseconds."""


async def idle() -> None:
    """Let every task that is ready run to its next real wait (no time passes)."""
    for _ in range(IDLE_ROUNDS):
        await asyncio.sleep(0)


class Harness:
    def __init__(self, config: EngineConfig | None = None) -> None:
        self.clock = ManualClock(T0)
        self.backend = InMemoryBackend(self.clock)
        self.registry = builtin_registry()
        self.engine = Engine(self.backend, self.registry, self.clock,
                             config or EngineConfig(backend_name="memory"))

    # ------------------------------------------------------------------ time
    def now(self) -> int:
        return self.clock.now_ms()

    async def advance(self, ms: int) -> None:
        """Move the clock by `ms`, fire what is due, let the loop run it."""
        self.clock.advance(ms)
        self.engine.timers.poke()
        self.backend.poke()
        await idle()

    async def at(self, when_ms: int) -> None:
        """Move the clock to `when_ms` (not backwards)."""
        assert when_ms >= self.now(), f"time would go back from {self.now()} to {when_ms}"
        await self.advance(when_ms - self.now())

    # ------------------------------------------------------------------ messages
    @staticmethod
    def spec(
        policy: str,
        options: Mapping[str, object] | None = None,
        *,
        topic: str = TOPIC,
        group: str = GROUP,
        consumer_type: ConsumerType = ConsumerType.SHARED,
        broadcast: bool = False,
        consumer_id: str = "",
        tag_filter: str = "",
    ) -> SubscriptionSpec:
        return SubscriptionSpec(
            topic=topic, group=group, policy=policy,
            options={k: str(v) for k, v in (options or {}).items()},
            consumer_type=consumer_type, broadcast=broadcast, consumer_id=consumer_id,
            tag_filter=tag_filter,
        )

    async def publish(self, *bodies: bytes, topic: str = TOPIC, key: str = "") -> list[str]:
        """Publish, then let push consumers' dispatchers run."""
        ids = await self.engine.publish(topic, [OutMessage(body, key=key) for body in bodies])
        await idle()
        return ids

    async def publish_keyed(self, *pairs: tuple[str, bytes], topic: str = TOPIC) -> list[str]:
        """Publish (key, body) pairs in order, then let dispatchers run."""
        ids = await self.engine.publish(topic, [OutMessage(body, key=key) for key, body in pairs])
        await idle()
        return ids

    async def receive(self, spec: SubscriptionSpec, n: int = 10,
                      invisible_ms: int | None = None) -> list[Delivery]:
        """Pull what is visible now (long-poll wait 0: answers at once)."""
        return await self.engine.receive(spec, n, invisible_ms, 0)

    async def one(self, spec: SubscriptionSpec, invisible_ms: int | None = None) -> Delivery:
        got = await self.receive(spec, invisible_ms=invisible_ms)
        assert len(got) == 1, f"expected one delivery at +{self.now() - T0} ms, got {got}"
        return got[0]

    async def settle(self, receipt: str, action: SettleAction, **kw: object) -> SettleResult:
        """Settle one delivery, then let dispatchers run (a settle may unblock a key)."""
        (result,) = await self.engine.settle([Settlement(receipt, action, **kw)])  # type: ignore[arg-type]
        await idle()
        return result

    async def fail(self, d: Delivery, **kw: object) -> SettleResult:
        return await self.settle(d.receipt, SettleAction.FAIL, **kw)

    async def ack(self, d: Delivery) -> SettleResult:
        return await self.settle(d.receipt, SettleAction.ACK)

    async def open(self, spec: SubscriptionSpec, credit: int = 100) -> Consumer:
        consumer = await self.engine.open_consumer(spec, credit)
        await idle()
        return consumer

    @staticmethod
    def pushed(consumer: Consumer) -> list[Delivery]:
        """What the consumer was given so far (taken out of its outbox)."""
        got = list(consumer.outbox)
        consumer.outbox.clear()
        consumer.add_credit(len(got))
        return got

    async def stored(self, topic: str) -> list[StoredMessage]:
        """Every message on `topic` (a dead-letter destination, say), read without leasing."""
        return await self.backend.peek(topic, "inspector", 1000)

    # ------------------------------------------------------------------ timelines
    async def pull_timeline(
        self,
        spec: SubscriptionSpec,
        *,
        invisible_ms: int | None = None,
        processing_ms: int = 0,
        fail: dict[str, object] | None = None,
    ) -> tuple[list[Delivery], Plan]:
        """Publish one message and fail every delivery `processing_ms` after it; each delivery
        must come exactly at `gateway plan`'s time for it (not 1 ms earlier) with its counters
        and source topic. Returns the deliveries and the plan."""
        policy = self.engine.policy_for(spec)
        expected = plan(policy, topic=spec.topic, group=spec.group, processing_ms=processing_ms,
                        invisible_ms=invisible_ms)
        assert not expected.truncated
        (message_id,) = await self.publish(b"payload", topic=spec.topic)
        start = self.now()
        seen: list[Delivery] = []
        for step in expected.attempts:
            due = start + step.at_ms
            if due > self.now():
                await self.at(due - 1)
                assert await self.receive(spec, invisible_ms=invisible_ms) == [], (
                    f"attempt {step.attempt} came before +{step.at_ms} ms")
                await self.at(due)
            d = await self.one(spec, invisible_ms)
            assert (d.message_id, d.attempt, d.retries, d.topic, d.original_topic) == (
                message_id, step.attempt, step.retries, step.topic, spec.topic)
            seen.append(d)
            await self.advance(processing_ms)
            result = await self.fail(d, **(fail or {}))
            assert result.ok, result
        return seen, expected

    async def nothing_more(
        self, specs: Sequence[SubscriptionSpec], ms: int = 3 * 3_600_000
    ) -> None:
        """Nothing is delivered any more within `ms` (past every retry interval of the policies
        tested with it: RocketMQ's longest is 2 h)."""
        await self.advance(ms)
        for spec in specs:
            assert await self.receive(spec) == []
