"""Schema commands at the frame level: PRODUCER_SUCCESS carries the schema's version,
GET_OR_CREATE_SCHEMA registers or refuses a schema as a PRODUCER does, and GET_SCHEMA answers
with what the topic holds (as a broker's schema registry does)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapters.pulsar.frontend import PulsarFrontEnd, schemas
from adapters.pulsar.wire import wire_pb2 as pb
from gateway.engine.clock import SystemClock
from gateway.engine.engine import Engine
from gateway.server.app import running_gateway
from tests.pulsar_raw import Cmd, RawClient, front_end, meta, producer, send

JSON = pb.Schema(name="Order", schema_data=b'{"type": "record", "name": "Order", "fields": []}',
                 type=pb.Schema.Json)


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[tuple[PulsarFrontEnd, Engine]]:
    async with front_end(tmp_path) as pair:
        yield pair


def get_or_create(request_id: int, schema: pb.Schema) -> pb.BaseCommand:
    cmd = Cmd(type=Cmd.GET_OR_CREATE_SCHEMA)
    cmd.getOrCreateSchema.request_id = request_id
    cmd.getOrCreateSchema.topic = "persistent://public/default/raw"
    cmd.getOrCreateSchema.schema.CopyFrom(schema)
    return cmd


def get_schema(request_id: int, version: bytes = b"") -> pb.BaseCommand:
    cmd = Cmd(type=Cmd.GET_SCHEMA)
    cmd.getSchema.request_id = request_id
    cmd.getSchema.topic = "persistent://public/default/raw"
    if version:
        cmd.getSchema.schema_version = version
    return cmd


async def test_schema_commands_use_the_topics_schemas(
    stack: tuple[PulsarFrontEnd, Engine],
) -> None:
    front, _ = stack
    client = await RawClient.open(front.port)
    try:
        client.send(get_schema(1))
        missing = (await client.expect(Cmd.GET_SCHEMA_RESPONSE)).command.getSchemaResponse
        assert missing.error_code == pb.TopicNotFound

        cmd = producer(1, 2, "typed")
        cmd.producer.schema.CopyFrom(JSON)
        client.send(cmd)
        success = (await client.expect(Cmd.PRODUCER_SUCCESS)).command.producer_success
        assert success.schema_version == bytes(8)

        client.send(get_or_create(3, JSON))
        same = (await client.expect(Cmd.GET_OR_CREATE_SCHEMA_RESPONSE)).command
        assert same.getOrCreateSchemaResponse.schema_version == bytes(8)
        assert not same.getOrCreateSchemaResponse.HasField("error_code")

        text = pb.Schema(name="text", schema_data=b"", type=pb.Schema.String)
        client.send(get_or_create(4, text))
        refused = (await client.expect(Cmd.GET_OR_CREATE_SCHEMA_RESPONSE)).command
        assert refused.getOrCreateSchemaResponse.error_code == pb.IncompatibleSchema
        assert "Json" in refused.getOrCreateSchemaResponse.error_message

        other = pb.Schema(name="Order", type=pb.Schema.Json,
                          schema_data=b'{"type": "record", "name": "Order2", "fields": []}')
        client.send(get_or_create(5, other))
        newer = (await client.expect(Cmd.GET_OR_CREATE_SCHEMA_RESPONSE)).command
        assert newer.getOrCreateSchemaResponse.schema_version == (1).to_bytes(8, "big")

        client.send(get_schema(6, bytes(8)))
        found = (await client.expect(Cmd.GET_SCHEMA_RESPONSE)).command.getSchemaResponse
        assert (found.schema.type, found.schema.schema_data) == (JSON.type, JSON.schema_data)
        client.send(get_schema(7))
        latest = (await client.expect(Cmd.GET_SCHEMA_RESPONSE)).command.getSchemaResponse
        assert (latest.schema.schema_data, latest.schema_version) == (
            other.schema_data, (1).to_bytes(8, "big"))
    finally:
        await client.close()


async def test_versions_past_the_limit_are_refused_naming_it(
    stack: tuple[PulsarFrontEnd, Engine], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(schemas, "MAX_VERSIONS", 2)
    front, _ = stack
    client = await RawClient.open(front.port)
    try:
        for request_id in (1, 2, 3):
            data = f'{{"type": "record", "name": "V{request_id}", "fields": []}}'.encode()
            client.send(get_or_create(request_id, pb.Schema(name="v", schema_data=data,
                                                           type=pb.Schema.Json)))
            reply = (await client.expect(Cmd.GET_OR_CREATE_SCHEMA_RESPONSE)).command
        answer = reply.getOrCreateSchemaResponse
        assert answer.error_code == pb.NotAllowedError
        assert "getOrCreateSchema.schema" in answer.error_message
        assert "at most 2 schema versions per topic" in answer.error_message
    finally:
        await client.close()


async def test_a_schema_version_too_long_is_refused_naming_it(
    stack: tuple[PulsarFrontEnd, Engine],
) -> None:
    front, _ = stack
    client = await RawClient.open(front.port)
    try:
        client.send(producer(1, 1, "w"))
        await client.expect(Cmd.PRODUCER_SUCCESS)
        metadata = meta("w", 0)
        metadata.schema_version = bytes(65)
        client.send(send(1, 0), metadata, b"body")
        error = (await client.expect(Cmd.SEND_ERROR)).command.send_error
        assert error.error == pb.NotAllowedError
        assert "metadata.schema_version" in error.message
        assert "at most 64 bytes" in error.message
        metadata.schema_version = bytes(8)
        client.send(send(1, 1), metadata, b"body")
        receipt = (await client.expect(Cmd.SEND_RECEIPT)).command.send_receipt
        assert receipt.sequence_id == 1
    finally:
        await client.close()


TOKENS = """
[[principal]]
name = "billing"
token = "billing-secret"
publish = ["payments"]
consume = ["payments"]
groups = ["billing"]
"""


async def test_only_a_connection_that_may_publish_registers_a_schema(tmp_path: Path) -> None:
    """GET_OR_CREATE_SCHEMA registered a schema on any topic for any connection: one that may
    not publish there could make the topic refuse its producers (IncompatibleSchema)."""
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS)
    async with running_gateway(tmp_path / "data", clock=SystemClock(), tokens_file=str(tokens),
                               pulsar_listen="127.0.0.1:0") as app:
        client = await RawClient.open(app.front_ends["pulsar"].port, connect=False)
        try:
            cmd = Cmd(type=Cmd.CONNECT)
            cmd.connect.client_version = "raw-test"
            cmd.connect.protocol_version = 19
            cmd.connect.auth_method_name = "token"
            cmd.connect.auth_data = b"billing-secret"
            client.send(cmd)
            await client.expect(Cmd.CONNECTED)
            for request_id, topic in ((1, "orders"), (2, "payments")):
                ask = get_or_create(request_id, JSON)
                ask.getOrCreateSchema.topic = f"persistent://public/default/{topic}"
                client.send(ask)
                reply = (await client.expect(Cmd.GET_OR_CREATE_SCHEMA_RESPONSE)).command
                answer = reply.getOrCreateSchemaResponse
                if topic == "orders":
                    assert answer.error_code == pb.AuthorizationError
                else:
                    assert (answer.HasField("error_code"), answer.schema_version) == (
                        False, bytes(8))
        finally:
            await client.close()


TWO = TOKENS + """
[[principal]]
name = "shipping"
token = "shipping-secret"
publish = ["orders"]
consume = ["orders"]
groups = ["shipping"]
"""


async def _connected(port: int, token: bytes) -> RawClient:
    client = await RawClient.open(port, connect=False)
    cmd = Cmd(type=Cmd.CONNECT)
    cmd.connect.client_version = "raw-test"
    cmd.connect.protocol_version = 19
    cmd.connect.auth_method_name = "token"
    cmd.connect.auth_data = token
    client.send(cmd)
    await client.expect(Cmd.CONNECTED)
    return client


async def test_only_a_connection_that_may_use_the_topic_reads_its_schema(tmp_path: Path) -> None:
    """GET_SCHEMA answered any connection: another principal read a topic's schema (its field
    names), and learnt which topics had one."""
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TWO)
    async with running_gateway(tmp_path / "data", clock=SystemClock(), tokens_file=str(tokens),
                               pulsar_listen="127.0.0.1:0") as app:
        port = app.front_ends["pulsar"].port
        billing = await _connected(port, b"billing-secret")
        shipping = await _connected(port, b"shipping-secret")
        try:
            ask = get_or_create(1, JSON)
            ask.getOrCreateSchema.topic = "persistent://public/default/payments"
            billing.send(ask)
            await billing.expect(Cmd.GET_OR_CREATE_SCHEMA_RESPONSE)
            answers = {}
            for who, client in (("billing", billing), ("shipping", shipping)):
                for topic in ("payments", "orders"):
                    get = get_schema(2)
                    get.getSchema.topic = f"persistent://public/default/{topic}"
                    client.send(get)
                    reply = (await client.expect(Cmd.GET_SCHEMA_RESPONSE)).command
                    answers[who, topic] = reply.getSchemaResponse
            assert answers["billing", "payments"].schema.schema_data == JSON.schema_data
            refused = answers["shipping", "payments"]
            assert refused.error_code == pb.AuthorizationError
            assert not refused.HasField("schema")
            assert "may not read the schema" in refused.error_message
            assert answers["shipping", "orders"].error_code == pb.TopicNotFound  # none there
            assert answers["billing", "orders"].error_code == pb.AuthorizationError
        finally:
            await billing.close()
            await shipping.close()
