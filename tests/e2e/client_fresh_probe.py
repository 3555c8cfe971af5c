"""Run by the interpreter of a fresh install (tests/e2e/test_client_fresh_install.py): drives a
running `gateway serve --pulsar-listen ...` with the gRPC API (the project's client), the
RocketMQ 5 SDK and pulsar-client, all imported from that install. Prints one line per client
that worked, then `all ok`.

    python client_fresh_probe.py GRPC_HOST:PORT PULSAR_HOST:PORT
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import uuid

WAIT_S = 60.0


async def grpc_api(target: str) -> str:
    from gateway.client import GatewayClient

    topic, group = f"fresh-{uuid.uuid4().hex[:8]}", "probe"
    async with GatewayClient(target) as client:
        (mid,) = await client.publish(topic, [b"over gRPC"])
        async with client.consume(topic, group, policy="rocketmq") as stream:
            msg = await stream.next(WAIT_S)
            assert msg is not None and msg.message_id == mid, msg
            async with msg.process():
                pass
            assert msg.result is not None and msg.result.ok, msg.result
    return "grpc api ok"


def rocketmq_sdk(target: str) -> str:
    from rocketmq import (
        ClientConfiguration,
        Credentials,
        FilterExpression,
        Message,
        Producer,
        SimpleConsumer,
    )

    topic, group = f"fresh-rmq-{uuid.uuid4().hex[:8]}", "probe"
    config = ClientConfiguration(target, Credentials("", ""))
    producer = Producer(config, (topic,))
    producer.startup()
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=2)
    consumer.startup()
    try:
        message = Message()
        message.topic, message.body = topic, b"over the RocketMQ SDK"
        sent = producer.send(message)
        got: list[object] = []
        deadline = time.monotonic() + WAIT_S
        while not got and time.monotonic() < deadline:
            got = consumer.receive(1, 30)
        (received,) = got
        assert received.body == b"over the RocketMQ SDK", received  # type: ignore[attr-defined]
        assert received.message_id == sent.message_id  # type: ignore[attr-defined]
        consumer.ack(received)
    finally:
        consumer.shutdown()
        producer.shutdown()
    return "rocketmq sdk ok"


def pulsar_client(address: str) -> str:
    import pulsar

    # The client's own console logger: handed a Python logger, pulsar-client aborts now and
    # then as the interpreter exits ("terminate called without an active exception", about
    # 1 run in 20: apache/pulsar-client-python#256), after everything worked.
    client = pulsar.Client(f"pulsar://{address}", operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        topic = f"fresh-pulsar-{uuid.uuid4().hex[:8]}"
        consumer = client.subscribe(topic, "probe")  # before the send: any initial position
        producer = client.create_producer(topic)
        producer.send(b"over pulsar-client")
        received = consumer.receive(int(WAIT_S * 1000))
        assert received.data() == b"over pulsar-client", received.data()
        consumer.acknowledge(received)
    finally:
        client.close()
    return "pulsar client ok"


def main() -> None:
    grpc_target, pulsar_address = sys.argv[1:3]
    logging.basicConfig(level=logging.WARNING)
    print(asyncio.run(grpc_api(grpc_target)), flush=True)
    print(rocketmq_sdk(grpc_target), flush=True)
    print(pulsar_client(pulsar_address), flush=True)
    print("all ok", flush=True)


if __name__ == "__main__":
    main()
