"""Commands a broker refuses that the front end must not accept silently: a second CONNECT, an
initialPosition the enum does not know, a live producer or consumer id reused for something
else, GET_LAST_MESSAGE_ID for an unknown consumer. Each gets an ERROR; a client's retry of the
same PRODUCER or SUBSCRIBE is still answered with success."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import tests.pulsar_raw as raw
from adapters.pulsar.frontend import PulsarFrontEnd
from adapters.pulsar.wire import wire_pb2 as pb
from tests.pulsar_raw import Cmd, RawClient

EXCLUSIVE = pb.CommandSubscribe.Exclusive
NO_REQUEST = 2**64 - 1
"""The request id of an ERROR that answers no request."""


@pytest.fixture
async def front(tmp_path: Path) -> AsyncIterator[PulsarFrontEnd]:
    async with raw.front_end(tmp_path) as (instance, _):
        yield instance


async def error(client: RawClient, request_id: int, code: int, *texts: str) -> str:
    reply = (await client.expect(Cmd.ERROR)).command.error
    assert (reply.request_id, reply.error) == (request_id, code), reply
    for text in texts:
        assert text in reply.message, reply.message
    return reply.message


async def test_a_second_connect_is_refused_and_the_connection_closed(
    front: PulsarFrontEnd,
) -> None:
    client = await RawClient.open(front.port)
    again = Cmd(type=Cmd.CONNECT)
    again.connect.client_version = "again"
    again.connect.protocol_version = 19
    client.send(again)
    await error(client, NO_REQUEST, pb.NotAllowedError, "already connected")
    assert await client.closed()


async def test_an_unknown_initial_position_is_refused(front: PulsarFrontEnd) -> None:
    client = await RawClient.open(front.port)
    sub = raw.subscribe(1, 1, EXCLUSIVE).subscribe
    sub.ClearField("initialPosition")
    body = sub.SerializeToString() + b"\x68\x05"  # field 13 (initialPosition) = 5
    command = pb.BaseCommand(type=Cmd.SUBSCRIBE).SerializeToString()
    command += b"\x22" + bytes([len(body)]) + body  # field 4 (subscribe)
    client.writer.write(raw.command_frame(command))
    await error(client, 1, pb.NotAllowedError, "subscribe.initialPosition", "Latest",
                "Earliest")
    client.send(raw.subscribe(1, 2, EXCLUSIVE))  # the connection serves on
    await client.expect(Cmd.SUCCESS)
    await client.close()


def producer(producer_id: int, request_id: int, topic: str, name: str = "") -> pb.BaseCommand:
    cmd = raw.producer(producer_id, request_id, name)
    cmd.producer.topic = topic
    return cmd


async def test_a_live_producer_id_is_not_reused_for_another_producer(
    front: PulsarFrontEnd,
) -> None:
    client = await RawClient.open(front.port)
    client.send(producer(1, 1, "topic-a", "pa"))
    await client.expect(Cmd.PRODUCER_SUCCESS)
    client.send(producer(1, 2, "topic-b"))
    await error(client, 2, pb.ProducerBusy, "producer id 1", "'topic-a'")
    client.send(producer(1, 3, "topic-a", "other-name"))
    await error(client, 3, pb.ProducerBusy, "producer id 1")
    # The same producer again (a client's retry) is answered as before.
    for request_id, name in ((4, "pa"), (5, "")):
        client.send(producer(1, request_id, "persistent://public/default/topic-a", name))
        reply = (await client.expect(Cmd.PRODUCER_SUCCESS)).command.producer_success
        assert (reply.request_id, reply.producer_name) == (request_id, "pa")
    # Its sends still go to topic-a.
    client.send(raw.send(1, 0), raw.meta("pa", 0), b"for-a")
    await client.expect(Cmd.SEND_RECEIPT)
    reader = await RawClient.open(front.port)
    sub = raw.subscribe(1, 1, EXCLUSIVE)
    sub.subscribe.topic = "topic-a"
    reader.send(sub)
    await reader.expect(Cmd.SUCCESS)
    reader.send(raw.flow(1, 1))
    assert (await reader.expect(Cmd.MESSAGE)).payload == b"for-a"
    await reader.close()
    await client.close()


async def test_a_live_consumer_id_is_not_reused_for_another_subscription(
    front: PulsarFrontEnd,
) -> None:
    client = await RawClient.open(front.port)
    client.send(raw.subscribe(1, 1, EXCLUSIVE))
    await client.expect(Cmd.SUCCESS)
    other_topic = raw.subscribe(1, 2, EXCLUSIVE)
    other_topic.subscribe.topic = "elsewhere"
    client.send(other_topic)
    await error(client, 2, pb.ConsumerBusy, "consumer id 1", "'s'", "'raw'")
    other_sub = raw.subscribe(1, 3, EXCLUSIVE)
    other_sub.subscribe.subscription = "t"
    client.send(other_sub)
    await error(client, 3, pb.ConsumerBusy, "consumer id 1")
    client.send(raw.subscribe(1, 4, EXCLUSIVE))  # the same again: a retry
    assert (await client.expect(Cmd.SUCCESS)).command.success.request_id == 4
    await client.close()


async def test_last_message_id_of_an_unknown_consumer_is_refused(front: PulsarFrontEnd) -> None:
    client = await RawClient.open(front.port)
    cmd = Cmd(type=Cmd.GET_LAST_MESSAGE_ID)
    cmd.getLastMessageId.consumer_id = 999
    cmd.getLastMessageId.request_id = 5
    client.send(cmd)
    await error(client, 5, pb.ConsumerNotFound, "999")
    await client.close()
