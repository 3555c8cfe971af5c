"""Traces across products and retries, on a real gateway: a trace started by a gRPC publisher
reaches a RocketMQ SDK consumer, a pulsar-client consumer, an aio-pika consumer and a gRPC
consumer of the same message, each in its own form; the spans of a message retried twice and
then dead-lettered form one trace (the SDK's in-memory exporter)."""

from __future__ import annotations

import asyncio
import queue
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aio_pika
import grpc
import pulsar
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    MessageListener,
    PushConsumer,
    SimpleConsumer,
)
from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc
from rocketmq.v5.model import message as sdk_message

from gateway.client import GatewayClient
from gateway.server.app import GatewayApp, running_gateway
from gateway.tracing.context import parse
from gateway.tracing.spans import Tracing, header
from gateway.v1 import gateway_pb2
from tests.amqp_front import free_port
from tests.e2e.sdk_cleanup import close_rocketmq_clients

pytestmark = pytest.mark.slow

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE}-00f067aa0ba902b7-01"
WAIT_S = 30.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
async def app(tmp_path: Path, exporter: InMemorySpanExporter,
              request: pytest.FixtureRequest) -> AsyncIterator[GatewayApp]:
    tracing = Tracing(processor=SimpleSpanProcessor(exporter))
    observers = [tracing] if getattr(request, "param", True) else []
    async with running_gateway(tmp_path / "data", time_scale=0.001, observers=observers,
                               pulsar_listen="127.0.0.1:0",
                               amqp_listen=f"127.0.0.1:{free_port()}") as running:
        yield running
    tracing.close()


@pytest.fixture
def seen_by_sdk(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[bytes, Any]]:
    """What the RocketMQ SDK decodes, by body: the wire message its consumer turns into a
    `Message` (the SDK's `Message` does not expose `trace_context`; it stays unmodified)."""
    seen: dict[bytes, Any] = {}
    decode = sdk_message.Message.fromProtobuf

    def spy(self: Any, message: Any) -> Any:
        seen[bytes(message.body)] = message
        return decode(self, message)

    monkeypatch.setattr(sdk_message.Message, "fromProtobuf", spy)
    yield seen


def receive_with_sdk(endpoint: str, topic: str, group: str) -> Any:
    consumer = SimpleConsumer(ClientConfiguration(endpoint, Credentials("", "")), group,
                              {topic: FilterExpression("*")}, await_duration=2)
    consumer.startup()
    try:
        for _ in range(int(WAIT_S / 2)):
            got = consumer.receive(1, 30)
            if got:  # not acked: at the test's time scale the invisible time is already over
                return got[0]
        raise AssertionError("the RocketMQ SDK consumer received nothing")
    finally:
        consumer.shutdown()


def receive_with_pulsar(port: int, topic: str, group: str) -> Any:
    client = pulsar.Client(f"pulsar://127.0.0.1:{port}", logger=QUIET)
    try:
        consumer = client.subscribe(f"persistent://public/default/{topic}", group,
                                    consumer_type=pulsar.ConsumerType.Shared,
                                    initial_position=pulsar.InitialPosition.Earliest)
        message = consumer.receive(int(WAIT_S * 1000))
        consumer.acknowledge(message)
        return message
    finally:
        client.close()


async def receive_with_aio_pika(port: int, topic: str) -> aio_pika.abc.AbstractIncomingMessage:
    connection = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{port}/")
    try:
        channel = await connection.channel()
        queue = await channel.declare_queue(topic, passive=True)
        for _ in range(int(WAIT_S * 10)):
            message = await queue.get(fail=False)
            if message is not None:
                await message.ack()
                return message
            await asyncio.sleep(0.1)
        raise AssertionError("aio-pika received nothing")
    finally:
        await connection.close()


async def publish_traced(app: GatewayApp, topic: str, body: bytes) -> None:
    """A gRPC publisher whose call carries its trace context as metadata."""
    async with GatewayClient(f"127.0.0.1:{app.grpc_port}") as client:
        await client.stub.Publish(
            gateway_pb2.PublishRequest(topic=topic, messages=[gateway_pb2.Message(body=body)]),
            metadata=(("traceparent", PARENT), ("tracestate", "vendor=1")))


def spans(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


@pytest.mark.parametrize("app", [True, False], indirect=True, ids=["tracing-on", "tracing-off"])
async def test_a_grpc_publisher_trace_reaches_every_kind_of_consumer(
    app: GatewayApp, exporter: InMemorySpanExporter, seen_by_sdk: dict[bytes, Any],
) -> None:
    topic, body = unique("trace"), b"traced-" + uuid.uuid4().hex.encode()
    await publish_traced(app, topic, body)
    endpoint = f"127.0.0.1:{app.grpc_port}"
    pulsar_port = app.front_ends["pulsar"].port  # type: ignore[attr-defined]
    amqp_port = app.front_ends["amqp"].port  # type: ignore[attr-defined]
    sdk_got, pulsar_got, amqp_got = await asyncio.gather(
        asyncio.to_thread(receive_with_sdk, endpoint, topic, "g-rocketmq"),
        asyncio.to_thread(receive_with_pulsar, pulsar_port, topic, "g-pulsar"),
        receive_with_aio_pika(amqp_port, topic))
    async with GatewayClient(endpoint) as client, \
            client.consume(topic, "g-grpc", policy="rocketmq") as stream:
        grpc_got = await stream.next(WAIT_S)
        assert grpc_got is not None
        await grpc_got.ack()

    published = spans(exporter, "publish")
    # With tracing on, consumers continue the trace under the gateway's publish span; with it
    # off, they get the publisher's context as it came.
    expected = header(published[0].context) if published else PARENT
    assert parse(expected).trace_id == TRACE  # type: ignore[union-attr]
    # RocketMQ: the system property trace_context, not a user property.
    wire = seen_by_sdk[body]
    assert wire.system_properties.trace_context == expected
    assert "traceparent" not in sdk_got.properties
    assert sdk_got.properties["tracestate"] == "vendor=1"
    # Pulsar: message properties. AMQP: headers. gRPC: properties.
    assert pulsar_got.properties()["traceparent"] == expected
    assert pulsar_got.properties()["tracestate"] == "vendor=1"
    assert amqp_got.headers["traceparent"] == expected
    assert amqp_got.headers["tracestate"] == "vendor=1"
    assert grpc_got.properties["traceparent"] == expected
    if published:
        [publish] = published
        assert publish.parent is not None and publish.parent.span_id == 0x00f067aa0ba902b7
        delivered = spans(exporter, "deliver")
        assert sorted(s.attributes["messaging.consumer.group.name"] for s in delivered) == [
            "g-grpc", "g-pulsar", "g-rocketmq", topic]
        assert {f"{s.context.trace_id:032x}" for s in exporter.get_finished_spans()} == {TRACE}


def send_with_trace_context(endpoint: str, topic: str, body: bytes) -> None:
    """A RocketMQ 5 producer that sets the system property trace_context (the Java SDK's
    form), sent over the raw protocol (the Python SDK sends none)."""
    request = service_pb2.SendMessageRequest()
    message = request.messages.add(body=body)
    message.topic.name = topic
    message.system_properties.message_id = f"M-{uuid.uuid4().hex}"
    message.system_properties.trace_context = PARENT
    with grpc.insecure_channel(endpoint) as channel:
        response = service_pb2_grpc.MessagingServiceStub(channel).SendMessage(request, timeout=30)
    assert response.status.code == 20000, response.status


async def test_rocketmq_trace_context_reaches_grpc_and_pulsar(
    app: GatewayApp, exporter: InMemorySpanExporter,
) -> None:
    topic, body = unique("rmqtrace"), b"from-rocketmq"
    await asyncio.to_thread(send_with_trace_context, f"127.0.0.1:{app.grpc_port}", topic, body)
    pulsar_port = app.front_ends["pulsar"].port  # type: ignore[attr-defined]
    pulsar_got = await asyncio.to_thread(receive_with_pulsar, pulsar_port, topic, "g-pulsar")
    async with GatewayClient(f"127.0.0.1:{app.grpc_port}") as client, \
            client.consume(topic, "g", policy="rocketmq") as stream:
        got = await stream.next(WAIT_S)
        assert got is not None
        await got.ack()
    for traceparent in (got.properties["traceparent"], pulsar_got.properties()["traceparent"]):
        assert parse(traceparent).trace_id == TRACE  # type: ignore[union-attr]


async def test_retried_twice_then_dead_lettered_is_one_trace(
    app: GatewayApp, exporter: InMemorySpanExporter,
) -> None:
    topic, body = unique("retried"), b"fails"
    await publish_traced(app, topic, body)
    async with GatewayClient(f"127.0.0.1:{app.grpc_port}") as client:
        async with client.consume(topic, "g", policy="rocketmq",
                                  options={"max_retries": "2"}) as stream:
            for _ in range(3):
                msg = await stream.next(WAIT_S)
                assert msg is not None and msg.body == body
                assert parse(msg.properties["traceparent"]).trace_id == TRACE  # type: ignore[union-attr]
                assert (await msg.fail()).ok
        # The dead letter keeps the trace: a consumer of %DLQ%g continues it.
        async with client.consume("%DLQ%g", "inspect", policy="rocketmq") as dlq:
            dead = await dlq.next(WAIT_S)
            assert dead is not None
            assert parse(dead.properties["traceparent"]).trace_id == TRACE  # type: ignore[union-attr]
            await dead.ack()
    everything = [s for s in exporter.get_finished_spans()
                  if s.attributes.get("messaging.destination.name") == topic]
    # One trace, the dead letter's consumer (group inspect) included.
    assert {f"{s.context.trace_id:032x}" for s in everything} == {TRACE}
    assert len([s for s in everything
                if s.attributes.get("messaging.consumer.group.name") == "inspect"]) == 2
    ours = [s for s in everything
            if s.attributes.get("messaging.consumer.group.name", "g") == "g"]
    names = sorted(s.name.split(" ")[0] for s in ours)
    assert names == ["dead-lettered", "deliver", "deliver", "deliver", "publish", "retry",
                     "retry", "settle", "settle", "settle"]
    delivers = sorted((s for s in ours if s.name.startswith("deliver")),
                      key=lambda s: s.attributes["retry_gateway.attempt"])
    first = delivers[0].context.span_id
    assert [[link.context.span_id for link in s.links] for s in delivers] == [[], [first], [first]]


@pytest.mark.parametrize("app", [False], indirect=True, ids=["tracing-off"])
async def test_grpc_carriers_message_first_metadata_checked(app: GatewayApp) -> None:
    """A message's own `traceparent` property wins over the call's metadata; metadata that is
    not a valid traceparent is ignored (nothing added, nothing refused)."""
    own = f"00-{'1' * 32}-{'2' * 16}-01"
    topic = unique("carriers")
    async with GatewayClient(f"127.0.0.1:{app.grpc_port}") as client:
        await client.stub.Publish(
            gateway_pb2.PublishRequest(topic=topic, messages=[
                gateway_pb2.Message(body=b"own", properties={"traceparent": own}),
                gateway_pb2.Message(body=b"none")]),
            metadata=(("traceparent", PARENT), ("tracestate", "v=1")))
        for bad in ("garbage", f"ff-{TRACE}-00f067aa0ba902b7-01", "00-" + "a" * 3000):
            await client.stub.Publish(
                gateway_pb2.PublishRequest(topic=topic, messages=[
                    gateway_pb2.Message(body=bad.encode()[:40])]),
                metadata=(("traceparent", bad),))
        async with client.consume(topic, "g", policy="rocketmq") as stream:
            got = {}
            for _ in range(5):
                msg = await stream.next(WAIT_S)
                assert msg is not None
                got[msg.body] = msg.properties
                await msg.ack()
    assert got[b"own"] == {"traceparent": own}
    assert got[b"none"] == {"traceparent": PARENT, "tracestate": "v=1"}
    assert [props for body, props in got.items() if body not in (b"own", b"none")] == [{}] * 3


async def test_a_rocketmq_push_consumer_retried_twice_then_dead_lettered_is_one_trace(
    tmp_path: Path, seen_by_sdk: dict[bytes, Any],
) -> None:
    """A RocketMQ SDK push consumer fails a message a gRPC publisher traced: every delivery
    carries the trace as `trace_context`, and the gateway's spans (3 deliveries, the retries,
    the dead letter) form one trace."""
    from adapters.rocketmq.frontend import FrontendSettings

    exporter = InMemorySpanExporter()
    tracing = Tracing(processor=SimpleSpanProcessor(exporter))
    settings = FrontendSettings(long_polling_timeout_s=2, renew_interval_ms=50,
                                max_delivery_attempts=3)
    topic, group = unique("push"), unique("g")
    attempts: queue.Queue[int] = queue.Queue()

    class Failing(MessageListener):  # type: ignore[misc]
        def consume(self, message: Any) -> Any:
            attempts.put(message.delivery_attempt)
            return ConsumeResult.FAILURE

    async with running_gateway(tmp_path / "data", time_scale=0.001, observers=[tracing],
                               front_end_settings={"rocketmq": settings}) as app:
        config = ClientConfiguration(f"127.0.0.1:{app.grpc_port}", Credentials("", ""))
        consumer = PushConsumer(config, group, Failing(), {topic: FilterExpression("*")})
        await asyncio.to_thread(consumer.startup)
        try:
            body = b"push-" + uuid.uuid4().hex.encode()
            await publish_traced(app, topic, body)
            got = [await asyncio.to_thread(attempts.get, True, WAIT_S) for _ in range(3)]
            assert got == [1, 2, 3]
            for _ in range(300):
                if spans(exporter, "dead-lettered"):
                    break
                await asyncio.sleep(0.1)
        finally:
            await asyncio.to_thread(close_rocketmq_clients, [consumer])
    tracing.close()
    assert parse(seen_by_sdk[body].system_properties.trace_context).trace_id == TRACE  # type: ignore[union-attr]
    ours = [s for s in exporter.get_finished_spans()
            if s.attributes.get("messaging.destination.name") == topic]
    assert {f"{s.context.trace_id:032x}" for s in ours} == {TRACE}
    delivers = sorted(spans(exporter, "deliver"),
                      key=lambda s: s.attributes["retry_gateway.attempt"])
    assert [s.attributes["retry_gateway.attempt"] for s in delivers] == [1, 2, 3]
    first = delivers[0].context.span_id
    assert [[link.context.span_id for link in s.links] for s in delivers] == [[], [first], [first]]
    assert len(spans(exporter, "retry scheduled")) == 2
    assert len(spans(exporter, "dead-lettered")) == 1
