"""The message ids clients read (third attack round).

The entry ids of store ids were the lower 64 bits of the store's 128-bit id: for half of
the stores' tags they reach 2^63, which clients read as negative ("no message"): a reader
started at `latest` never saw that a message had arrived. Entry ids now keep below 2^63."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pulsar
import pytest

import tests.pulsar_raw as raw
from adapters.pulsar.frontend import PulsarFrontEnd
from gateway.engine.engine import Engine
from gateway.store import embedded
from tests.e2e.test_pulsar_frontend import QUIET

TOPIC = "last-id"
HIGH_TAG = "0000ffff"
"""A store tag whose old split put 0xffff at the top of every entry id (negative to clients)."""


@pytest.fixture(params=["low-tag", "high-tag"])
async def stack(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[tuple[PulsarFrontEnd, Engine]]:
    if request.param == "high-tag":
        fixed = uuid.UUID(HIGH_TAG + "0" * 24)
        monkeypatch.setattr(embedded, "uuid", SimpleNamespace(uuid4=lambda: fixed))
    async with raw.front_end(tmp_path) as made:
        yield made


def session(port: int, work: Callable[[Any], Any]) -> Any:
    client = pulsar.Client(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=5,
                           logger=QUIET)
    try:
        return work(client)
    finally:
        client.close()


async def test_message_ids_keep_their_entry_ids_below_2_to_the_63(
    stack: tuple[PulsarFrontEnd, Engine],
) -> None:
    front, _ = stack

    def work(client: Any) -> list[int]:
        producer = client.create_producer(TOPIC, batching_enabled=False)
        consumer = client.subscribe(TOPIC, "s", initial_position=pulsar.InitialPosition.Earliest)
        sent = [producer.send(b"x"), producer.send(b"y")]
        got = [consumer.receive(5000).message_id() for _ in sent]
        assert [(m.ledger_id(), m.entry_id()) for m in got] == [
            (m.ledger_id(), m.entry_id()) for m in sent]
        return [m.entry_id() for m in sent + got] + [m.ledger_id() for m in sent]

    assert min(await asyncio.to_thread(session, front.port, work)) >= 0
