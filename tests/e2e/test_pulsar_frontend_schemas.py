"""Topic schemas with the official `pulsar-client`, as a broker's schema registry with its default
settings: the first producer's schema is the topic's; a producer or consumer with a schema of
another type is refused with IncompatibleSchema; producers without a schema are served; the
schemas survive a restart."""

from __future__ import annotations

import json
from pathlib import Path

import pulsar
import pytest
from pulsar.schema import Integer, JsonSchema, Record, String, StringSchema

from tests.e2e.pulsar_stack import (  # noqa: F401  (fixture `stack`)
    QUIET,
    Stack,
    client_for,
    run,
    stack_fixture,
)


class Order(Record):
    number = Integer()
    item = String()


class Refund(Record):
    number = Integer()


async def test_a_producer_with_a_schema_of_another_type_is_refused(stack: Stack) -> None:
    client = client_for(stack.url)
    try:
        consumer = await run(client.subscribe, "orders", "sub", schema=JsonSchema(Order))
        producer = await run(client.create_producer, "orders", schema=JsonSchema(Order))
        await run(producer.send, Order(number=1, item="tea"))
        with pytest.raises(pulsar.IncompatibleSchema):
            await run(client.create_producer, "orders", schema=StringSchema())
        # Producers without a schema and with the topic's own are served, and the first goes on.
        raw = await run(client.create_producer, "orders")
        await run(raw.send, b'{"number": 2, "item": "jam"}')
        again = await run(client.create_producer, "orders", schema=JsonSchema(Order))
        await run(again.send, Order(number=3, item="oil"))
        await run(producer.send, Order(number=4, item="salt"))
        numbers = [(await run(consumer.receive, 3000)).value().number for _ in range(4)]
        assert numbers == [1, 2, 3, 4]
    finally:
        await run(client.close)


async def test_a_consumer_with_a_schema_of_another_type_is_refused(stack: Stack) -> None:
    client = client_for(stack.url)
    try:
        producer = await run(client.create_producer, "orders", schema=JsonSchema(Order))
        await run(producer.send, Order(number=1, item="tea"))
        with pytest.raises(pulsar.IncompatibleSchema):
            await run(client.subscribe, "orders", "text", schema=StringSchema())
        plain = await run(client.subscribe, "orders", "bytes",
                          initial_position=pulsar.InitialPosition.Earliest)
        assert b'"tea"' in (await run(plain.receive, 3000)).data()
    finally:
        await run(client.close)


async def test_a_new_definition_of_the_same_type_is_served(stack: Stack) -> None:
    client = client_for(stack.url)
    try:
        first = await run(client.create_producer, "orders", schema=JsonSchema(Order))
        await run(first.send, Order(number=1, item="tea"))
        second = await run(client.create_producer, "orders", schema=JsonSchema(Refund))
        await run(second.send, Refund(number=2))
    finally:
        await run(client.close)


async def test_the_schemas_survive_a_restart(stack: Stack) -> None:
    client = client_for(stack.url)
    producer = await run(client.create_producer, "orders", schema=StringSchema())
    await run(producer.send, "tea")
    await run(client.close)
    await stack.stop()
    await stack.start()
    client = client_for(stack.url)
    try:
        with pytest.raises(pulsar.IncompatibleSchema):
            await run(client.create_producer, "orders", schema=JsonSchema(Order))
        await run(client.create_producer, "orders", schema=StringSchema())
    finally:
        await run(client.close)


async def test_a_message_carries_its_producers_schema_version(stack: Stack) -> None:
    client = client_for(stack.url)
    try:
        consumer = await run(client.subscribe, "orders", "sub", schema=JsonSchema(Order))
        first = await run(client.create_producer, "orders", schema=JsonSchema(Order))
        second = await run(client.create_producer, "orders", schema=JsonSchema(Refund))
        await run(first.send, Order(number=1, item="tea"))
        await run(second.send, Refund(number=2))
        versions = [(await run(consumer.receive, 3000)).schema_version() for _ in range(2)]
        assert [bytes(v, "latin-1") if isinstance(v, str) else bytes(v) for v in versions] == [
            bytes(8), (1).to_bytes(8, "big")]
    finally:
        await run(client.close)


async def test_a_schema_is_kept_with_the_principal_that_registered_it(tmp_path: Path) -> None:
    """With a tokens file each principal registers at most its share of the schemas kept
    (`SchemaRegistry`); the stored file names who registered each version."""
    from gateway.engine.clock import SystemClock
    from gateway.server.app import running_gateway

    tokens = tmp_path / "tokens.toml"
    tokens.write_text('[[principal]]\nname = "alice"\ntoken = "alice-secret"\n'
                      'publish = ["*"]\nconsume = ["*"]\ngroups = ["*"]\n')
    async with running_gateway(tmp_path / "data", clock=SystemClock(), tokens_file=str(tokens),
                               pulsar_listen="127.0.0.1:0") as app:
        client = pulsar.Client(f"pulsar://127.0.0.1:{app.front_ends['pulsar'].port}",
                               authentication=pulsar.AuthenticationToken("alice-secret"),
                               operation_timeout_seconds=5, logger=QUIET)
        try:
            await run(client.create_producer, "orders", schema=JsonSchema(Order))
        finally:
            await run(client.close)
    stored = json.loads((tmp_path / "data" / "pulsar" / "schemas.json").read_text())
    assert [version[3] for version in stored["orders"]] == ["alice"]
