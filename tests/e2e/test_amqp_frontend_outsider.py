"""What an outsider's client sends that RabbitMQ 3.x refuses, refused by the gateway the same
way (the reply code and text RabbitMQ gives, naming the field), with unmodified pika:

* a message whose `delivery_mode` is neither 1 nor 2 (RabbitMQ: 406 `invalid message:
  {delivery_mode_unknown,N}`); before, the gateway stored it and its consumers got it without
  a delivery mode;
* a channel number beyond channel_max (RabbitMQ 3.x opens it: channel_max bounds how many
  channels are open, 530 NOT_ALLOWED past it); before, 504 closed the connection;
* a quorum queue that is not durable, or exclusive, auto-delete or server-named (406, RabbitMQ's
  texts and order); before, it was declared as asked;
* a content header of weight other than 0 (505) and a channel.flow-ok the server never asked
  for (503), a method frame with bytes after its fields (501): before, all passed unseen."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TypeVar

import aio_pika
import pika
import pika.exceptions
import pytest
from pamqp import commands

from adapters.amqp.frontend.framing import reply
from tests.amqp_front import AmqpGateway, RawAmqp, amqp_gateway, raw_frame, unique

T = TypeVar("T")


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[AmqpGateway]:
    async with amqp_gateway(tmp_path / "data") as gateway:
        yield gateway


async def session(gw: AmqpGateway, fn: Callable[[pika.BlockingConnection], T]) -> T:
    """Run `fn` with a fresh pika blocking connection, in a thread (pika blocks)."""
    def run() -> T:
        connection = pika.BlockingConnection(pika.URLParameters(gw.url))
        try:
            return fn(connection)
        finally:
            if connection.is_open:
                connection.close()
    return await asyncio.to_thread(run)


@pytest.mark.parametrize("mode", [0, 3, 9, 255])
async def test_delivery_mode_other_than_1_or_2_is_refused(gw: AmqpGateway, mode: int) -> None:
    queue = unique()

    def publish(connection: pika.BlockingConnection) -> tuple[str, int | None]:
        channel = connection.channel()
        channel.queue_declare(queue, auto_delete=True)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            channel.basic_publish("", queue, b"x", pika.BasicProperties(delivery_mode=mode))
            channel.queue_declare(queue, passive=True)  # a round trip: the close comes first
        check = connection.channel()
        _, _, body = check.basic_get(queue, auto_ack=True)
        assert body is None  # nothing stored
        return f"{closed.value.reply_code} {closed.value.reply_text}", None

    answer, _ = await session(gw, publish)
    assert answer.startswith(f"406 PRECONDITION_FAILED - invalid message: "
                             f"{{delivery_mode_unknown,{mode}}}")
    assert "delivery_mode" in answer


async def test_delivery_modes_1_and_2_are_kept(gw: AmqpGateway) -> None:
    queue = unique()

    def round_trip(connection: pika.BlockingConnection) -> list[int | None]:
        channel = connection.channel()
        channel.queue_declare(queue, auto_delete=True)
        channel.confirm_delivery()
        for mode in (1, 2):
            channel.basic_publish("", queue, b"x", pika.BasicProperties(delivery_mode=mode))
        got = []
        for _ in range(2):
            _, properties, _ = channel.basic_get(queue, auto_ack=True)
            got.append(properties.delivery_mode)
        return got

    assert await session(gw, round_trip) == [1, 2]


async def test_a_channel_number_beyond_channel_max_opens_as_on_rabbitmq(gw: AmqpGateway) -> None:
    """RabbitMQ 3.x opens any channel number (channel_max bounds how many are open: the fuzz
    suite's test_every_channel_up_to_channel_max_and_not_one_more); the gateway closed the
    connection with 504 for a number past 2047, which aio-pika lets an application choose."""
    connection = await aio_pika.connect(gw.url)
    try:
        channel = await connection.channel(channel_number=3000)
        queue = await channel.declare_queue(unique(), auto_delete=True)
        await channel.default_exchange.publish(aio_pika.Message(b"far"), routing_key=queue.name)
        got = await queue.get(timeout=5)
        assert got.body == b"far"
        await got.ack()
    finally:
        await connection.close()


@pytest.mark.parametrize(("flags", "refused"), [
    ({"durable": False}, "invalid property 'non-durable' for queue '{q}' in vhost '/'"),
    ({"durable": True, "exclusive": True},
     "invalid property 'exclusive-owner' for queue '{q}' in vhost '/'"),
    ({"durable": True, "auto_delete": True},
     "invalid property 'auto-delete' for queue '{q}' in vhost '/'"),
    ({"durable": False, "exclusive": True, "auto_delete": True},  # RabbitMQ's order
     "invalid property 'auto-delete' for queue '{q}' in vhost '/'"),
    ({"durable": True, "server_named": True},
     "Cannot declare a server-named queue for type rabbit_quorum_queue"),
])
async def test_a_quorum_queue_must_be_durable_and_named(gw: AmqpGateway, flags: dict[str, bool],
                                                        refused: str) -> None:
    """RabbitMQ refuses a quorum queue that is not durable, exclusive, auto-delete or
    server-named (406, these texts); the gateway declared it as asked, a quorum queue in name
    only."""
    name = "" if flags.pop("server_named", False) else unique()
    connection = await aio_pika.connect(gw.url)
    try:
        channel = await connection.channel()
        with pytest.raises(aio_pika.exceptions.ChannelPreconditionFailed) as closed:
            await channel.declare_queue(name, arguments={"x-queue-type": "quorum"}, **flags)
        assert closed.value.args[0] == "PRECONDITION_FAILED - " + refused.format(q=name)
        channel = await connection.channel()
        with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity):
            await channel.declare_queue(name or "x", passive=True)  # nothing declared
        channel = await connection.channel()
        fine = await channel.declare_queue(unique(), durable=True,
                                           arguments={"x-queue-type": "quorum"})
        await fine.delete()
    finally:
        await connection.close()


async def test_a_content_header_of_weight_other_than_0_is_refused(gw: AmqpGateway) -> None:
    """The 0-9-1 content header's weight must be 0: RabbitMQ closes the connection with 505 as
    for a frame out of place; the gateway took the message."""
    raw = await RawAmqp.connect(gw.port)
    try:
        queue = unique()
        raw.send(1, commands.Queue.Declare(queue=queue, auto_delete=True))
        await raw.expect(commands.Queue.DeclareOk)
        raw.send(1, reply(commands.Basic.Publish, exchange="", routing_key=queue))
        raw.send_raw(raw_frame(2, 1, struct.pack(">HHQH", 60, 5, 1, 0)) + raw_frame(3, 1, b"x"))
        channel, close = await raw.closed_with()
        assert (channel, close.reply_code, close.class_id, close.method_id) == (0, 505, 60, 40)
        assert close.reply_text == ("UNEXPECTED_FRAME - expected content header for class 60, "
                                    "got non content header frame instead")
    finally:
        raw.close()


async def test_an_unsolicited_channel_flow_ok_is_refused(gw: AmqpGateway) -> None:
    """Neither RabbitMQ nor the gateway sends channel.flow: a client's flow-ok answers nothing
    (RabbitMQ: 503 `unimplemented method`); the gateway let it pass unseen."""
    raw = await RawAmqp.connect(gw.port)
    try:
        raw.send(1, commands.Channel.FlowOk(active=True))
        channel, close = await raw.closed_with()
        assert (channel, close.reply_code, close.class_id, close.method_id) == (0, 503, 20, 21)
        assert close.reply_text == "COMMAND_INVALID - unimplemented method"
    finally:
        raw.close()


async def test_a_method_frame_with_bytes_after_its_fields_is_refused(gw: AmqpGateway) -> None:
    """RabbitMQ closes the connection with 501 FRAME_ERROR for a method frame longer than its
    fields; the gateway carried the method out and ignored the rest."""
    raw = await RawAmqp.connect(gw.port)
    try:
        qos = struct.pack(">HHIHB", 60, 10, 0, 5, 0)
        raw.send_raw(raw_frame(1, 1, qos + b"junk"))
        channel, close = await raw.closed_with()
        assert (channel, close.reply_code, close.class_id, close.method_id) == (0, 501, 60, 10)
        assert close.reply_text == ("FRAME_ERROR - cannot decode Basic.Qos: 4 bytes after its "
                                    "last field")
    finally:
        raw.close()
