"""A reader's seek (second attack round): `Reader.seek` closes the reader's consumer, whose
reader group then goes; the seek must not make that group again (a group no reader owns looks
durable, and every later reader SUBSCRIBE of the name was refused for ever). The official client
completes its seek and rereads from the target; another reader of the same group comes back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pulsar
import pytest

import tests.pulsar_raw as raw
from adapters.pulsar.frontend import PulsarFrontEnd, readers
from adapters.pulsar.wire import wire_pb2 as pb
from gateway.engine.engine import Engine
from tests.e2e.pulsar_stack import Stack, client_for, run, stack_fixture  # noqa: F401  (fixture `stack`)
from tests.pulsar_raw import Cmd, RawClient

TOPIC = "reader-seek"
SHARED = pb.CommandSubscribe.Shared


def scenario(url: str) -> dict[str, list[bytes]]:
    client = client_for(url, timeout_s=5)
    try:
        producer = client.create_producer(TOPIC, batching_enabled=False)
        ids = [producer.send(f"m{i}".encode()) for i in range(5)]
        reader = client.create_reader(TOPIC, pulsar.MessageId.earliest)
        first = [reader.read_next(5000) for _ in range(5)]
        out = {"first": [m.data() for m in first]}
        reader.seek(pulsar.MessageId.earliest)
        out["earliest"] = [reader.read_next(5000).data() for _ in range(5)]
        reader.seek(ids[2])
        out["by_id"] = [reader.read_next(5000).data()]
        at = first[3].publish_timestamp()
        reader.seek(at)
        out["by_time"] = [reader.read_next(5000).data() for _ in range(2)]
        # A seek by time goes to the first message published in that millisecond or later:
        # m2 too when it was published in the same millisecond as m3.
        out["from_time"] = [m.data() for m in first if m.publish_timestamp() >= at][:2]
        producer.send(b"later")
        out["later"] = [reader.read_next(5000).data()]
        return out
    finally:
        client.close()


async def test_a_readers_seek_completes_and_rereads_from_its_target(stack: Stack) -> None:
    # Before the fix the seek never completed: the client resubscribed, refused, for ever.
    out = await asyncio.wait_for(run(scenario, stack.url), 60)
    assert out["first"] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert out["earliest"] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert out["by_id"][0] in (b"m2", b"m3")  # the client may skip the message it seeks to
    assert out["by_time"] == out["from_time"]
    assert out["later"] == [b"later"]
    assert stack.app is not None
    assert [g.group for g in stack.app.engine.groups() if g.topic == TOPIC] == []


def seek_to_start(consumer_id: int, request_id: int) -> pb.BaseCommand:
    """SEEK by publish time 0: back to the earliest message."""
    seek = Cmd(type=Cmd.SEEK)
    seek.seek.consumer_id, seek.seek.request_id, seek.seek.message_publish_time = (
        consumer_id, request_id, 0)
    return seek


def reader(consumer_id: int, request_id: int) -> pb.BaseCommand:
    cmd = raw.subscribe(consumer_id, request_id, SHARED)
    cmd.subscribe.subscription = "rg"
    cmd.subscribe.durable = False
    return cmd


async def test_a_seek_on_a_shared_reader_group_lets_the_other_reader_back(
    tmp_path: Path,
) -> None:
    async with raw.front_end(tmp_path) as (front, engine):
        front_end: PulsarFrontEnd = front
        _: Engine = engine
        first, second = await RawClient.open(front_end.port), await RawClient.open(front_end.port)
        first.send(reader(1, 1))
        await first.expect(Cmd.SUCCESS)
        second.send(reader(1, 1))
        await second.expect(Cmd.SUCCESS)
        first.send(seek_to_start(1, 2))
        await first.expect(Cmd.CLOSE_CONSUMER)
        await first.expect(Cmd.SUCCESS)
        await second.expect(Cmd.CLOSE_CONSUMER)
        second.send(reader(1, 3))
        await second.expect(Cmd.SUCCESS)
        first.send(reader(1, 4))
        await first.expect(Cmd.SUCCESS)
        await first.close()
        await second.close()


async def test_a_reader_group_nobody_rejoins_after_a_seek_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(readers, "REJOIN_S", 0.2)
    async with raw.front_end(tmp_path) as (front, engine):
        client = await RawClient.open(front.port)
        client.send(reader(1, 1))
        await client.expect(Cmd.SUCCESS)
        client.send(seek_to_start(1, 2))
        await client.expect(Cmd.CLOSE_CONSUMER)
        await client.expect(Cmd.SUCCESS)
        assert "rg" in [g.group for g in engine.groups()]  # kept for the reader to come back
        await client.close()
        for _ in range(100):
            if "rg" not in [g.group for g in engine.groups()]:
                break
            await asyncio.sleep(0.05)
        assert "rg" not in [g.group for g in engine.groups()]
        again = await RawClient.open(front.port)
        again.send(reader(1, 3))
        await again.expect(Cmd.SUCCESS)
        await again.close()


async def test_a_reader_group_goes_with_the_connection_of_the_reader_a_seek_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Third attack round: a reader that seeks and then drops its connection without
    subscribing again held its group, and the topic's messages, for 60 s. It goes when the
    connection does (the fallback wait is made an hour here: only the connection's end can
    drop it within the test)."""
    monkeypatch.setattr(readers, "REJOIN_S", 3600.0)
    async with raw.front_end(tmp_path) as (front, engine):
        client = await RawClient.open(front.port)
        bystander = await RawClient.open(front.port)
        client.send(reader(1, 1))
        await client.expect(Cmd.SUCCESS)
        client.send(seek_to_start(1, 2))
        await client.expect(Cmd.CLOSE_CONSUMER)
        await client.expect(Cmd.SUCCESS)
        await bystander.close()  # another connection's end changes nothing
        await asyncio.sleep(0.2)
        assert "rg" in [g.group for g in engine.groups()]
        await client.close()
        for _ in range(100):
            if "rg" not in [g.group for g in engine.groups()]:
                break
            await asyncio.sleep(0.05)
        assert "rg" not in [g.group for g in engine.groups()]
        durable = raw.subscribe(1, 3, SHARED)  # the name is free: no reader group holds it
        durable.subscribe.subscription = "rg"
        again = await RawClient.open(front.port)
        again.send(durable)
        await again.expect(Cmd.SUCCESS)
        await again.close()
