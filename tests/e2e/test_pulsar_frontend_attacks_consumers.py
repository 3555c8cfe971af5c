"""Consumer commands attacked with raw frames: a cumulative ack on a Shared subscription, a
refused seek, an unsubscribe. Each is answered as a broker answers it and harms no other
consumer of the subscription."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pulsar
import pytest

import tests.pulsar_raw as raw
from adapters.pulsar.frontend import PulsarFrontEnd
from adapters.pulsar.wire import wire_pb2 as pb
from gateway.engine.engine import Engine
from tests.pulsar_raw import Cmd, RawClient

SHARED, KEY_SHARED = pb.CommandSubscribe.Shared, pb.CommandSubscribe.Key_Shared
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[tuple[PulsarFrontEnd, Engine]]:
    async with raw.front_end(tmp_path) as made:
        yield made


async def publish(port: int, count: int, first: int = 0) -> list[pb.MessageIdData]:
    client = await RawClient.open(port)
    client.send(raw.producer(1, 1, f"pub-{first}"))
    await client.expect(Cmd.PRODUCER_SUCCESS)
    for seq in range(first, first + count):
        client.send(raw.send(1, seq), raw.meta(f"pub-{first}", seq), f"m{seq}".encode())
    ids = [(await client.expect(Cmd.SEND_RECEIPT)).command.send_receipt.message_id
           for _ in range(count)]
    await client.close()
    return ids


async def subscribed(port: int, consumer_id: int, sub_type: int) -> RawClient:
    client = await RawClient.open(port)
    client.send(raw.subscribe(consumer_id, 1, sub_type))
    await client.expect(Cmd.SUCCESS)
    return client


async def messages(client: RawClient, count: int) -> list[pb.CommandMessage]:
    return [(await client.expect(Cmd.MESSAGE)).command.message for _ in range(count)]


def ack(consumer_id: int, ids: list[pb.MessageIdData], *, cumulative: bool = False,
        request_id: int | None = None) -> pb.BaseCommand:
    cmd = Cmd(type=Cmd.ACK)
    cmd.ack.consumer_id = consumer_id
    cmd.ack.ack_type = pb.CommandAck.Cumulative if cumulative else pb.CommandAck.Individual
    for mid in ids:
        cmd.ack.message_id.add().CopyFrom(mid)
    if request_id is not None:
        cmd.ack.request_id = request_id
    return cmd


def redeliver_all(consumer_id: int) -> pb.BaseCommand:
    cmd = Cmd(type=Cmd.REDELIVER_UNACKNOWLEDGED_MESSAGES)
    cmd.redeliverUnacknowledgedMessages.consumer_id = consumer_id
    return cmd


@pytest.mark.parametrize("sub_type", [SHARED, KEY_SHARED], ids=["shared", "key-shared"])
async def test_a_cumulative_ack_on_a_shared_subscription_is_refused(
    stack: tuple[PulsarFrontEnd, Engine], sub_type: int
) -> None:
    front, _ = stack
    await publish(front.port, 2)
    client = await subscribed(front.port, 1, sub_type)
    client.send(raw.flow(1, 10))
    got = await messages(client, 2)
    client.send(ack(1, [got[1].message_id], cumulative=True, request_id=7))
    reply = (await client.expect(Cmd.ACK_RESPONSE)).command.ackResponse
    assert (reply.request_id, reply.error) == (7, pb.NotAllowedError), reply
    assert "Exclusive and Failover" in reply.message
    client.send(ack(1, [got[1].message_id], cumulative=True))  # no request id: no answer
    # Nothing was acknowledged: both come back when given back.
    client.send(redeliver_all(1))
    again = await messages(client, 2)
    assert sorted(m.message_id.entryId for m in again) == sorted(
        m.message_id.entryId for m in got)
    await client.close()


async def test_a_refused_cumulative_ack_does_not_swallow_anothers_redelivery(
    stack: tuple[PulsarFrontEnd, Engine],
) -> None:
    front, _ = stack
    other = await subscribed(front.port, 2, SHARED)
    await publish(front.port, 1)
    other.send(raw.flow(2, 1))
    [first] = await messages(other, 1)
    client = await subscribed(front.port, 1, SHARED)
    await publish(front.port, 1, first=1)
    client.send(raw.flow(1, 1))
    [second] = await messages(client, 1)
    client.send(ack(1, [second.message_id], cumulative=True, request_id=3))
    reply = (await client.expect(Cmd.ACK_RESPONSE)).command.ackResponse
    assert reply.error == pb.NotAllowedError
    other.send(redeliver_all(2))  # the other consumer gives its message back
    await other.close()
    client.send(raw.flow(1, 1))
    [again] = await messages(client, 1)
    assert again.message_id == first.message_id
    await client.close()


def seek(consumer_id: int, request_id: int, mid: pb.MessageIdData) -> pb.BaseCommand:
    cmd = Cmd(type=Cmd.SEEK)
    cmd.seek.consumer_id = consumer_id
    cmd.seek.request_id = request_id
    cmd.seek.message_id.CopyFrom(mid)
    return cmd


async def test_a_refused_seek_closes_no_consumer(stack: tuple[PulsarFrontEnd, Engine]) -> None:
    front, _ = stack
    await publish(front.port, 2)
    victim = await subscribed(front.port, 1, SHARED)
    victim.send(raw.flow(1, 1))
    [held] = await messages(victim, 1)
    attacker = await subscribed(front.port, 5, SHARED)
    # Shaped like a store id, but no message has it and none can (its publish time is to
    # come; a past one, of a message trimmed, moves the subscription to that time).
    attacker.send(seek(5, 2, pb.MessageIdData(ledgerId=0x7F00000000000000, entryId=12345)))
    error = (await attacker.expect(Cmd.ERROR)).command.error
    assert (error.request_id, error.error) == (2, pb.NotAllowedError), error
    # The victim's consumer is still open with its delivery: the next frame it gets is the
    # next message (a CLOSE_CONSUMER first would fail `expect`), and its ack is taken.
    victim.send(raw.flow(1, 1))
    [after] = await messages(victim, 1)
    assert after.message_id != held.message_id
    victim.send(ack(1, [held.message_id, after.message_id], request_id=3))
    reply = (await victim.expect(Cmd.ACK_RESPONSE)).command.ackResponse
    assert not reply.HasField("error"), reply
    await attacker.close()
    await victim.close()


async def test_a_seek_moves_the_subscription_and_closes_every_consumer(
    stack: tuple[PulsarFrontEnd, Engine],
) -> None:
    front, engine = stack
    ids = await publish(front.port, 3)
    one = await subscribed(front.port, 1, SHARED)
    two = await subscribed(front.port, 2, SHARED)
    one.send(raw.flow(1, 3))
    await messages(one, 3)
    two.send(seek(2, 4, ids[1]))
    assert (await one.expect(Cmd.CLOSE_CONSUMER)).command.close_consumer.consumer_id == 1
    assert (await two.expect(Cmd.CLOSE_CONSUMER)).command.close_consumer.consumer_id == 2
    assert (await two.expect(Cmd.SUCCESS)).command.success.request_id == 4
    assert not engine.unsettled("raw", "s")  # the closed consumers' deliveries went void
    one.send(raw.subscribe(1, 5, SHARED))
    await one.expect(Cmd.SUCCESS)
    one.send(raw.flow(1, 10))
    again = await messages(one, 2)
    assert [m.message_id for m in again] == ids[1:]
    assert [m.redelivery_count for m in again] == [0, 0]
    await one.close()
    await two.close()


def unsubscribe(consumer_id: int, request_id: int) -> pb.BaseCommand:
    cmd = Cmd(type=Cmd.UNSUBSCRIBE)
    cmd.unsubscribe.consumer_id = consumer_id
    cmd.unsubscribe.request_id = request_id
    return cmd


async def test_unsubscribe_deletes_the_subscription_and_its_backlog(
    stack: tuple[PulsarFrontEnd, Engine],
) -> None:
    front, engine = stack
    client = await subscribed(front.port, 1, SHARED)
    await publish(front.port, 3)
    client.send(unsubscribe(1, 2))
    assert (await client.expect(Cmd.SUCCESS)).command.success.request_id == 2
    assert engine.group_state("raw", "s") is None
    client.send(unsubscribe(1, 3))  # the consumer went with it
    error = (await client.expect(Cmd.ERROR)).command.error
    assert (error.request_id, error.error) == (3, pb.ConsumerNotFound)
    latest = raw.subscribe(1, 4, SHARED)
    latest.subscribe.initialPosition = pb.CommandSubscribe.Latest
    client.send(latest)
    await client.expect(Cmd.SUCCESS)
    client.send(raw.flow(1, 10))
    await publish(front.port, 1, first=3)
    # A new subscription: the new message, not the old backlog (an existing one would keep
    # its position and deliver m0 first).
    assert (await client.expect(Cmd.MESSAGE)).payload == b"m3"
    await client.close()


def unsubscribe_and_come_back(url: str) -> bytes:
    client = pulsar.Client(url, operation_timeout_seconds=5, logger=QUIET)
    try:
        consumer = client.subscribe("u-topic", "u-sub", consumer_type=pulsar.ConsumerType.Shared,
                                    receiver_queue_size=1)
        producer = client.create_producer("u-topic", batching_enabled=False)
        for i in range(3):
            producer.send(f"old-{i}".encode())
        consumer.unsubscribe()
        consumer = client.subscribe("u-topic", "u-sub", consumer_type=pulsar.ConsumerType.Shared)
        producer.send(b"new")
        data: bytes = consumer.receive(5000).data()
        return data
    finally:
        client.close()


async def test_the_official_clients_unsubscribe_deletes_the_subscription(
    stack: tuple[PulsarFrontEnd, Engine],
) -> None:
    front, _ = stack
    url = f"pulsar://127.0.0.1:{front.port}"
    assert await asyncio.to_thread(unsubscribe_and_come_back, url) == b"new"


async def test_unsubscribe_with_other_consumers_is_refused(
    stack: tuple[PulsarFrontEnd, Engine],
) -> None:
    front, _ = stack
    one = await subscribed(front.port, 1, SHARED)
    two = await subscribed(front.port, 2, SHARED)
    await publish(front.port, 2)
    one.send(unsubscribe(1, 5))
    error = (await one.expect(Cmd.ERROR)).command.error
    assert (error.request_id, error.error) == (5, pb.ConsumerBusy), error
    assert "other consumers" in error.message
    # Nothing changed: the consumer still receives.
    one.send(raw.flow(1, 2))
    assert [m.message_id.entryId for m in await messages(one, 2)]
    close = Cmd(type=Cmd.CLOSE_CONSUMER)
    close.close_consumer.consumer_id, close.close_consumer.request_id = 2, 7
    two.send(close)
    await two.expect(Cmd.SUCCESS)
    one.send(unsubscribe(1, 6))
    assert (await one.expect(Cmd.SUCCESS)).command.success.request_id == 6
    await one.close()
    await two.close()
