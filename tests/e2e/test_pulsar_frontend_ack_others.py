"""Acks are per subscription, as on a broker: a consumer's ack of a message another consumer of
the same subscription holds acknowledges it (the broker finds the consumer with the pending ack
and acknowledges on the subscription). It was ignored and answered success, and the message
came again once its holder gave it back. An ack of an id nobody holds changes nothing."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import tests.pulsar_raw as raw
from adapters.pulsar.frontend import PulsarFrontEnd
from adapters.pulsar.wire import wire_pb2 as pb
from gateway.engine.engine import Engine
from tests.e2e.test_pulsar_frontend_attacks_consumers import ack, messages, publish, subscribed
from tests.pulsar_raw import Cmd, RawClient

SHARED, KEY_SHARED = pb.CommandSubscribe.Shared, pb.CommandSubscribe.Key_Shared
FAILOVER = pb.CommandSubscribe.Failover


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[tuple[PulsarFrontEnd, Engine]]:
    async with raw.front_end(tmp_path) as made:
        yield made


async def next_message(client: RawClient) -> pb.CommandMessage:
    """The next MESSAGE, past notices (Failover's ACTIVE_CONSUMER_CHANGE)."""
    while True:
        frame = await client.read()
        if frame.command.type == Cmd.MESSAGE:
            return frame.command.message


async def first_message(clients: dict[int, RawClient]) -> tuple[int, pb.CommandMessage]:
    """Which consumer got the first MESSAGE, and the message (the other reads are stopped
    before they take a frame: a StreamReader consumes nothing until the frame is whole)."""
    tasks = {asyncio.create_task(next_message(c)): cid for cid, c in clients.items()}
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    first = done.pop()
    return tasks[first], first.result()


def close_consumer(consumer_id: int, request_id: int) -> pb.BaseCommand:
    cmd = Cmd(type=Cmd.CLOSE_CONSUMER)
    cmd.close_consumer.consumer_id = consumer_id
    cmd.close_consumer.request_id = request_id
    return cmd


@pytest.mark.parametrize("sub_type", [SHARED, KEY_SHARED, FAILOVER],
                         ids=["shared", "key-shared", "failover"])
async def test_an_ack_of_a_message_another_consumer_holds_acknowledges_it(
    stack: tuple[PulsarFrontEnd, Engine], sub_type: int
) -> None:
    front, _ = stack
    holder = await subscribed(front.port, 1, sub_type)
    other = await subscribed(front.port, 2, sub_type)
    await publish(front.port, 1)
    holder.send(raw.flow(1, 5))
    other.send(raw.flow(2, 5))
    # One of them gets it (Key_Shared: the owner of its key; Failover: the active one).
    owner, message = await first_message({1: holder, 2: other})
    acker, acker_id = (other, 2) if owner == 1 else (holder, 1)
    owner_client = holder if owner == 1 else other
    acker.send(ack(acker_id, [message.message_id], request_id=9))
    reply = (await acker.expect(Cmd.ACK_RESPONSE)).command.ackResponse
    assert (reply.request_id, reply.HasField("error")) == (9, False), reply
    # Its holder goes away, which gives back what it still holds: not this message any more.
    owner_client.send(close_consumer(owner, 3))
    await owner_client.expect(Cmd.SUCCESS)
    await publish(front.port, 1, first=1)
    after = await next_message(acker)
    assert after.message_id != message.message_id
    assert after.redelivery_count == 0
    await holder.close()
    await other.close()


async def test_an_ack_of_a_message_nobody_holds_changes_nothing(
    stack: tuple[PulsarFrontEnd, Engine],
) -> None:
    front, _ = stack
    consumer = await subscribed(front.port, 1, SHARED)
    [mid] = await publish(front.port, 1)
    consumer.send(ack(1, [mid], request_id=4))  # not delivered yet: nobody holds it
    reply = (await consumer.expect(Cmd.ACK_RESPONSE)).command.ackResponse
    assert (reply.request_id, reply.HasField("error")) == (4, False), reply
    consumer.send(raw.flow(1, 1))
    [got] = await messages(consumer, 1)
    assert (got.message_id.ledgerId, got.message_id.entryId) == (mid.ledgerId, mid.entryId)
    await consumer.close()
