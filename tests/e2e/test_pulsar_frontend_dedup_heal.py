"""Producer deduplication across a heal of the embedded store while the gateway keeps running.

The store's writer is stopped (a disk that does not answer) while it holds a producer's SEND:
the commit watch fails the writer, the SEND is answered with SEND_ERROR, and the store restarts
the writer, giving the old one time to end by itself, which commits the frames it had read. So
the message is stored though its send failed. The official client then reconnects and resends
it with the same sequence id: it must be answered, not stored a second time."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import pulsar
import pytest

import tests.pulsar_raw as raw
from adapters.pulsar.frontend import PulsarFrontEnd, producers
from adapters.pulsar.frontend.messages import SEQUENCE
from adapters.pulsar.frontend.producers import DUPLICATE
from adapters.pulsar.frontend.topics import engine_topic
from gateway.backend.base import OutMessage
from gateway.engine.clock import SystemClock
from gateway.errors import Unavailable
from gateway.server.app import running_gateway
from gateway.store import EmbeddedStore
from tests.e2e.pulsar_stack import client_for, receive_all, run
from tests.pulsar_raw import Cmd, RawClient

TOPIC = "dedup-heal"


async def until(condition: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    """Wait for what real processes bring about (not a timed rule)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        await asyncio.sleep(0.01)
    return condition()


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
async def test_a_send_a_lost_writer_committed_is_not_stored_again_on_its_resend(
    tmp_path: Path, batching: bool
) -> None:
    data = tmp_path / "data"
    store = EmbeddedStore(data, SystemClock(), commit_timeout_s=1.0,
                          restart_backoff_s=(0.001, 0.002))
    async with running_gateway(data_dir=data, clock=SystemClock(), backend=store) as app:
        front = PulsarFrontEnd(app.engine, "127.0.0.1", 0, state_dir=data / "pulsar")
        await front.start()
        client = client_for(f"pulsar://127.0.0.1:{front.port}")
        try:
            producer = await run(client.create_producer, TOPIC, producer_name="p",
                                 batching_enabled=batching, batching_max_publish_delay_ms=5,
                                 send_timeout_millis=60_000)
            await run(producer.send, b"m0")
            writer = store._supervisor.writer
            assert writer is not None and writer.pid is not None
            pid = writer.pid
            os.kill(pid, signal.SIGSTOP)
            try:
                sending = asyncio.ensure_future(run(producer.send, b"m1"))
                # The commit watch gives up on the stopped writer: m1's SEND is refused.
                assert await until(lambda: not store.healthy()), "the writer was not failed"
            finally:
                os.kill(pid, signal.SIGCONT)  # it commits m1 and ends; the store heals
            await sending  # answered once the client's resend of m1 got through
            assert store._supervisor.writer is not writer
            await run(producer.send, b"m2")
            consumer = await run(client.subscribe, TOPIC, "audit",
                                 initial_position=pulsar.InitialPosition.Earliest)
            got = [m.data() for m in await receive_all(consumer)]
            assert got == [b"m0", b"m1", b"m2"]
        finally:
            await run(client.close)
            await front.stop()


async def test_a_send_of_unknown_outcome_is_settled_from_the_stored_messages(
    tmp_path: Path,
) -> None:
    """The same on raw frames, the writer's loss stood in for by a publish that stores and then
    fails: until the stored messages can be read nothing more is stored on the topic; then the
    producer that comes back is told the id stored, and its resend is answered as a
    duplicate (-1:-1)."""
    async with raw.front_end(tmp_path, state_dir=tmp_path / "pulsar") as (front, engine):
        real_publish, real_read = engine.publish, engine.properties_after
        lost, recovering = [True], [True]

        async def publish(topic: str, messages: list[OutMessage], **_: object) -> list[str]:
            ids = await real_publish(topic, messages)
            if lost:
                lost.pop()
                raise Unavailable("the store's writer was lost after its commit")
            return ids

        async def properties_after(
            topic: str, message_id: str, limit: int
        ) -> list[tuple[str, Mapping[str, str]]] | None:
            if recovering:
                recovering.pop()
                raise Unavailable("embedded store is recovering")
            return await real_read(topic, message_id, limit)

        setattr(engine, "publish", publish)  # noqa: B010
        setattr(engine, "properties_after", properties_after)  # noqa: B010
        client = await RawClient.open(front.port)
        client.send(raw.producer(1, 1, "p"))
        await client.expect(Cmd.PRODUCER_SUCCESS)
        client.send(raw.send(1, 0), raw.meta("p", 0), b"m0")
        assert (await client.expect(Cmd.SEND_ERROR)).command.send_error.sequence_id == 0
        client.send(raw.send(1, 1), raw.meta("p", 1), b"m1")  # the store cannot be read yet
        assert (await client.expect(Cmd.SEND_ERROR)).command.send_error.sequence_id == 1
        await client.close()

        client = await RawClient.open(front.port)
        client.send(raw.producer(1, 2, "p"))
        success = (await client.expect(Cmd.PRODUCER_SUCCESS)).command.producer_success
        assert success.last_sequence_id == 0
        for sequence_id in (0, 1):
            client.send(raw.send(1, sequence_id), raw.meta("p", sequence_id),
                        f"m{sequence_id}".encode())
        duplicate = (await client.expect(Cmd.SEND_RECEIPT)).command.send_receipt
        assert (duplicate.message_id.ledgerId, duplicate.message_id.entryId) == DUPLICATE
        stored = (await client.expect(Cmd.SEND_RECEIPT)).command.send_receipt
        assert (stored.sequence_id, stored.message_id.ledgerId != DUPLICATE[0]) == (1, True)
        await client.close()
        kept = await real_read(engine_topic(raw.producer(1, 1).producer.topic), "", 10)
        assert kept is not None
        assert [properties[SEQUENCE] for _, properties in kept] == ["0", "1"]


async def test_a_store_given_up_at_close_is_settled_before_the_name_is_used_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A producer closed while its store hangs (never answered): the close gives the store up,
    though it may have been stored; the next producer of that name is told it was."""
    monkeypatch.setattr(producers, "CLOSE_WAIT_S", 0.0)
    async with raw.front_end(tmp_path, state_dir=tmp_path / "pulsar") as (front, engine):
        real_publish = engine.publish
        stored = asyncio.Event()

        async def publish(topic: str, messages: list[OutMessage], **_: object) -> list[str]:
            await real_publish(topic, messages)
            stored.set()
            await asyncio.Event().wait()  # committed, and the answer never comes
            raise AssertionError("not reached")

        setattr(engine, "publish", publish)  # noqa: B010
        client = await RawClient.open(front.port)
        client.send(raw.producer(1, 1, "p"))
        await client.expect(Cmd.PRODUCER_SUCCESS)
        client.send(raw.send(1, 0), raw.meta("p", 0), b"m0")
        await stored.wait()
        close = Cmd(type=Cmd.CLOSE_PRODUCER)
        close.close_producer.producer_id, close.close_producer.request_id = 1, 2
        client.send(close)
        await client.expect(Cmd.SUCCESS)
        setattr(engine, "publish", real_publish)  # noqa: B010
        client.send(raw.producer(2, 3, "p"))
        success = (await client.expect(Cmd.PRODUCER_SUCCESS)).command.producer_success
        assert success.last_sequence_id == 0
        client.send(raw.send(2, 0), raw.meta("p", 0), b"m0")
        duplicate = (await client.expect(Cmd.SEND_RECEIPT)).command.send_receipt
        assert (duplicate.message_id.ledgerId, duplicate.message_id.entryId) == DUPLICATE
        await client.close()
