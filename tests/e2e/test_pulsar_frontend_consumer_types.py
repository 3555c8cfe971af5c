"""Failover and Key_Shared subscriptions of the official `pulsar-client`: one active failover
consumer, the next taking over when it leaves (with ACTIVE_CONSUMER_CHANGE notices, read with
raw frames since the Python client does not surface them), and Key_Shared key affinity with
per-key order."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pulsar
import pytest

import tests.pulsar_raw as raw
from adapters.pulsar.wire import wire_pb2 as pb
from tests.e2e.pulsar_stack import Stack, client_for, receive_all, run, stack_fixture  # noqa: F401  (fixture `stack`)
from tests.pulsar_raw import Cmd, RawClient

FAILOVER = pulsar.ConsumerType.Failover
KEY_SHARED = pulsar.ConsumerType.KeyShared


async def test_failover_switches_to_the_next_consumer_when_the_active_one_leaves(
    stack: Stack,
) -> None:
    client = client_for(stack.url)
    try:
        producer = await run(client.create_producer, "failover", batching_enabled=False)
        first = await run(client.subscribe, "failover", "sub", consumer_type=FAILOVER,
                          consumer_name="first")
        second = await run(client.subscribe, "failover", "sub", consumer_type=FAILOVER,
                           consumer_name="second")
        for i in range(6):
            await run(producer.send, f"m{i}".encode())
        got = await receive_all(first)
        assert [m.data() for m in got] == [f"m{i}".encode() for i in range(6)]
        assert await receive_all(second, quiet_ms=300) == []  # the standby gets nothing
        for msg in got[:3]:
            await run(first.acknowledge, msg)
        await asyncio.sleep(0.3)  # the client groups acks for up to 100 ms
        await run(first.close)
        for i in range(6, 8):
            await run(producer.send, f"m{i}".encode())
        taken = await receive_all(second)
        # What the first left unacknowledged, then what came after.
        assert [m.data() for m in taken] == [f"m{i}".encode() for i in range(3, 8)]
    finally:
        await run(client.close)


async def active_notice(client: RawClient, consumer_id: int) -> bool:
    frame = await client.expect(Cmd.ACTIVE_CONSUMER_CHANGE)
    change = frame.command.active_consumer_change
    assert change.consumer_id == consumer_id
    return change.is_active


async def test_failover_consumers_are_told_which_is_active(stack: Stack) -> None:
    assert stack.front is not None
    one = await RawClient.open(stack.front.port)
    two = await RawClient.open(stack.front.port)
    try:
        one.send(raw.subscribe(1, 1, pb.CommandSubscribe.Failover))
        await one.expect(Cmd.SUCCESS)
        assert await active_notice(one, 1) is True
        two.send(raw.subscribe(7, 1, pb.CommandSubscribe.Failover))
        await two.expect(Cmd.SUCCESS)
        assert await active_notice(two, 7) is False
        close = Cmd(type=Cmd.CLOSE_CONSUMER)
        close.close_consumer.consumer_id = 1
        close.close_consumer.request_id = 2
        one.send(close)
        await one.expect(Cmd.SUCCESS)
        assert await active_notice(two, 7) is True  # the standby takes over
        # Shared subscriptions get no notices.
        one.send(_shared(3))
        await one.expect(Cmd.SUCCESS)
        with pytest.raises(TimeoutError):
            await one.expect(Cmd.ACTIVE_CONSUMER_CHANGE, timeout=0.5)
    finally:
        await one.close()
        await two.close()


def _shared(consumer_id: int) -> pb.BaseCommand:
    cmd = raw.subscribe(consumer_id, consumer_id, pb.CommandSubscribe.Shared)
    cmd.subscribe.subscription = "other"
    return cmd


async def _key_shared_trio(
    client: pulsar.Client, topic: str, batching: bool
) -> tuple[list[pulsar.Consumer], pulsar.Producer]:
    """Consumers c0, c1, c2 of one Key_Shared subscription of `topic`, and a producer to it."""
    consumers = [
        await run(client.subscribe, topic, "sub", consumer_type=KEY_SHARED,
                  consumer_name=f"c{n}")
        for n in range(3)
    ]
    producer = await run(client.create_producer, topic, batching_enabled=batching,
                         batching_max_publish_delay_ms=10)
    return consumers, producer


async def _receive_and_ack(consumers: list[pulsar.Consumer]) -> list[tuple[int, pulsar.Message]]:
    """Every message each consumer receives (until it is quiet), acknowledged, with the
    consumer's index."""
    out: list[tuple[int, pulsar.Message]] = []
    for index, consumer in enumerate(consumers):
        for msg in await receive_all(consumer):
            out.append((index, msg))
            await run(consumer.acknowledge, msg)
    return out


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
async def test_key_shared_keeps_each_key_with_one_consumer_in_order(
    stack: Stack, batching: bool
) -> None:
    client = client_for(stack.url)
    topic = f"keyed-{batching}"
    try:
        consumers, producer = await _key_shared_trio(client, topic, batching)
        keys = [f"key-{k}" for k in range(12)]
        for n in range(5):
            for key in keys:
                producer.send_async(f"{key}/{n}".encode(), None, partition_key=key)
        await run(producer.flush)
        seen: dict[str, set[int]] = defaultdict(set)
        order: dict[str, list[int]] = defaultdict(list)
        for index, msg in await _receive_and_ack(consumers):
            key, n = msg.data().decode().split("/")
            assert msg.partition_key() == key
            seen[key].add(index)
            order[key].append(int(n))
        assert set(seen) == set(keys)
        assert all(len(who) == 1 for who in seen.values()), seen  # one consumer per key
        assert all(order[key] == list(range(5)) for key in keys), order  # in order per key
        assert len({i for who in seen.values() for i in who}) > 1  # and spread out
    finally:
        await run(client.close)


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
async def test_key_shared_routes_by_the_ordering_key_before_the_partition_key(
    stack: Stack, batching: bool
) -> None:
    """Pulsar's Key_Shared dispatcher hashes a message's ordering key when it has one, its
    partition key otherwise: messages of one ordering key go to one consumer, in order,
    whatever partition keys they carry (they were routed by partition key and spread out)."""
    client = client_for(stack.url)
    topic = f"ordering-{batching}"
    try:
        consumers, producer = await _key_shared_trio(client, topic, batching)
        orders = [f"order-{k}" for k in range(4)]
        for n in range(12):
            for order_key in orders:
                producer.send_async(f"{order_key}/{n}".encode(), None,
                                    partition_key=f"pk-{n}", ordering_key=order_key)
        for n in range(12):  # no ordering key: by partition key, as before
            producer.send_async(f"plain/{n}".encode(), None, partition_key="plain")
        await run(producer.flush)
        seen: dict[str, set[int]] = defaultdict(set)
        order: dict[str, list[int]] = defaultdict(list)
        for index, msg in await _receive_and_ack(consumers):
            name, n = msg.data().decode().split("/")
            if name == "plain":
                assert (msg.partition_key(), msg.ordering_key()) == ("plain", "")
            else:  # both keys reach the consumer as they were sent
                assert (msg.partition_key(), msg.ordering_key()) == (f"pk-{n}", name)
            seen[name].add(index)
            order[name].append(int(n))
        assert set(seen) == {*orders, "plain"}
        assert all(len(who) == 1 for who in seen.values()), seen  # one consumer per key
        assert all(got == list(range(12)) for got in order.values()), order  # in order
    finally:
        await run(client.close)
