"""Commands on one subscription name racing from two connections (second attack round): the
front end serializes SUBSCRIBE, UNSUBSCRIBE and SEEK per (topic, subscription), so a check and
the change relying on it cannot interleave. A reader and a durable SUBSCRIBE of one name sent
at once were both accepted (sharing one group, the durable name locked out afterwards); a
refused UNSUBSCRIBE had already closed its consumer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import tests.pulsar_raw as raw
from adapters.pulsar.frontend import PulsarFrontEnd
from adapters.pulsar.wire import wire_pb2 as pb
from gateway.engine.engine import Engine
from tests.pulsar_raw import Cmd, RawClient

SHARED = pb.CommandSubscribe.Shared
TRIALS = 15


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[tuple[PulsarFrontEnd, Engine]]:
    async with raw.front_end(tmp_path) as made:
        yield made


def subscribe(consumer_id: int, request_id: int, name: str, *, durable: bool) -> pb.BaseCommand:
    cmd = raw.subscribe(consumer_id, request_id, SHARED)
    cmd.subscribe.subscription = name
    cmd.subscribe.durable = durable
    return cmd


async def answer(client: RawClient) -> pb.BaseCommand:
    while True:
        frame = await client.read()
        if frame.command.type in (Cmd.SUCCESS, Cmd.ERROR):
            return frame.command


async def test_a_reader_and_a_durable_subscribe_of_one_name_at_once(
    stack: tuple[PulsarFrontEnd, Engine],
) -> None:
    front, _ = stack
    for trial in range(TRIALS):
        name = f"s{trial}"
        reader, durable = await RawClient.open(front.port), await RawClient.open(front.port)
        reader.send(subscribe(1, 1, name, durable=False))
        durable.send(subscribe(1, 1, name, durable=True))
        kinds = sorted([(await answer(reader)).type, (await answer(durable)).type])
        assert kinds == [Cmd.SUCCESS, Cmd.ERROR], (trial, kinds)
        await reader.close()
        await durable.close()
        # Nothing left behind: a durable consumer of the name is served afterwards.
        again = await RawClient.open(front.port)
        again.send(subscribe(1, 2, name, durable=True))
        assert (await answer(again)).type == Cmd.SUCCESS, trial
        await again.close()


async def test_a_refused_unsubscribe_leaves_its_consumer_open(
    stack: tuple[PulsarFrontEnd, Engine],
) -> None:
    front, _ = stack
    refused = 0
    for trial in range(TRIALS):
        name = f"u{trial}"
        owner, other = await RawClient.open(front.port), await RawClient.open(front.port)
        owner.send(subscribe(1, 1, name, durable=True))
        await owner.expect(Cmd.SUCCESS)
        unsubscribe = Cmd(type=Cmd.UNSUBSCRIBE)
        unsubscribe.unsubscribe.consumer_id, unsubscribe.unsubscribe.request_id = 1, 2
        if trial % 2:
            owner.send(unsubscribe)
            other.send(subscribe(1, 3, name, durable=True))
        else:
            other.send(subscribe(1, 3, name, durable=True))
            owner.send(unsubscribe)
        reply = await answer(owner)
        await answer(other)
        if reply.type == Cmd.ERROR:
            refused += 1
            assert reply.error.error == pb.ConsumerBusy
            ask = Cmd(type=Cmd.GET_LAST_MESSAGE_ID)
            ask.getLastMessageId.consumer_id, ask.getLastMessageId.request_id = 1, 4
            owner.send(ask)
            await owner.expect(Cmd.GET_LAST_MESSAGE_ID_RESPONSE)  # still open
        await owner.close()
        await other.close()
    assert refused  # the SUBSCRIBE came first in some of the races
