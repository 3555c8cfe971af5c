"""Third attack round on the Pulsar front end, with raw frames: each refusal is the protocol's
error naming the field, changes nothing, and the connection goes on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import tests.pulsar_raw as raw
from adapters.pulsar.frontend import PulsarFrontEnd
from adapters.pulsar.wire import wire_pb2 as pb
from gateway.engine.engine import Engine
from tests.e2e.test_pulsar_frontend_attacks_consumers import (
    SHARED,
    ack,
    messages,
    publish,
    subscribed,
)
from tests.pulsar_raw import Cmd

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
