"""The real pulsar-client sees the redelivery count start from 0 again once every consumer of
the subscription has gone (SEMANTICS.md, document 004), and keep counting while one stays."""

from __future__ import annotations

import pulsar

from tests.e2e.test_pulsar_frontend import (  # noqa: F401  (fixtures)
    NACK_DELAY_MS,
    client,
    receive_all,
    run,
    stack,
)


async def _subscribe(client: pulsar.Client, topic: str) -> pulsar.Consumer:  # noqa: F811
    return await run(client.subscribe, topic, "billing", consumer_type=pulsar.ConsumerType.Shared,
                     negative_ack_redelivery_delay_ms=NACK_DELAY_MS)


async def _nacked_twice(consumer: pulsar.Consumer) -> pulsar.Message:
    """Receive, nack, twice; return the third delivery (redelivery count 2), not settled."""
    for expected in (0, 1):
        msg = await run(consumer.receive, 10_000)
        assert msg.redelivery_count() == expected
        await run(consumer.negative_acknowledge, msg)
    msg = await run(consumer.receive, 10_000)
    assert msg.redelivery_count() == 2
    return msg


async def test_the_count_starts_again_when_every_consumer_left(
    client: pulsar.Client,  # noqa: F811
) -> None:
    consumer = await _subscribe(client, "count-reset")
    producer = await run(client.create_producer, "count-reset")
    await run(producer.send, b"poison")
    held = await _nacked_twice(consumer)
    await run(consumer.negative_acknowledge, held)  # waiting for its redelivery, counted 3
    await run(consumer.close)
    consumer = await _subscribe(client, "count-reset")
    again = await run(consumer.receive, 10_000)
    assert (again.data(), again.redelivery_count()) == (b"poison", 0)
    await run(consumer.negative_acknowledge, again)
    after = await run(consumer.receive, 10_000)
    assert after.redelivery_count() == 1
    await run(consumer.acknowledge, after)
    assert await receive_all(consumer) == []


async def test_the_count_goes_on_while_another_consumer_stays(
    client: pulsar.Client,  # noqa: F811
) -> None:
    first = await _subscribe(client, "count-kept")
    producer = await run(client.create_producer, "count-kept")
    await run(producer.send, b"poison")
    await _nacked_twice(first)  # held by `first`, unacknowledged
    second = await _subscribe(client, "count-kept")
    await run(first.close)  # given back: goes to `second`, still counted
    got = await run(second.receive, 10_000)
    assert got.data() == b"poison"
    assert got.redelivery_count() >= 2
    await run(second.acknowledge, got)
