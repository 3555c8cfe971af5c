"""Readers' (non-durable) subscriptions attacked with raw frames: a reader naming a durable
subscription is refused and never drops or moves it; a durable subscribe naming a live reader's
subscription is refused; a reader refused for its subscription type has moved nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import tests.pulsar_raw as raw
from adapters.pulsar.frontend import PulsarFrontEnd
from adapters.pulsar.wire import wire_pb2 as pb
from gateway.engine.engine import Engine
from tests.pulsar_raw import Cmd, RawClient

SHARED, EXCLUSIVE = pb.CommandSubscribe.Shared, pb.CommandSubscribe.Exclusive


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[tuple[PulsarFrontEnd, Engine]]:
    async with raw.front_end(tmp_path) as made:
        yield made


def subscribe(consumer_id: int, request_id: int, sub_type: int, name: str, *,
              durable: bool = True, start: pb.MessageIdData | None = None) -> pb.BaseCommand:
    cmd = raw.subscribe(consumer_id, request_id, sub_type)
    cmd.subscribe.subscription = name
    cmd.subscribe.durable = durable
    if start is not None:
        cmd.subscribe.start_message_id.CopyFrom(start)
    return cmd


def close_consumer(consumer_id: int, request_id: int) -> pb.BaseCommand:
    cmd = Cmd(type=Cmd.CLOSE_CONSUMER)
    cmd.close_consumer.consumer_id = consumer_id
    cmd.close_consumer.request_id = request_id
    return cmd


async def publish(port: int, count: int) -> list[pb.MessageIdData]:
    client = await RawClient.open(port)
    client.send(raw.producer(1, 1, "pub"))
    await client.expect(Cmd.PRODUCER_SUCCESS)
    for seq in range(count):
        client.send(raw.send(1, seq), raw.meta("pub", seq), f"m{seq}".encode())
    ids = [(await client.expect(Cmd.SEND_RECEIPT)).command.send_receipt.message_id
           for _ in range(count)]
    await client.close()
    return ids


async def refused(client: RawClient, request_id: int, text: str) -> None:
    error = (await client.expect(Cmd.ERROR)).command.error
    assert (error.request_id, error.error) == (request_id, pb.ConsumerBusy), error
    assert text in error.message, error.message


async def received(client: RawClient, consumer_id: int, count: int) -> list[bytes]:
    client.send(raw.flow(consumer_id, 100))
    return [(await client.expect(Cmd.MESSAGE)).payload for _ in range(count)]


async def test_a_reader_may_not_take_a_durable_subscriptions_name(
    stack: tuple[PulsarFrontEnd, Engine],
) -> None:
    front, _ = stack
    owner = await RawClient.open(front.port)
    owner.send(subscribe(1, 1, SHARED, "orders-sub"))
    await owner.expect(Cmd.SUCCESS)
    owner.send(close_consumer(1, 2))
    await owner.expect(Cmd.SUCCESS)
    await publish(front.port, 3)

    attacker = await RawClient.open(front.port)
    attacker.send(subscribe(9, 3, SHARED, "orders-sub", durable=False))
    await refused(attacker, 3, "durable subscription")
    attacker.send(close_consumer(9, 4))  # closing what was refused drops nothing
    await attacker.expect(Cmd.SUCCESS)
    await attacker.close()

    owner.send(subscribe(1, 5, SHARED, "orders-sub"))
    await owner.expect(Cmd.SUCCESS)
    # And a reader is refused while the durable subscription has a consumer too.
    attacker = await RawClient.open(front.port)
    attacker.send(subscribe(9, 6, SHARED, "orders-sub", durable=False))
    await refused(attacker, 6, "durable subscription")
    await attacker.close()
    assert await received(owner, 1, 3) == [b"m0", b"m1", b"m2"]
    await owner.close()


async def test_a_durable_subscribe_may_not_take_a_live_readers_name(
    stack: tuple[PulsarFrontEnd, Engine],
) -> None:
    front, engine = stack
    await publish(front.port, 2)
    reader = await RawClient.open(front.port)
    reader.send(subscribe(1, 1, SHARED, "reader-1", durable=False))
    await reader.expect(Cmd.SUCCESS)
    other = await RawClient.open(front.port)
    other.send(subscribe(2, 2, SHARED, "reader-1"))
    await refused(other, 2, "non-durable")
    assert await received(reader, 1, 2) == [b"m0", b"m1"]
    reader.send(close_consumer(1, 3))
    await reader.expect(Cmd.SUCCESS)
    assert engine.group_state("raw", "reader-1") is None  # the reader's group went with it
    # The name is free again: a durable subscription of it starts afresh.
    other.send(subscribe(2, 4, EXCLUSIVE, "reader-1"))
    await other.expect(Cmd.SUCCESS)
    assert await received(other, 2, 2) == [b"m0", b"m1"]
    await reader.close()
    await other.close()


async def test_a_refused_reader_does_not_move_a_live_subscription(
    stack: tuple[PulsarFrontEnd, Engine],
) -> None:
    front, _ = stack
    victim = await RawClient.open(front.port)
    victim.send(subscribe(1, 1, SHARED, "pay-sub"))
    await victim.expect(Cmd.SUCCESS)
    ids = await publish(front.port, 5)
    attacker = await RawClient.open(front.port)
    attacker.send(subscribe(7, 9, EXCLUSIVE, "pay-sub", durable=False, start=ids[4]))
    error = (await attacker.expect(Cmd.ERROR)).command.error
    assert (error.request_id, error.error) == (9, pb.ConsumerBusy), error
    await attacker.close()
    assert await received(victim, 1, 5) == [f"m{i}".encode() for i in range(5)]
    await victim.close()


async def test_a_reader_starts_at_its_start_message(stack: tuple[PulsarFrontEnd, Engine]) -> None:
    front, _ = stack
    ids = await publish(front.port, 4)
    reader = await RawClient.open(front.port)
    reader.send(subscribe(1, 1, EXCLUSIVE, "reader-2", durable=False, start=ids[2]))
    await reader.expect(Cmd.SUCCESS)
    assert await received(reader, 1, 2) == [b"m2", b"m3"]
    await reader.close()
