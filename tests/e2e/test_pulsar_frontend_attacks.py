"""Attacks on the Pulsar front end's SEND path with raw frames: sequence ids a PRODUCER cannot
report back (above int64) and batch entries whose texts are not UTF-8. Each is refused with a
SEND_ERROR naming the field, nothing is stored, and the producer's name stays usable."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import tests.pulsar_raw as raw
from adapters.pulsar.frontend import PulsarFrontEnd
from adapters.pulsar.wire import wire_pb2 as pb
from gateway.engine.clock import SystemClock
from gateway.server.app import running_gateway
from tests.pulsar_raw import Cmd, RawClient

INT64_MAX = 2**63 - 1


@pytest.fixture
async def front(tmp_path: Path) -> AsyncIterator[PulsarFrontEnd]:
    async with raw.front_end(tmp_path, state_dir=tmp_path / "pulsar") as (instance, _):
        yield instance


async def producing(port: int, name: str) -> tuple[RawClient, int]:
    """A connection with producer 1 named `name`; its last stored sequence id."""
    client = await RawClient.open(port)
    client.send(raw.producer(1, 1, name))
    reply = (await client.expect(Cmd.PRODUCER_SUCCESS)).command.producer_success
    return client, reply.last_sequence_id


async def refused_send(client: RawClient, sequence_id: int, field: str) -> str:
    reply = (await client.expect(Cmd.SEND_ERROR)).command.send_error
    assert (reply.producer_id, reply.sequence_id, reply.error) == (
        1, sequence_id, pb.NotAllowedError), reply
    assert field in reply.message, reply.message
    return reply.message


async def only_stored(client: RawClient, name: str, sequence_id: int) -> None:
    """Store a sentinel: it must be the topic's first message."""
    client.send(raw.send(1, sequence_id), raw.meta(name, sequence_id), b"sentinel")
    assert (await client.expect(Cmd.SEND_RECEIPT)).command.send_receipt.sequence_id == sequence_id
    client.send(raw.subscribe(2, 2, pb.CommandSubscribe.Exclusive))
    await client.expect(Cmd.SUCCESS)
    client.send(raw.flow(2, 1))
    assert (await client.expect(Cmd.MESSAGE)).payload == b"sentinel"


def batch_meta(name: str, count: int) -> pb.MessageMetadata:
    meta = raw.meta(name, 0)
    meta.num_messages_in_batch = count
    return meta


async def test_sequence_ids_above_int64_are_refused_before_storing(
    front: PulsarFrontEnd,
) -> None:
    client, last = await producing(front.port, "big-seq")
    assert last == -1
    client.send(raw.send(1, 2**63), raw.meta("big-seq", 0), b"x")
    message = await refused_send(client, 2**63, "send.sequence_id")
    assert str(INT64_MAX) in message
    cmd = raw.send(1, 3)
    cmd.send.highest_sequence_id = 2**64 - 1
    client.send(cmd, raw.meta("big-seq", 3), b"x")
    await refused_send(client, 3, "send.highest_sequence_id")
    # A batch whose last message would be numbered 2**63.
    client.send(raw.send(1, INT64_MAX), batch_meta("big-seq", 2), raw.tiny_batch(2))
    await refused_send(client, INT64_MAX, "send.sequence_id")
    # An entry's own sequence id.
    single = pb.SingleMessageMetadata(payload_size=0, sequence_id=2**63).SerializeToString()
    client.send(raw.send(1, 4), batch_meta("big-seq", 1), len(single).to_bytes(4, "big") + single)
    await refused_send(client, 4, "sequence_id")
    await client.close()

    # The name still works: a new producer of it is told nothing was stored.
    again, last = await producing(front.port, "big-seq")
    assert last == -1
    await only_stored(again, "big-seq", 0)
    await again.close()


async def test_a_journal_holding_an_id_above_int64_loads_without_it(tmp_path: Path) -> None:
    state = tmp_path / "pulsar"
    state.mkdir()
    lines = [["raw", "healed", 5], ["raw", "healed", 2**63], ["raw", "other", 2**64 + 7]]
    (state / "producers.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    async with running_gateway(
        data_dir=tmp_path / "data", listen="127.0.0.1:0", clock=SystemClock()
    ) as app:
        instance = PulsarFrontEnd(app.engine, "127.0.0.1", 0, state_dir=state)
        await instance.start()
        try:
            client, last = await producing(instance.port, "healed")
            assert last == 5
            await client.close()
            client, last = await producing(instance.port, "other")
            assert last == -1
            await only_stored(client, "other", 0)
            await client.close()
        finally:
            await instance.stop()
    kept = [json.loads(line) for line in (state / "producers.jsonl").read_text().splitlines()]
    assert all(line[2] <= INT64_MAX for line in kept)


def one_entry_batch(single: pb.SingleMessageMetadata, placeholder: str, bad: bytes) -> bytes:
    """A batch payload of one entry whose metadata has `placeholder` replaced by `bad`."""
    data = raw.poisoned(single, placeholder, bad)
    return len(data).to_bytes(4, "big") + data + b"abc"


@pytest.mark.parametrize(
    ("single", "field"),
    [
        (pb.SingleMessageMetadata(payload_size=3, properties=[pb.KeyValue(key="zz", value="v")]),
         "messages[0].properties.key"),
        (pb.SingleMessageMetadata(payload_size=3, properties=[pb.KeyValue(key="k", value="zz")]),
         "messages[0].properties.value"),
        (pb.SingleMessageMetadata(payload_size=3, partition_key="zz"),
         "messages[0].partition_key"),
    ],
    ids=["property-key", "property-value", "partition-key"],
)
async def test_batch_entry_texts_must_be_utf8(
    front: PulsarFrontEnd, single: pb.SingleMessageMetadata, field: str
) -> None:
    client, _ = await producing(front.port, "utf8")
    client.send(raw.send(1, 0), batch_meta("utf8", 1), one_entry_batch(single, "zz", b"\xff\xfe"))
    message = await refused_send(client, 0, field)
    assert "valid UTF-8" in message
    await only_stored(client, "utf8", 1)
    await client.close()
