"""A SEND deduplicated (its sequence id not above what its producer name stored) is answered as
a broker answers it: a receipt with message id -1:-1, so the client can tell it was not stored.
With raw frames, and with the official `pulsar-client`, which returns that id from `send()`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pulsar
import pytest

import tests.pulsar_raw as raw
from adapters.pulsar.frontend import PulsarFrontEnd
from tests.pulsar_raw import Cmd, RawClient

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
MINUS_ONE = 2**64 - 1
"""-1 as the uint64 of a MessageIdData field."""


@pytest.fixture
async def front(tmp_path: Path) -> AsyncIterator[PulsarFrontEnd]:
    async with raw.front_end(tmp_path) as (instance, _):
        yield instance


async def test_a_duplicate_send_gets_message_id_minus_one(front: PulsarFrontEnd) -> None:
    client = await RawClient.open(front.port)
    client.send(raw.producer(1, 1, "dup"))
    await client.expect(Cmd.PRODUCER_SUCCESS)
    client.send(raw.send(1, 0), raw.meta("dup", 0), b"m0")
    stored = (await client.expect(Cmd.SEND_RECEIPT)).command.send_receipt
    assert stored.message_id.ledgerId != MINUS_ONE
    # A SEND claiming ids up to 5 for one message: ids 1..5 count as stored, as on a broker.
    cmd = raw.send(1, 1)
    cmd.send.highest_sequence_id = 5
    client.send(cmd, raw.meta("dup", 1), b"m1")
    await client.expect(Cmd.SEND_RECEIPT)
    for seq in (0, 3):
        client.send(raw.send(1, seq), raw.meta("dup", seq), b"again")
        receipt = (await client.expect(Cmd.SEND_RECEIPT)).command.send_receipt
        assert receipt.sequence_id == seq
        assert (receipt.message_id.ledgerId, receipt.message_id.entryId) == (
            MINUS_ONE, MINUS_ONE)
    await client.close()


def restarted_app_sends(url: str) -> tuple[list[tuple[int, int]], list[bytes]]:
    """An application that restarts with a fixed producer name and its own sequence ids: the
    message ids `send()` returns the second time, and what the topic holds."""
    client = pulsar.Client(url, operation_timeout_seconds=5, logger=QUIET)
    try:
        producer = client.create_producer("app-topic", producer_name="app",
                                          batching_enabled=False)
        # From 1: the Python wrapper takes sequence_id=0 for "none given".
        for i in (1, 2, 3):
            producer.send(f"run1-{i}".encode(), sequence_id=i)
        producer.close()
        producer = client.create_producer("app-topic", producer_name="app",
                                          batching_enabled=False)
        ids = [producer.send(f"run2-{i}".encode(), sequence_id=i) for i in (1, 2)]
        fresh = producer.send(b"run2-new", sequence_id=4)
        assert fresh.ledger_id() != -1
        reader = client.create_reader("app-topic", pulsar.MessageId.earliest)
        held = []
        while reader.has_message_available():
            held.append(reader.read_next(5000).data())
        return [(m.ledger_id(), m.entry_id()) for m in ids], held
    finally:
        client.close()


async def test_the_official_client_sees_duplicates_as_minus_one(front: PulsarFrontEnd) -> None:
    ids, held = await asyncio.to_thread(restarted_app_sends,
                                        f"pulsar://127.0.0.1:{front.port}")
    assert ids == [(-1, -1), (-1, -1)]
    assert held == [b"run1-1", b"run1-2", b"run1-3", b"run2-new"]
