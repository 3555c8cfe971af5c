"""A refused PRODUCER changes nothing (second attack round): its `initial_subscription_name`
subscription was made before the producer-name and producer-count checks, so a PRODUCER
refused ProducerBusy still left a subscription keeping the topic's messages for nobody."""

from __future__ import annotations

from pathlib import Path

from structlog.testing import capture_logs

import tests.pulsar_raw as raw
from adapters.pulsar.wire import wire_pb2 as pb
from tests.pulsar_raw import Cmd, RawClient


def producer(producer_id: int, request_id: int, name: str, initial: str) -> pb.BaseCommand:
    cmd = raw.producer(producer_id, request_id, name)
    cmd.producer.initial_subscription_name = initial
    return cmd


async def test_a_producer_refused_for_its_name_makes_no_subscription(tmp_path: Path) -> None:
    async with raw.front_end(tmp_path) as (front, engine):
        holder = await RawClient.open(front.port)
        holder.send(raw.producer(1, 1, "dup"))
        await holder.expect(Cmd.PRODUCER_SUCCESS)
        second = await RawClient.open(front.port)
        second.send(producer(1, 1, "dup", "ghost"))
        error = (await second.expect(Cmd.ERROR)).command.error
        assert error.error == pb.ProducerBusy
        assert "ghost" not in [g.group for g in engine.groups()]
        assert not await engine.drop_group("raw", "ghost")  # nothing made in the store either
        await holder.close()
        await second.close()


async def test_a_producer_over_the_limit_makes_no_subscription(tmp_path: Path) -> None:
    async with raw.front_end(tmp_path, max_producers=1) as (front, engine):
        client = await RawClient.open(front.port)
        client.send(raw.producer(1, 1, "first"))
        await client.expect(Cmd.PRODUCER_SUCCESS)
        client.send(producer(2, 2, "second", "ghost"))
        assert (await client.expect(Cmd.ERROR)).command.error.error == pb.ProducerBusy
        assert not await engine.drop_group("raw", "ghost")
        await client.close()


async def test_an_accepted_producer_makes_its_subscription(tmp_path: Path) -> None:
    async with raw.front_end(tmp_path) as (front, engine):
        client = await RawClient.open(front.port)
        client.send(producer(1, 1, "p", "made"))
        await client.expect(Cmd.PRODUCER_SUCCESS)
        assert await engine.drop_group("raw", "made")
        await client.close()


async def test_refused_commands_are_logged_with_the_command(tmp_path: Path) -> None:
    async with raw.front_end(tmp_path, max_consumers=1) as (front, _):
        client = await RawClient.open(front.port)
        with capture_logs() as logs:
            client.send(raw.subscribe(1, 1, pb.CommandSubscribe.Exclusive))
            await client.expect(Cmd.SUCCESS)
            other = await RawClient.open(front.port)
            other.send(raw.subscribe(1, 2, pb.CommandSubscribe.Exclusive))  # in use
            await other.expect(Cmd.ERROR)
            client.send(raw.subscribe(2, 3, pb.CommandSubscribe.Shared))  # over max_consumers
            await client.expect(Cmd.ERROR)
            seek = Cmd(type=Cmd.SEEK)
            seek.seek.consumer_id, seek.seek.request_id = 1, 4
            seek.seek.message_id.ledgerId, seek.seek.message_id.entryId = 0x7F00000000000000, 1
            client.send(seek)
            await client.expect(Cmd.ERROR)
            other.send(raw.producer(1, 5, "p"))
            await other.expect(Cmd.PRODUCER_SUCCESS)
            client.send(raw.producer(1, 6, "p"))
            await client.expect(Cmd.ERROR)
        refused = [(e["command"], e["log_level"]) for e in logs
                   if e["event"] == "pulsar command refused"]
        assert refused == [("SUBSCRIBE", "info"), ("SUBSCRIBE", "info"), ("SEEK", "info"),
                           ("PRODUCER", "info")], logs
        await client.close()
        await other.close()
