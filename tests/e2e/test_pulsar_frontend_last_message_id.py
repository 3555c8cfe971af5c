"""`Reader.has_message_available()` (GET_LAST_MESSAGE_ID) and the message ids clients read
(third attack round).

The front end answered GET_LAST_MESSAGE_ID with the newest id the consumer held unsettled, or
entry 0 of its own ledger when it held none. So a reader on an empty topic was told a message
was available (and `read_next` then waited for nothing), and a reader with a small receiver
queue that had acknowledged what it read was told nothing was left while the topic still held
messages: the usual `while reader.has_message_available(): reader.read_next()` read one
message of five. It now answers from what it sent and what the subscription still holds.

And the entry ids of store ids were the lower 64 bits of the store's 128-bit id: for half of
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


def drain(reader: Any) -> list[bytes]:
    got: list[bytes] = []
    while reader.has_message_available() and len(got) < 20:
        got.append(reader.read_next(5000).data())
    return got


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


async def test_a_reader_reads_the_whole_topic_while_messages_are_available(
    stack: tuple[PulsarFrontEnd, Engine],
) -> None:
    front, _ = stack

    def work(client: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        empty = client.create_reader(TOPIC, pulsar.MessageId.earliest)
        out["empty"] = empty.has_message_available()
        producer = client.create_producer(TOPIC, batching_enabled=False)
        ids = [producer.send(f"m{i}".encode()) for i in range(5)]
        small = client.create_reader(TOPIC, pulsar.MessageId.earliest, receiver_queue_size=1)
        out["small_queue"] = drain(small)
        out["at_id"] = drain(client.create_reader(TOPIC, ids[2]))
        out["at_id_inclusive"] = drain(
            client.create_reader(TOPIC, ids[2], start_message_id_inclusive=True))
        out["at_last"] = drain(client.create_reader(TOPIC, ids[4]))
        latest = client.create_reader(TOPIC, pulsar.MessageId.latest)
        out["latest_before"] = latest.has_message_available()
        producer.send(b"later")
        out["latest_after"] = latest.has_message_available()
        out["latest"] = drain(latest)
        out["empty_after"] = drain(empty)
        return out

    out = await asyncio.to_thread(session, front.port, work)
    five = [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert out["empty"] is False
    assert out["small_queue"] == five
    assert out["at_id"] == five[3:]
    assert out["at_id_inclusive"] == five[2:]
    assert out["at_last"] == []
    assert (out["latest_before"], out["latest_after"]) == (False, True)
    assert out["latest"] == [b"later"]
    assert out["empty_after"] == [*five, b"later"]


async def test_a_reader_after_a_seek_by_time_reads_what_is_left(
    stack: tuple[PulsarFrontEnd, Engine],
) -> None:
    front, _ = stack

    def work(client: Any) -> dict[str, list[bytes]]:
        producer = client.create_producer(TOPIC, batching_enabled=False)
        for i in range(3):
            producer.send(f"m{i}".encode())
        reader = client.create_reader(TOPIC, pulsar.MessageId.earliest)
        out = {"first": drain(reader)}
        reader.seek(0)
        out["from_zero"] = drain(reader)
        reader.seek(2**62)  # a time to come: nothing after it
        out["future"] = drain(reader)
        return out

    out = await asyncio.to_thread(session, front.port, work)
    assert out == {"first": [b"m0", b"m1", b"m2"], "from_zero": [b"m0", b"m1", b"m2"],
                   "future": []}


async def test_has_message_available_reads_no_counts_from_disk(
    stack: tuple[PulsarFrontEnd, Engine], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each GET_LAST_MESSAGE_ID counted the group's backlog with a scan of the store (one
    reader thread for every store read): a client asking again and again, on a topic with a
    large backlog, held up every other client's reads. It is answered from the store's index
    now: here the store's counting scan fails, and readers are served all the same."""
    front, engine = stack

    async def no_scan(*_: object) -> None:
        raise AssertionError("GET_LAST_MESSAGE_ID scanned the store")

    monkeypatch.setattr(engine.backend, "stats", no_scan)

    def work(client: Any) -> list[bytes]:
        producer = client.create_producer(TOPIC, batching_enabled=False)
        for i in range(3):
            producer.send(f"m{i}".encode())
        return drain(client.create_reader(TOPIC, pulsar.MessageId.earliest,
                                          receiver_queue_size=1))

    assert await asyncio.to_thread(session, front.port, work) == [b"m0", b"m1", b"m2"]
