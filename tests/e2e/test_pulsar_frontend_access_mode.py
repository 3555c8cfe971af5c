"""Producer access modes (third attack round). A producer created with
`access_mode=ProducerAccessMode.Exclusive` was one producer among others: a second Exclusive
producer and any Shared one attached beside it, so its guarantee (the only writer of the
topic) silently did not hold. Now a topic takes one Exclusive producer and no other, or any
number of Shared ones (ProducerBusy otherwise, across connections, as from a broker);
WaitForExclusive and ExclusiveWithFencing are not served (NotAllowedError)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

import tests.pulsar_raw as raw
from adapters.pulsar.frontend import PulsarFrontEnd
from adapters.pulsar.wire import wire_pb2 as pb
from gateway.engine.engine import Engine
from tests.e2e.test_pulsar_frontend import QUIET
from tests.pulsar_raw import Cmd, RawClient

MODE = pulsar.ProducerAccessMode


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[tuple[PulsarFrontEnd, Engine]]:
    async with raw.front_end(tmp_path) as made:
        yield made


def create(client: Any, topic: str, mode: Any) -> Any:
    try:
        return client.create_producer(topic, access_mode=mode)
    except pulsar.PulsarException as exc:
        return type(exc).__name__


def scenario(url: str) -> dict[str, Any]:
    one = pulsar.Client(url, operation_timeout_seconds=5, logger=QUIET)
    two = pulsar.Client(url, operation_timeout_seconds=5, logger=QUIET)
    out: dict[str, Any] = {}
    try:
        exclusive = create(one, "am", MODE.Exclusive)
        out["second exclusive"] = create(two, "am", MODE.Exclusive)
        out["shared beside it"] = create(two, "am", MODE.Shared)
        out["same client, shared"] = create(one, "am", MODE.Shared)
        exclusive.send(b"only writer")
        exclusive.close()
        shared = create(two, "am", MODE.Shared)
        out["shared after it closed"] = type(shared).__name__
        out["exclusive beside a shared"] = create(one, "am", MODE.Exclusive)
        shared.close()
        out["exclusive once alone"] = type(create(one, "am", MODE.Exclusive)).__name__
        out["wait for exclusive"] = create(two, "other", MODE.WaitForExclusive)
        out["exclusive with fencing"] = create(two, "other", MODE.ExclusiveWithFencing)
        return out
    finally:
        one.close()
        two.close()


async def test_an_exclusive_producer_is_the_only_one(
    stack: tuple[PulsarFrontEnd, Engine],
) -> None:
    front, _ = stack
    out = await asyncio.to_thread(scenario, f"pulsar://127.0.0.1:{front.port}")
    assert out == {
        "second exclusive": "ProducerBusy",
        "shared beside it": "ProducerBusy",
        "same client, shared": "ProducerBusy",
        "shared after it closed": "Producer",
        "exclusive beside a shared": "ProducerBusy",
        "exclusive once alone": "Producer",
        "wait for exclusive": "NotAllowedError",
        "exclusive with fencing": "NotAllowedError",
    }


async def test_an_unknown_access_mode_is_refused(stack: tuple[PulsarFrontEnd, Engine]) -> None:
    front, _ = stack
    client = await RawClient.open(front.port)
    # BaseCommand.producer (field 5) with producer_access_mode (field 10) = 7 appended.
    inner = raw.producer(1, 1).producer.SerializeToString() + bytes([10 << 3, 7])
    head = pb.BaseCommand(type=Cmd.PRODUCER).SerializeToString()
    client.writer.write(raw.command_frame(head + bytes([5 << 3 | 2, len(inner)]) + inner))
    error = (await client.expect(Cmd.ERROR)).command.error
    assert (error.request_id, error.error) == (1, pb.NotAllowedError)
    assert "producer.producer_access_mode" in error.message
    client.send(raw.producer(1, 2))  # refused, it took nothing: the id is free
    await client.expect(Cmd.PRODUCER_SUCCESS)
    await client.close()
