"""A refused PRODUCER changes nothing (second attack round): its `initial_subscription_name`
subscription was made before the producer-name and producer-count checks, so a PRODUCER
refused ProducerBusy still left a subscription keeping the topic's messages for nobody."""

from __future__ import annotations

from pathlib import Path

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
