"""SEEK frames and message ids attacked at the Pulsar front end's edge: an unknown consumer,
neither or both targets, ids the gateway never gave, times out of range, a cumulative ack far
ahead, Key_Shared sticky ranges. Each gets an ERROR naming what is wrong (or harms only its
sender) and the connection goes on serving; a good seek afterwards works."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import tests.pulsar_raw as raw
from adapters.pulsar.frontend import PulsarFrontEnd
from adapters.pulsar.wire import wire_pb2 as pb
from tests.pulsar_raw import Cmd, RawClient


@pytest.fixture
async def front(tmp_path: Path) -> AsyncIterator[PulsarFrontEnd]:
    async with raw.front_end(tmp_path) as (instance, _):
        yield instance


def seek(request_id: int, consumer_id: int = 1, **fields: object) -> pb.BaseCommand:
    cmd = Cmd(type=Cmd.SEEK)
    cmd.seek.consumer_id = consumer_id
    cmd.seek.request_id = request_id
    for key, value in fields.items():
        if key == "message_id":
            cmd.seek.message_id.CopyFrom(value)  # type: ignore[arg-type]
        else:
            setattr(cmd.seek, key, value)
    return cmd


async def refused(client: RawClient, request_id: int, code: int, text: str) -> None:
    reply = (await client.expect(Cmd.ERROR)).command.error
    assert (reply.request_id, reply.error) == (request_id, code), reply
    assert text in reply.message


async def test_bad_seeks_are_refused_and_the_connection_serves_on(front: PulsarFrontEnd) -> None:
    client = await RawClient.open(front.port)
    client.send(raw.producer(1, 1, "seeker"))
    await client.expect(Cmd.PRODUCER_SUCCESS)
    for seq in range(3):
        client.send(raw.send(1, seq), raw.meta("seeker", seq), f"m{seq}".encode())
    receipts = [(await client.expect(Cmd.SEND_RECEIPT)).command.send_receipt for _ in range(3)]
    client.send(raw.subscribe(1, 2, pb.CommandSubscribe.Exclusive))
    await client.expect(Cmd.SUCCESS)

    client.send(seek(10, consumer_id=99, message_publish_time=0))
    await refused(client, 10, pb.ConsumerNotFound, "unknown consumer")
    client.send(seek(11))
    await refused(client, 11, pb.NotAllowedError, "seek")
    client.send(seek(12, message_publish_time=0, message_id=receipts[0].message_id))
    await refused(client, 12, pb.NotAllowedError, "seek")
    client.send(seek(13, message_publish_time=2**64 - 1))
    await refused(client, 13, pb.NotAllowedError, "seek.message_publish_time")
    client.send(seek(14, message_id=pb.MessageIdData(ledgerId=42, entryId=7)))
    await refused(client, 14, pb.NotAllowedError, "seek.message_id")
    client.send(seek(15, message_id=pb.MessageIdData(ledgerId=2**62, entryId=2**64 - 1,
                                                     batch_index=5)))
    await refused(client, 15, pb.NotAllowedError, "seek.message_id")
    # An id of the right shape that no message has (its publish time is to come): refused
    # (not TopicNotFound), and the consumer stays open (the next frame is the refusal, not a
    # CLOSE_CONSUMER).
    client.send(seek(16, message_id=pb.MessageIdData(ledgerId=2**62, entryId=7)))
    await refused(client, 16, pb.NotAllowedError, "seek.message_id")

    # A good seek: the consumer is closed from the server's side, then the seek succeeds.
    client.send(seek(17, message_id=receipts[1].message_id))
    closed = (await client.expect(Cmd.CLOSE_CONSUMER)).command.close_consumer
    assert closed.consumer_id == 1
    assert (await client.expect(Cmd.SUCCESS)).command.success.request_id == 17
    client.send(raw.subscribe(1, 18, pb.CommandSubscribe.Exclusive))
    await client.expect(Cmd.SUCCESS)
    client.send(raw.flow(1, 10))
    got = [(await client.expect(Cmd.MESSAGE)).payload for _ in range(2)]
    assert got == [b"m1", b"m2"]
    await client.close()


async def test_a_made_up_cumulative_ack_does_not_swallow_later_messages(
    front: PulsarFrontEnd,
) -> None:
    client = await RawClient.open(front.port)
    client.send(raw.producer(1, 1, "acker"))
    await client.expect(Cmd.PRODUCER_SUCCESS)
    client.send(raw.subscribe(1, 2, pb.CommandSubscribe.Exclusive))
    await client.expect(Cmd.SUCCESS)
    client.send(raw.flow(1, 10))
    client.send(raw.send(1, 0), raw.meta("acker", 0), b"first")
    await client.expect(Cmd.SEND_RECEIPT)
    assert (await client.expect(Cmd.MESSAGE)).payload == b"first"
    ack = Cmd(type=Cmd.ACK)
    ack.ack.consumer_id = 1
    ack.ack.ack_type = pb.CommandAck.Cumulative
    ack.ack.message_id.add(ledgerId=2**64 - 2, entryId=2**64 - 2)
    client.send(ack)
    client.send(raw.send(1, 1), raw.meta("acker", 1), b"second")
    await client.expect(Cmd.SEND_RECEIPT)
    assert (await client.expect(Cmd.MESSAGE)).payload == b"second"
    await client.close()


async def test_key_shared_sticky_ranges_are_refused(front: PulsarFrontEnd) -> None:
    client = await RawClient.open(front.port)
    cmd = raw.subscribe(1, 1, pb.CommandSubscribe.Key_Shared)
    cmd.subscribe.keySharedMeta.keySharedMode = pb.STICKY
    cmd.subscribe.keySharedMeta.hashRanges.add(start=0, end=100)
    client.send(cmd)
    await refused(client, 1, pb.NotAllowedError, "keySharedMode")
    client.send(raw.subscribe(1, 2, pb.CommandSubscribe.Key_Shared))  # AUTO_SPLIT is served
    await client.expect(Cmd.SUCCESS)
    await client.close()


async def test_bad_reader_starts_and_initial_subscriptions_are_refused(
    front: PulsarFrontEnd,
) -> None:
    client = await RawClient.open(front.port)
    reader = raw.subscribe(1, 1, pb.CommandSubscribe.Exclusive)
    reader.subscribe.durable = False
    reader.subscribe.start_message_id.ledgerId = 42  # not an id the gateway gives
    reader.subscribe.start_message_id.entryId = 7
    client.send(reader)
    await refused(client, 1, pb.NotAllowedError, "start_message_id")
    producer = raw.producer(1, 2, "p")
    producer.producer.initial_subscription_name = "x" * 300
    client.send(producer)
    await refused(client, 2, pb.NotAllowedError, "initial_subscription_name")
    client.send(raw.producer(1, 3, "p"))
    await client.expect(Cmd.PRODUCER_SUCCESS)
    await client.close()
