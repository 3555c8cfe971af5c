"""SEEK to the id of a message the store has trimmed (second attack round): refused with
TopicNotFound before, though the id came from this front end's receipt and a reader created at
that id starts at the id's publish time. The seek falls back the same way: the subscription
moves to the first message published at or after it, as a broker's cursor moves."""

from __future__ import annotations

from pathlib import Path

import tests.pulsar_raw as raw
from adapters.pulsar.wire import wire_pb2 as pb
from gateway.store.embedded import EmbeddedStore
from tests.pulsar_raw import Cmd, RawClient


async def test_a_seek_to_a_trimmed_message_moves_to_its_publish_time(tmp_path: Path) -> None:
    async with raw.front_end(tmp_path) as (front, engine):
        client = await RawClient.open(front.port)
        client.send(raw.producer(1, 1, "p"))
        await client.expect(Cmd.PRODUCER_SUCCESS)
        for seq in range(5):
            client.send(raw.send(1, seq), raw.meta("p", seq), f"m{seq}".encode())
        receipts = [(await client.expect(Cmd.SEND_RECEIPT)).command.send_receipt.message_id
                    for _ in range(5)]
        client.send(raw.subscribe(1, 2, pb.CommandSubscribe.Exclusive))
        await client.expect(Cmd.SUCCESS)
        client.send(raw.flow(1, 3))
        messages = [(await client.expect(Cmd.MESSAGE)).command.message for _ in range(3)]
        for request_id, message in enumerate(messages, start=10):
            ack = Cmd(type=Cmd.ACK)
            ack.ack.consumer_id, ack.ack.request_id = 1, request_id
            ack.ack.ack_type = pb.CommandAck.Individual
            ack.ack.message_id.add().CopyFrom(message.message_id)
            client.send(ack)
            await client.expect(Cmd.ACK_RESPONSE)
        store = engine.backend
        assert isinstance(store, EmbeddedStore)
        assert await store.trim() == 3  # m0..m2, acked by the only group

        seek = Cmd(type=Cmd.SEEK)
        seek.seek.consumer_id, seek.seek.request_id = 1, 20
        seek.seek.message_id.CopyFrom(receipts[1])
        client.send(seek)
        await client.expect(Cmd.CLOSE_CONSUMER)
        assert (await client.expect(Cmd.SUCCESS)).command.success.request_id == 20
        client.send(raw.subscribe(1, 21, pb.CommandSubscribe.Exclusive))
        await client.expect(Cmd.SUCCESS)
        client.send(raw.flow(1, 10))
        assert [(await client.expect(Cmd.MESSAGE)).payload for _ in range(2)] == [b"m3", b"m4"]
        await client.close()
