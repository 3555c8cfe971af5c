"""Producer deduplication survives a `kill -9` between a store's commit and the dedup
journal's fsync: on start the gateway reads the messages stored after what the journal covers
and recovers each producer's last sequence id from them (as a broker recovers it from its log),
so PRODUCER_SUCCESS tells the highest stored id and a resend is not stored twice.

The crash window is held open by the journal's test seam (`journal.STALL_ENV`): once a file
exists, the next journal write waits (after the store committed) until the test kills the
gateway."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pulsar
import pytest

from adapters.pulsar.frontend.journal import STALL_ENV
from tests.e2e.test_pulsar_frontend_dedup_restart import QUIET, Gateway

TOPIC = "dedup-crash"


def connect(url: str) -> pulsar.Client:
    return pulsar.Client(url, operation_timeout_seconds=10, logger=QUIET)


def stored(url: str, subscription: str) -> list[int]:
    """The sequence id of every message of the topic (its body is `m{id}`), oldest first."""
    client = connect(url)
    try:
        consumer = client.subscribe(TOPIC, subscription,
                                    initial_position=pulsar.InitialPosition.Earliest)
        out = []
        while True:
            try:
                msg = consumer.receive(1000)
            except pulsar.Timeout:
                return out
            out.append(int(msg.data()[1:]))
            consumer.acknowledge(msg)
    finally:
        client.close()


def send(producer: pulsar.Producer, sequence_ids: range) -> None:
    for sequence_id in sequence_ids:
        producer.send_async(f"m{sequence_id}".encode(), None, sequence_id=sequence_id)


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
def test_a_crash_before_the_journal_fsync_does_not_store_resends_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batching: bool
) -> None:
    stall = tmp_path / "stall"
    reached = tmp_path / "stall.reached"
    monkeypatch.setenv(STALL_ENV, str(stall))
    gateway = Gateway(tmp_path / "data", tmp_path / "gateway.log")
    gateway.start()
    try:
        client = connect(gateway.url)
        producer = client.create_producer(
            TOPIC, producer_name="steady", batching_enabled=batching,
            batching_max_publish_delay_ms=5, send_timeout_millis=20_000)
        send(producer, range(0, 5))
        producer.flush()  # journaled
        stall.touch()
        send(producer, range(5, 8))
        deadline = time.monotonic() + 30
        while not reached.exists():  # a store of 5.. committed, its journal write is held
            assert time.monotonic() < deadline, "the journal write was not reached"
            time.sleep(0.01)
        gateway.kill()
        stall.unlink()
        # The client may or may not have seen its broker go: closing it then can raise.
        with contextlib.suppress(pulsar.NotConnected, pulsar.ConnectError):
            client.close()
        gateway.start()
        before = stored(gateway.url, "before")
        highest = max(before)
        assert highest >= 5  # the crash came after the store
        client = connect(gateway.url)
        try:
            # A producer of the same name is told the highest stored id and resends the rest.
            again = client.create_producer(TOPIC, producer_name="steady",
                                           batching_enabled=batching,
                                           batching_max_publish_delay_ms=5)
            assert again.last_sequence_id() == highest
            send(again, range(5, 9))
            again.flush()
        finally:
            client.close()
        assert before == list(range(highest + 1))
        assert stored(gateway.url, "after") == list(range(9))
    finally:
        gateway.stop()


def test_the_same_producer_reconnects_and_its_resends_are_not_stored_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client is not closed: it reconnects to the restarted gateway on its own and resends
    every message it has no receipt for."""
    stall = tmp_path / "stall"
    reached = tmp_path / "stall.reached"
    monkeypatch.setenv(STALL_ENV, str(stall))
    gateway = Gateway(tmp_path / "data", tmp_path / "gateway.log")
    gateway.start()
    try:
        client = connect(gateway.url)
        try:
            producer = client.create_producer(
                TOPIC, producer_name="steady", batching_enabled=False,
                send_timeout_millis=60_000)
            send(producer, range(0, 3))
            producer.flush()
            stall.touch()
            send(producer, range(3, 6))
            deadline = time.monotonic() + 30
            while not reached.exists():
                assert time.monotonic() < deadline, "the journal write was not reached"
                time.sleep(0.01)
            gateway.kill()
            stall.unlink()
            gateway.start()
            producer.flush()  # resent after reconnecting, each answered
            send(producer, range(6, 8))
            producer.flush()
        finally:
            client.close()
        assert stored(gateway.url, "after") == list(range(8))
    finally:
        gateway.stop()
