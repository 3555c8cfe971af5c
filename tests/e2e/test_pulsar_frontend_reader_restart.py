"""Readers' (non-durable) subscriptions do not survive a restart (second attack round). A reader
attached when the gateway was killed left its group in the store; the next start took it for a
durable subscription: the reader was refused for ever, a durable SUBSCRIBE of the name silently
adopted it, and it kept every message of the topic. The front end lists the groups it made in
its state dir and drops them at the next start.

A kill -9 is simulated on the state it leaves: the group in the store and the list on disk as
they were while the reader was attached."""

from __future__ import annotations

import shutil
from pathlib import Path

import tests.pulsar_raw as raw
from adapters.pulsar.frontend import readers
from adapters.pulsar.wire import wire_pb2 as pb
from tests.e2e.pulsar_stack import Stack, stack_fixture  # noqa: F401  (fixture `stack`)
from tests.pulsar_raw import Cmd, RawClient

SHARED = pb.CommandSubscribe.Shared
TOPIC = "raw"  # what tests.pulsar_raw's commands name


def reader(consumer_id: int, request_id: int, *, durable: bool = False) -> pb.BaseCommand:
    cmd = raw.subscribe(consumer_id, request_id, SHARED)
    cmd.subscribe.subscription = "rdr"
    cmd.subscribe.durable = durable
    return cmd


async def crash_with_a_reader_attached(stack: Stack, tmp_path: Path) -> None:
    """Leave the store and the state dir as a kill -9 with a reader attached leaves them."""
    client = await RawClient.open(stack.port)
    client.send(reader(1, 1))
    await client.expect(Cmd.SUCCESS)
    listed = stack.data_dir / "pulsar" / readers.FILE_NAME
    assert listed.exists()
    shutil.copy(listed, tmp_path / "listed")
    await client.close()
    await stack.stop()  # a clean stop drops the group and empties the list ...
    stack.data_dir.mkdir(exist_ok=True)
    await stack.start()
    assert stack.app is not None and stack.front is not None
    await stack.app.engine.create_group(TOPIC, "rdr")  # ... so put back what a crash leaves
    await stack.stop()
    shutil.copy(tmp_path / "listed", listed)
    await stack.start()


async def test_a_reader_comes_back_after_a_crash(stack: Stack, tmp_path: Path) -> None:
    await crash_with_a_reader_attached(stack, tmp_path)
    assert stack.app is not None
    assert "rdr" not in [g.group for g in stack.app.engine.groups() if g.topic == TOPIC]
    client = await RawClient.open(stack.port)
    client.send(reader(1, 1))
    await client.expect(Cmd.SUCCESS)
    await client.close()


async def test_a_durable_subscribe_does_not_adopt_a_crashed_readers_group(
    stack: Stack, tmp_path: Path,
) -> None:
    await crash_with_a_reader_attached(stack, tmp_path)
    publisher = await RawClient.open(stack.port)
    publisher.send(raw.producer(1, 1, "pub"))
    await publisher.expect(Cmd.PRODUCER_SUCCESS)
    publisher.send(raw.send(1, 0), raw.meta("pub", 0), b"before")
    await publisher.expect(Cmd.SEND_RECEIPT)
    # A new durable subscription starts at Latest: it does not see "before" (an adopted
    # leftover group, made at the earliest message, would deliver it).
    client = await RawClient.open(stack.port)
    cmd = reader(1, 1, durable=True)
    cmd.subscribe.initialPosition = pb.CommandSubscribe.Latest
    client.send(cmd)
    await client.expect(Cmd.SUCCESS)
    client.send(raw.flow(1, 10))
    publisher.send(raw.send(1, 1), raw.meta("pub", 1), b"after")
    await publisher.expect(Cmd.SEND_RECEIPT)
    assert (await client.expect(Cmd.MESSAGE)).payload == b"after"
    await client.close()
    await publisher.close()
