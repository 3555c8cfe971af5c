"""Delayed delivery applies to Shared and Key_Shared subscriptions only, as on a broker: on
Exclusive and Failover ones a message sent with `deliver_after` / `deliver_at` is delivered at
once (Pulsar's documentation on delayed message delivery). It waited on every subscription
type. One topic read by an Exclusive (or Failover) and a Shared subscription at once shows each
its own behaviour."""

from __future__ import annotations

import datetime
import time

import pulsar
import pytest

from tests.e2e.pulsar_stack import Stack, client_for, receive_all, run, stack_fixture  # noqa: F401  (fixture `stack`)

HOUR = datetime.timedelta(hours=1)


@pytest.mark.parametrize("kind", [pulsar.ConsumerType.Exclusive, pulsar.ConsumerType.Failover],
                         ids=["exclusive", "failover"])
async def test_a_delayed_message_is_delivered_at_once_on_exclusive_and_failover(
    stack: Stack, kind: pulsar.ConsumerType
) -> None:
    assert stack.app is not None
    client = client_for(stack.url)
    topic = f"later-{kind}"
    try:
        at_once = await run(client.subscribe, topic, "now", consumer_type=kind)
        waits = await run(client.subscribe, topic, "shared",
                          consumer_type=pulsar.ConsumerType.Shared)
        keyed = await run(client.subscribe, topic, "keyed",
                          consumer_type=pulsar.ConsumerType.KeyShared)
        producer = await run(client.create_producer, topic, batching_enabled=False)
        await run(producer.send, b"after", deliver_after=HOUR)
        await run(producer.send, b"at", deliver_at=int(time.time() * 1000) + 3_600_000)
        await run(producer.send, b"plain")
        got = [await run(at_once.receive, 10_000) for _ in range(3)]
        assert [m.data() for m in got] == [b"after", b"at", b"plain"]  # in topic order
        for msg in got:
            await run(at_once.acknowledge, msg)
        # The Shared and Key_Shared subscriptions of the same topic still wait for the hour.
        for consumer in (waits, keyed):
            assert [m.data() for m in await receive_all(consumer, quiet_ms=500)] == [b"plain"]
        for group in ("shared", "keyed"):
            view = await stack.app.engine.admin.describe(topic, group)
            assert (view.delayed, view.ready) == (2, 0), view
    finally:
        await run(client.close)
