"""Where subscriptions of the official `pulsar-client` start, and seeking them: a new Latest
subscription (the client's default) sees only what is published after it subscribed, a new
Earliest one everything kept, an existing one keeps its position whatever it asks, across a
gateway restart too."""

from __future__ import annotations

import asyncio
import time

import pulsar

from tests.e2e.pulsar_stack import Stack, client_for, receive_all, run, stack_fixture  # noqa: F401  (fixture `stack`)

LATEST = pulsar.InitialPosition.Latest
EARLIEST = pulsar.InitialPosition.Earliest


async def send(producer: pulsar.Producer, *bodies: str) -> None:
    for body in bodies:
        await run(producer.send, body.encode())


async def bodies(consumer: pulsar.Consumer, ack: bool = True) -> list[str]:
    got = await receive_all(consumer)
    for msg in got:
        if ack:
            await run(consumer.acknowledge, msg)
    return [m.data().decode() for m in got]


async def test_latest_sees_only_later_messages_and_earliest_everything(stack: Stack) -> None:
    client = client_for(stack.url)
    try:
        producer = await run(client.create_producer, "positions", batching_enabled=False)
        await send(producer, "old-1", "old-2")
        default = await run(client.subscribe, "positions", "default")  # Latest: the default
        latest = await run(client.subscribe, "positions", "latest", initial_position=LATEST)
        earliest = await run(client.subscribe, "positions", "earliest",
                             initial_position=EARLIEST)
        await send(producer, "new-1", "new-2")
        assert await bodies(default) == ["new-1", "new-2"]
        assert await bodies(latest) == ["new-1", "new-2"]
        assert await bodies(earliest) == ["old-1", "old-2", "new-1", "new-2"]
    finally:
        await run(client.close)


async def test_an_existing_subscription_keeps_its_position(stack: Stack) -> None:
    client = client_for(stack.url)
    try:
        producer = await run(client.create_producer, "kept", batching_enabled=False)
        consumer = await run(client.subscribe, "kept", "sub", initial_position=LATEST)
        await send(producer, "a", "b")
        assert await bodies(consumer) == ["a", "b"]
        await run(consumer.close)
        await send(producer, "c")  # published while nobody is subscribed
        # Latest again, and Earliest: the subscription exists, so it goes on after "b".
        again = await run(client.subscribe, "kept", "sub", initial_position=LATEST)
        assert await bodies(again, ack=False) == ["c"]
        await run(again.close)
        earliest = await run(client.subscribe, "kept", "sub", initial_position=EARLIEST)
        assert await bodies(earliest) == ["c"]
        await run(earliest.close)
    finally:
        await run(client.close)


async def test_a_subscription_keeps_its_position_across_a_restart(stack: Stack) -> None:
    client = client_for(stack.url)
    try:
        producer = await run(client.create_producer, "restart", batching_enabled=False)
        await send(producer, "before")
        consumer = await run(client.subscribe, "restart", "sub")  # Latest, nothing read yet
        await run(consumer.close)
    finally:
        await run(client.close)
    await stack.stop()
    await stack.start()
    client = client_for(stack.url)
    try:
        producer = await run(client.create_producer, "restart", batching_enabled=False)
        await send(producer, "after")
        consumer = await run(client.subscribe, "restart", "sub")
        assert await bodies(consumer) == ["after"]
    finally:
        await run(client.close)


async def test_seek_by_message_id(stack: Stack) -> None:
    client = client_for(stack.url)
    try:
        producer = await run(client.create_producer, "seek-id", batching_enabled=False)
        consumer = await run(client.subscribe, "seek-id", "sub", initial_position=EARLIEST)
        receipts = [await run(producer.send, f"m{i}".encode()) for i in range(5)]
        got = await receive_all(consumer)
        assert [m.data() for m in got] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
        # A delivered message has the id its send receipt gave.
        assert [(m.message_id().ledger_id(), m.message_id().entry_id()) for m in got] == [
            (r.ledger_id(), r.entry_id()) for r in receipts
        ]
        for msg in got:
            await run(consumer.acknowledge, msg)
        # As with a Pulsar broker, the client goes on after the message it seeks to.
        await run(consumer.seek, got[1].message_id())  # back, by a delivered message's id
        assert await bodies(consumer) == ["m2", "m3", "m4"]
        await run(consumer.seek, receipts[3])  # forward, by a send receipt's id
        assert await bodies(consumer) == ["m4"]
        await run(consumer.seek, pulsar.MessageId.earliest)
        assert await bodies(consumer) == ["m0", "m1", "m2", "m3", "m4"]
        await run(consumer.seek, pulsar.MessageId.latest)
        await send(producer, "after")
        assert await bodies(consumer) == ["after"]
    finally:
        await run(client.close)


async def test_seek_by_publish_time_in_batches(stack: Stack) -> None:
    client = client_for(stack.url)
    try:
        producer = await run(client.create_producer, "seek-time", batching_enabled=True,
                             batching_max_publish_delay_ms=5)
        consumer = await run(client.subscribe, "seek-time", "sub", initial_position=EARLIEST)
        await send(producer, "early-1", "early-2")
        await asyncio.sleep(0.05)
        middle = int(time.time() * 1000)
        await asyncio.sleep(0.05)
        await send(producer, "late-1", "late-2")
        assert await bodies(consumer) == ["early-1", "early-2", "late-1", "late-2"]
        await run(consumer.seek, middle)
        assert await bodies(consumer) == ["late-1", "late-2"]
        await run(consumer.seek, 0)
        assert await bodies(consumer) == ["early-1", "early-2", "late-1", "late-2"]
    finally:
        await run(client.close)


async def test_a_dead_letter_producers_initial_subscription_keeps_the_dead_letters(
    stack: Stack,
) -> None:
    """The client's dead-letter producer names `initial_subscription_name`: that subscription
    exists from then on, so a Latest subscriber of that name later still gets the dead letters."""
    client = client_for(stack.url)
    try:
        policy = pulsar.ConsumerDeadLetterPolicy(
            max_redeliver_count=1, initial_subscription_name="audit"
        )
        consumer = await run(
            client.subscribe, "pay", "billing", consumer_type=pulsar.ConsumerType.Shared,
            negative_ack_redelivery_delay_ms=100, dead_letter_policy=policy,
        )
        producer = await run(client.create_producer, "pay")
        await run(producer.send, b"poison")
        for _ in range(2):
            msg = await run(consumer.receive, 5000)
            await run(consumer.negative_acknowledge, msg)
        await asyncio.sleep(1.0)  # the client's DLQ producer sends the third delivery away
        assert await receive_all(consumer) == []
        late = await run(client.subscribe, "pay-billing-DLQ", "audit")  # Latest, the default
        assert await bodies(late) == ["poison"]
        other = await run(client.subscribe, "pay-billing-DLQ", "someone-else")
        assert await bodies(other) == []  # a new Latest subscription: only what comes later
    finally:
        await run(client.close)


async def read_all(reader: pulsar.Reader) -> list[str]:
    out = []
    while True:
        try:
            out.append((await run(reader.read_next, 700)).data().decode())
        except pulsar.Timeout:
            return out


async def test_readers_start_where_they_ask_and_leave_no_subscription(stack: Stack) -> None:
    client = client_for(stack.url)
    try:
        producer = await run(client.create_producer, "readers", batching_enabled=False)
        receipts = [await run(producer.send, f"m{i}".encode()) for i in range(4)]
        starts = {
            "earliest": (pulsar.MessageId.earliest, ["m0", "m1", "m2", "m3"]),
            "an id": (receipts[1], ["m2", "m3"]),  # the client goes on after its start
            "latest": (pulsar.MessageId.latest, []),
        }
        for start, expected in starts.values():
            reader = await run(client.create_reader, "readers", start)
            assert await read_all(reader) == expected
            await run(reader.close)
        late = await run(client.create_reader, "readers", pulsar.MessageId.latest)
        await run(producer.send, b"later")
        assert await read_all(late) == ["later"]
        await run(late.close)
        await asyncio.sleep(0.3)
        assert stack.app is not None
        # A reader's (non-durable) subscription goes with it: nothing holds the topic back.
        assert [g.group for g in stack.app.engine.groups() if g.topic == "readers"] == []
    finally:
        await run(client.close)


async def test_a_seek_moves_every_consumer_of_a_shared_subscription(stack: Stack) -> None:
    one, two = client_for(stack.url), client_for(stack.url)
    try:
        shared = pulsar.ConsumerType.Shared
        producer = await run(one.create_producer, "seek-shared", batching_enabled=False)
        first = await run(one.subscribe, "seek-shared", "sub", consumer_type=shared,
                          initial_position=EARLIEST)
        second = await run(two.subscribe, "seek-shared", "sub", consumer_type=shared)
        await send(producer, *(f"m{i}" for i in range(6)))
        seen = await bodies(first) + await bodies(second)
        assert sorted(seen) == [f"m{i}" for i in range(6)]
        await run(first.seek, 0)  # the start of the topic, for both consumers
        again = await bodies(first) + await bodies(second)
        assert sorted(again) == [f"m{i}" for i in range(6)]
    finally:
        await run(one.close)
        await run(two.close)
