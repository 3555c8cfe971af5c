"""Third attack round on the Pulsar front end, with raw frames: each refusal is the protocol's
error naming the field, changes nothing, and the connection goes on."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

import tests.pulsar_raw as raw
from adapters.pulsar.frontend import PulsarFrontEnd
from adapters.pulsar.wire import wire_pb2 as pb
from gateway.engine.clock import SystemClock
from gateway.engine.engine import Engine
from gateway.server.app import running_gateway
from tests.e2e.test_pulsar_frontend import QUIET
from tests.e2e.test_pulsar_frontend_attacks_consumers import (
    SHARED,
    ack,
    messages,
    publish,
    subscribed,
)
from tests.pulsar_raw import Cmd, RawClient

GROUP = ("raw", "s")


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[tuple[PulsarFrontEnd, Engine]]:
    async with raw.front_end(tmp_path) as made:
        yield made


@pytest.mark.parametrize("flag", ["txnid_least_bits", "txnid_most_bits"])
async def test_an_ack_in_a_transaction_is_refused(
    stack: tuple[PulsarFrontEnd, Engine], flag: str,
) -> None:
    """It was applied at once, outside any transaction: an abort could not bring the message
    back."""
    front, engine = stack
    await publish(front.port, 1)
    client = await subscribed(front.port, 1, SHARED)
    client.send(raw.flow(1, 10))
    (got,) = await messages(client, 1)
    command = ack(1, [got.message_id], request_id=5)
    setattr(command.ack, flag, 3)
    client.send(command)
    answer = (await client.expect(Cmd.ACK_RESPONSE)).command.ackResponse
    assert (answer.request_id, answer.error) == (5, pb.NotAllowedError)
    assert f"ack.{flag}" in answer.message
    assert len(engine.unsettled(*GROUP)) == 1  # not acked
    client.send(ack(1, [got.message_id], request_id=6))
    answer = (await client.expect(Cmd.ACK_RESPONSE)).command.ackResponse
    assert (answer.request_id, answer.HasField("error")) == (6, False)
    assert engine.unsettled(*GROUP) == []
    await client.close()


TOKENS = """
[[principal]]
name = "billing"
token = "billing-secret"
publish = ["payments"]
consume = ["payments"]
groups = ["billing"]
"""


@pytest.mark.parametrize(("method", "accepted"), [
    ("token", True), ("", True), ("basic", False), ("tls", False), ("athenz", False),
])
async def test_connect_with_another_auth_method_is_refused(
    tmp_path: Path, method: str, accepted: bool,
) -> None:
    """A valid token sent under another method's name was taken as a token: a broker has no
    provider for a method it does not serve and refuses the connection."""
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS)
    async with running_gateway(tmp_path / "data", clock=SystemClock(), tokens_file=str(tokens),
                               pulsar_listen="127.0.0.1:0") as app:
        client = await RawClient.open(app.front_ends["pulsar"].port, connect=False)
        cmd = Cmd(type=Cmd.CONNECT)
        cmd.connect.client_version = "raw-test"
        cmd.connect.protocol_version = 19
        cmd.connect.auth_data = b"billing-secret"
        if method:
            cmd.connect.auth_method_name = method
        client.send(cmd)
        reply = (await client.read()).command
        if accepted:
            assert reply.type == Cmd.CONNECTED
        else:
            assert (reply.type, reply.error.error) == (Cmd.ERROR, pb.AuthenticationError)
            assert "connect.auth_method_name" in reply.error.message
            assert await client.closed()
        await client.close()


def non_persistent(url: str) -> str:
    client = pulsar.Client(url, operation_timeout_seconds=5, logger=QUIET)
    try:
        durable = client.subscribe("np-topic", "s",
                                   initial_position=pulsar.InitialPosition.Earliest)
        try:
            client.create_producer("non-persistent://public/default/np-topic").send(b"crosstalk")
            outcome = "sent"
        except pulsar.PulsarException as exc:
            outcome = type(exc).__name__
        client.create_producer("persistent://public/default/np-topic").send(b"durable")
        return f"{outcome} {durable.receive(5000).data().decode()}"
    finally:
        client.close()


async def test_a_non_persistent_topic_is_refused_not_mixed_with_the_persistent_one(
    stack: tuple[PulsarFrontEnd, Engine],
) -> None:
    """`non-persistent://public/default/x` is another topic than `persistent://.../x` in
    Pulsar; it was taken as that one, so its messages reached the persistent topic's
    subscriptions."""
    front, _ = stack
    url = f"pulsar://127.0.0.1:{front.port}"
    outcome = await asyncio.to_thread(non_persistent, url)
    assert outcome.split() == ["NotAllowedError", "durable"], outcome
    client = await RawClient.open(front.port)
    cmd = raw.producer(1, 1)
    cmd.producer.topic = "non-persistent://public/default/raw"
    client.send(cmd)
    error = (await client.expect(Cmd.ERROR)).command.error
    assert (error.request_id, error.error) == (1, pb.NotAllowedError)
    assert "non-persistent topics are not served" in error.message
    await client.close()


def encrypted_producer(url: str, keys: Path) -> str:
    client = pulsar.Client(url, operation_timeout_seconds=5, logger=QUIET)
    crypto = pulsar.CryptoKeyReader(str(keys / "pub.pem"), str(keys / "priv.pem"))
    try:
        client.create_producer("enc", encryption_key="k", crypto_key_reader=crypto)
        return "created"
    except pulsar.PulsarException as exc:
        return type(exc).__name__
    finally:
        client.close()


async def test_an_encrypting_producer_is_refused(
    stack: tuple[PulsarFrontEnd, Engine], tmp_path: Path,
) -> None:
    """End-to-end encrypted messages were stored without their keys (MessageMetadata's
    encryption fields are not kept): every consumer, one with the private key too, received
    the ciphertext as the message."""
    front, _ = stack
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl makes the key pair")
    subprocess.run([openssl, "genrsa", "-out", str(tmp_path / "priv.pem"), "2048"],
                   check=True, capture_output=True)
    subprocess.run([openssl, "rsa", "-in", str(tmp_path / "priv.pem"), "-pubout", "-out",
                    str(tmp_path / "pub.pem")], check=True, capture_output=True)
    url = f"pulsar://127.0.0.1:{front.port}"
    assert await asyncio.to_thread(encrypted_producer, url, tmp_path) == "NotAllowedError"


@pytest.mark.parametrize(("number", "field"), [
    (13, "encryption_keys"), (14, "encryption_algo"), (15, "encryption_param"),
])
async def test_a_send_with_encryption_metadata_is_refused(
    stack: tuple[PulsarFrontEnd, Engine], number: int, field: str,
) -> None:
    front, _ = stack
    client = await RawClient.open(front.port)
    client.send(raw.producer(1, 1, "p"))
    await client.expect(Cmd.PRODUCER_SUCCESS)
    metadata = raw.meta("p", 0).SerializeToString() + bytes([number << 3 | 2, 2]) + b"k1"
    client.writer.write(raw.payload_frame(raw.send(1, 0).SerializeToString(), metadata, b"x"))
    error = (await client.expect(Cmd.SEND_ERROR)).command.send_error
    assert (error.sequence_id, error.error) == (0, pb.NotAllowedError)
    assert f"metadata.{field}" in error.message
    client.send(raw.send(1, 1), raw.meta("p", 1), b"plain")
    await client.expect(Cmd.SEND_RECEIPT)  # the producer goes on
    await client.close()


def reader_with_rollback(rollback_s: int, *, durable: bool = False) -> pb.BaseCommand:
    cmd = raw.subscribe(1, 1, SHARED)
    cmd.subscribe.subscription = "rolled"
    cmd.subscribe.durable = durable
    cmd.subscribe.ClearField("initialPosition")
    cmd.subscribe.start_message_id.ledgerId = cmd.subscribe.start_message_id.entryId = 2**63 - 1
    cmd.subscribe.start_message_rollback_duration_sec = rollback_s
    return cmd


@pytest.mark.parametrize(("rollback_s", "expected"), [(0, []), (3600, [b"m0", b"m1"]),
                                                      (2**64 - 1, [b"m0", b"m1"])])
async def test_a_reader_starts_at_its_rollback_duration(
    stack: tuple[PulsarFrontEnd, Engine], rollback_s: int, expected: list[bytes],
) -> None:
    """A reader at `latest` with a rollback duration (Java's startMessageFromRollbackDuration)
    read only what came after it: the duration was ignored."""
    front, _ = stack
    await publish(front.port, 2)
    client = await RawClient.open(front.port)
    client.send(reader_with_rollback(rollback_s))
    await client.expect(Cmd.SUCCESS)
    client.send(raw.flow(1, 10))
    await publish(front.port, 1, first=2)
    bodies = []
    while True:
        frame = await client.expect(Cmd.MESSAGE)
        bodies.append(frame.payload)
        if frame.payload == b"m2":
            break
    assert bodies == [*expected, b"m2"]
    await client.close()


async def test_a_rollback_duration_on_a_durable_subscription_is_refused(
    stack: tuple[PulsarFrontEnd, Engine],
) -> None:
    front, engine = stack
    client = await RawClient.open(front.port)
    client.send(reader_with_rollback(60, durable=True))
    error = (await client.expect(Cmd.ERROR)).command.error
    assert (error.request_id, error.error) == (1, pb.NotAllowedError)
    assert "subscribe.start_message_rollback_duration_sec" in error.message
    assert engine.group_state("raw", "rolled") is None
    await client.close()


def batch_positions(url: str) -> dict[str, list[bytes]]:
    client = pulsar.Client(url, operation_timeout_seconds=5, logger=QUIET)
    try:
        producer = client.create_producer("batched", batching_enabled=True,
                                          batching_max_publish_delay_ms=50)
        ids: list[Any] = []
        for i in range(5):
            producer.send_async(f"m{i}".encode(), lambda _, mid: ids.append(mid))
        producer.flush()
        ids.sort(key=lambda m: (m.ledger_id(), m.entry_id(), m.batch_index()))
        assert [m.batch_index() for m in ids] == [0, 1, 2, 3, 4]  # one batch

        def read_all(reader: Any) -> list[bytes]:
            got = []
            while reader.has_message_available():
                got.append(reader.read_next(5000).data())
            return got

        out = {"inclusive": read_all(client.create_reader("batched", ids[2],
                                                          start_message_id_inclusive=True)),
               "exclusive": read_all(client.create_reader("batched", ids[2]))}
        reader = client.create_reader("batched", pulsar.MessageId.earliest)
        read_all(reader)
        reader.seek(ids[2])
        out["seek"] = read_all(reader)
        return out
    finally:
        client.close()


async def test_a_reader_at_a_message_of_a_batch_starts_there(
    stack: tuple[PulsarFrontEnd, Engine],
) -> None:
    """A reader created at (or seeking to) message 2 of a batch, by the id its send returned,
    started at the batch's first message: it read m1 (and m0 when inclusive), messages before
    the one it asked for. (Message 2 itself still reaches a reader that excludes it: its
    delivery carries the id of a single message, which the client cannot tell is the one.)"""
    front, _ = stack
    out = await asyncio.to_thread(batch_positions, f"pulsar://127.0.0.1:{front.port}")
    assert out == {"inclusive": [b"m2", b"m3", b"m4"], "exclusive": [b"m2", b"m3", b"m4"],
                   "seek": [b"m2", b"m3", b"m4"]}


def protobuf_native(url: str) -> str:
    from google.protobuf import timestamp_pb2

    schema = pulsar.schema.ProtobufNativeSchema(timestamp_pb2.Timestamp)
    client = pulsar.Client(url, operation_timeout_seconds=5, logger=QUIET)
    try:
        producer = client.create_producer("typed", schema=schema)
        consumer = client.subscribe("typed", "s", schema=schema,
                                    initial_position=pulsar.InitialPosition.Earliest)
        producer.send(timestamp_pb2.Timestamp(seconds=5))
        return str(consumer.receive(5000).value().seconds)
    finally:
        client.close()


async def test_a_producer_with_a_schema_type_beyond_the_first_five_is_served(
    stack: tuple[PulsarFrontEnd, Engine],
) -> None:
    """The proto subset knew schema types 0..4 only: a PRODUCER or SUBSCRIBE with any other
    (ProtobufNative, KeyValue, Int32, ...) was refused as if its schema had no type."""
    front, _ = stack
    assert await asyncio.to_thread(protobuf_native, f"pulsar://127.0.0.1:{front.port}") == "5"


async def test_an_unknown_enum_value_is_named_with_the_values_allowed(
    stack: tuple[PulsarFrontEnd, Engine],
) -> None:
    front, _ = stack
    client = await RawClient.open(front.port)
    cmd = raw.producer(1, 1)
    cmd.producer.schema.name, cmd.producer.schema.schema_data = "s", b""
    cmd.producer.schema.type = pb.Schema.Int32
    data = cmd.SerializeToString()
    assert data.count(b"\x20\x08") == 1  # Schema.type (field 4) = 8
    client.writer.write(raw.command_frame(data.replace(b"\x20\x08", b"\x20\x63")))  # 99
    error = (await client.expect(Cmd.ERROR)).command.error
    assert (error.request_id, error.error) == (1, pb.NotAllowedError)
    assert "producer.schema.type='99'" in error.message and "ProtobufNative" in error.message
    await client.close()
