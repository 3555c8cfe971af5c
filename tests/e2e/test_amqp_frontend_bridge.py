"""AMQP clients share topics with the gateway's other clients: a RocketMQ SDK producer to an
aio-pika consumer, an aio-pika publisher to a pulsar-client consumer, and the gRPC API both
ways; bodies and mapped properties intact (README, "AMQP clients")."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
import pulsar
import pytest
from rocketmq import ClientConfiguration, Credentials, Message, Producer

from gateway.client import GatewayClient
from tests.amqp_front import AmqpGateway, amqp_gateway, free_port, unique

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[AmqpGateway]:
    async with amqp_gateway(tmp_path / "data",
                            pulsar_listen=f"127.0.0.1:{free_port()}") as gateway:
        yield gateway


def send_with_rocketmq(endpoint: str, topic: str) -> None:
    producer = Producer(ClientConfiguration(endpoint, Credentials("", "")), (topic,))
    producer.startup()
    try:
        message = Message()
        message.topic = topic
        message.body = b"from-rocketmq"
        message.tag = "TagA"
        message.keys = "order-7"
        message.add_property("order", "7")
        producer.send(message)
    finally:
        producer.shutdown()


async def test_rocketmq_sdk_producer_to_an_aio_pika_consumer(gw: AmqpGateway) -> None:
    assert gw.app is not None
    topic = unique("rmq")
    await asyncio.to_thread(send_with_rocketmq, f"127.0.0.1:{gw.app.grpc_port}", topic)
    connection = await aio_pika.connect(gw.url)
    try:
        channel = await connection.channel()
        queue = await channel.declare_queue(topic, durable=True)
        message = await queue.get(timeout=5)
        assert message.body == b"from-rocketmq"
        assert message.headers["order"] == "7" and message.headers["KEYS"] == "order-7"
        assert message.headers["TAGS"] == "TagA"
        assert message.routing_key == topic and not message.redelivered
        await message.ack()
    finally:
        await connection.close()


def receive_with_pulsar(url: str, topic: str, ready: asyncio.Event,
                        loop: asyncio.AbstractEventLoop) -> pulsar.Message:
    client = pulsar.Client(url, logger=QUIET)
    try:
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        loop.call_soon_threadsafe(ready.set)
        message = consumer.receive(timeout_millis=10_000)
        consumer.acknowledge(message)
        return message
    finally:
        client.close()


async def test_aio_pika_publisher_to_a_pulsar_client_consumer(gw: AmqpGateway) -> None:
    assert gw.app is not None
    topic = unique("pls")
    url = f"pulsar://127.0.0.1:{gw.app.front_ends['pulsar'].port}"  # type: ignore[attr-defined]
    ready = asyncio.Event()
    receiving = asyncio.ensure_future(asyncio.to_thread(
        receive_with_pulsar, url, topic, ready, asyncio.get_running_loop()))
    await asyncio.wait_for(ready.wait(), 10)
    connection = await aio_pika.connect(gw.url)
    try:
        channel = await connection.channel()
        await channel.default_exchange.publish(aio_pika.Message(
            b"from-amqp", content_type="application/json", content_encoding="utf-8",
            correlation_id="c-1", reply_to="replies", expiration=60, message_id="m-1",
            priority=5, timestamp=1_700_000_000, type="order.created", app_id="shop",
            user_id="guest", delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            headers={"order": "7", "n": 42, "traceparent":
                     "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}),
            routing_key=topic)
    finally:
        await connection.close()
    message = await asyncio.wait_for(receiving, 15)
    assert message.data() == b"from-amqp"
    props = message.properties()
    assert props["order"] == "7"
    assert props["n"] == "42"  # a header that is not a string: as text
    assert {k: v for k, v in props.items() if k.startswith("amqp.") and k != "amqp.typed-headers"
            } == {
        "amqp.content-type": "application/json", "amqp.content-encoding": "utf-8",
        "amqp.correlation-id": "c-1", "amqp.reply-to": "replies", "amqp.expiration": "60000",
        "amqp.message-id": "m-1", "amqp.priority": "5", "amqp.timestamp": "1700000000",
        "amqp.type": "order.created", "amqp.app-id": "shop", "amqp.user-id": "guest",
        "amqp.delivery-mode": "2", "amqp.exchange": "", "amqp.routing-key": topic}
    assert props["traceparent"].startswith("00-4bf92f35")


async def test_grpc_and_amqp_both_ways(gw: AmqpGateway) -> None:
    assert gw.app is not None
    to_amqp, to_grpc = unique("g2a"), unique("a2g")
    async with GatewayClient(f"127.0.0.1:{gw.app.grpc_port}") as client:
        await client.publish(to_amqp, [b"from-grpc"], properties={"source": "grpc"})
        connection = await aio_pika.connect(gw.url)
        try:
            channel = await connection.channel()
            queue = await channel.declare_queue(to_amqp, passive=True)  # the topic exists
            message = await queue.get(timeout=5)
            assert (message.body, message.headers) == (b"from-grpc", {"source": "grpc"})
            await message.ack()
            async with client.consume(to_grpc, "g", policy="rabbitmq") as stream:
                await asyncio.sleep(0.1)  # subscribed: the topic now has a group
                await channel.default_exchange.publish(
                    aio_pika.Message(b"from-amqp", headers={"n": 1}), routing_key=to_grpc)
                async for delivery in stream:
                    assert delivery.body == b"from-amqp"
                    assert delivery.properties["n"] == "1"
                    await delivery.ack()
                    break
        finally:
            await connection.close()


async def test_a_topic_made_over_grpc_is_a_queue_to_amqp_at_once(gw: AmqpGateway) -> None:
    """A topic another front end just created routes an AMQP publish through the default
    exchange, declares passively and answers basic.get at once: a confirmed publish to it is
    stored, not dropped as unroutable (the front end once waited up to a second to see it)."""
    assert gw.app is not None
    connection = await aio_pika.connect_robust(gw.url)
    try:
        channel = await connection.channel(on_return_raises=True)
        async with GatewayClient(f"127.0.0.1:{gw.app.grpc_port}") as client:
            for _ in range(5):
                # A name nobody has: the front end asks the store which topics exist.
                await channel.default_exchange.publish(aio_pika.Message(b"x"),
                                                       routing_key=unique("nobody"),
                                                       mandatory=False)
                topic = unique("made")
                await client.publish(topic, [b"from-grpc"])
                await channel.default_exchange.publish(aio_pika.Message(b"from-amqp"),
                                                       routing_key=topic, mandatory=True)
                queue = await channel.declare_queue(topic, passive=True)
                assert (await queue.declare()).message_count in (None, 2)
                got = [await queue.get(timeout=5), await queue.get(timeout=5)]
                assert sorted(m.body for m in got) == [b"from-amqp", b"from-grpc"]
                for m in got:
                    await m.ack()
    finally:
        await connection.close()
