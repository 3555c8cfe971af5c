"""The trace context on the broker back ends: a message's retry copies and its dead letter keep
it, a native client reading the dead letter from the broker itself finds it (an AMQP header, a
Pulsar property), and the gateway's spans of the message form one trace."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import uuid
from pathlib import Path

import pulsar
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amqp_node import URL, delete_queues, plain_connection, unique

from adapters.amqp.backend import RabbitMQBackend
from adapters.amqp.queues import queue_name
from adapters.pulsar.backend import PulsarBackend
from gateway.client import GatewayClient
from gateway.server.app import running_gateway
from gateway.tracing.context import parse
from gateway.tracing.spans import Tracing
from gateway.v1 import gateway_pb2

pytestmark = pytest.mark.slow
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE}-00f067aa0ba902b7-01"


async def test_retry_and_dead_letter_copies_keep_the_trace_on_rabbitmq(tmp_path: Path) -> None:
    """The shared RabbitMQ on 127.0.0.1:5672: retries wait in RabbitMQ's delay queues."""
    exporter = InMemorySpanExporter()
    tracing = Tracing(processor=SimpleSpanProcessor(exporter))
    topic, group = unique("gw.trace"), unique("grp")
    retry, dead = f"%RETRY%{group}", f"%DLQ%{group}"
    async with plain_connection() as plain:
        try:
            async with running_gateway(tmp_path / "data", time_scale=0.01,
                                       backend=RabbitMQBackend(URL),
                                       observers=[tracing]) as app, \
                    GatewayClient(f"127.0.0.1:{app.grpc_port}") as client:
                await client.stub.Publish(
                    gateway_pb2.PublishRequest(topic=topic,
                                               messages=[gateway_pb2.Message(body=b"poison")]),
                    metadata=(("traceparent", PARENT),))
                async with client.consume(topic, group, policy="rocketmq",
                                          options={"max_retries": "2"}) as stream:
                    for attempt in (1, 2, 3):
                        msg = await stream.next(30)
                        assert msg is not None and msg.attempt == attempt
                        assert parse(msg.properties["traceparent"]).trace_id == TRACE  # type: ignore[union-attr]
                        assert (await msg.fail()).ok
            channel = await plain.channel()
            queue = await channel.declare_queue(queue_name(dead), passive=True)
            stored = await queue.get(timeout=10)
            assert parse(stored.headers["traceparent"]).trace_id == TRACE  # type: ignore[union-attr, arg-type]
            await stored.ack()
            await channel.close()
        finally:
            await delete_queues(plain, *(queue_name(n) for n in (topic, retry, dead)))
            tracing.close()
    spans = exporter.get_finished_spans()
    assert {f"{s.context.trace_id:032x}" for s in spans} == {TRACE}
    assert sorted(s.name.split(" ")[0] for s in spans) == [
        "dead-lettered", "deliver", "deliver", "deliver", "publish", "retry", "retry",
        "settle", "settle", "settle"]


async def test_retry_and_dead_letter_copies_keep_the_trace_on_pulsar(tmp_path: Path) -> None:
    """The Pulsar back end (the broker: a second gateway's Pulsar port, or
    `$PULSAR_SERVICE_URL`): retry letters and the dead letter keep the trace; a native Pulsar
    consumer of the dead-letter topic finds it as a property."""
    exporter = InMemorySpanExporter()
    tracing = Tracing(processor=SimpleSpanProcessor(exporter))
    topic, group = f"trace-{uuid.uuid4().hex[:8]}", "sub"
    async with contextlib.AsyncExitStack() as stack:
        url = os.environ.get("PULSAR_SERVICE_URL", "")
        if not url:
            broker = await stack.enter_async_context(
                running_gateway(tmp_path / "broker", pulsar_listen="127.0.0.1:0"))
            url = f"pulsar://127.0.0.1:{broker.front_ends['pulsar'].port}"  # type: ignore[attr-defined]
        app = await stack.enter_async_context(running_gateway(
            tmp_path / "data", time_scale=0.001, backend=PulsarBackend(url, send_timeout_ms=5000),
            observers=[tracing]))
        client = await stack.enter_async_context(GatewayClient(f"127.0.0.1:{app.grpc_port}"))
        await client.stub.Publish(
            gateway_pb2.PublishRequest(topic=topic, messages=[gateway_pb2.Message(body=b"x")]),
            metadata=(("traceparent", PARENT),))
        async with client.consume(topic, group, policy="pulsar",
                                  options={"max_retries": "2"}) as stream:
            for attempt in (1, 2, 3):
                msg = await stream.next(30)
                assert msg is not None and msg.attempt == attempt
                assert parse(msg.properties["traceparent"]).trace_id == TRACE  # type: ignore[union-attr]
                assert (await msg.fail()).ok
        native = pulsar.Client(url, operation_timeout_seconds=10,
                               logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        try:
            consumer = await asyncio.to_thread(
                native.subscribe, f"persistent://public/default/{topic}-{group}-DLQ", "audit",
                consumer_type=pulsar.ConsumerType.Shared,
                initial_position=pulsar.InitialPosition.Earliest)
            dead = await asyncio.to_thread(consumer.receive, 30_000)
            assert parse(dead.properties()["traceparent"]).trace_id == TRACE  # type: ignore[union-attr]
        finally:
            await asyncio.to_thread(native.close)
    tracing.close()
    spans = exporter.get_finished_spans()
    assert {f"{s.context.trace_id:032x}" for s in spans} == {TRACE}
    assert sorted(s.name.split(" ")[0] for s in spans) == [
        "dead-lettered", "deliver", "deliver", "deliver", "publish", "retry", "retry",
        "settle", "settle", "settle"]
