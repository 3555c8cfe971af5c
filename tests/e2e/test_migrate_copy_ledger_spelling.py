"""A copy run again with the source spelled another way finds the ledger of the first run.

The ledger's name is the source's: it used to be spelled as the URL spelled the host, so a
second run from `127.0.0.1` did not find what a run from `localhost` had stored, and stored
every message it had not acknowledged again. The source's host is now written one way (lower
case, no trailing dot, the loopback names as 127.0.0.1, the default port written out)."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import aio_pika

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from amqp_node import URL
from migrate_procs import migrate, read_part, start_gateway, stop

SPELLINGS = (
    "amqp://guest:guest@localhost:5672/%2F?queue={q}",
    "amqp://guest:guest@127.0.0.1?queue={q}",
    "amqp://guest:guest@LOCALHOST:5672/?queue={q}",
)
IDS = [f"order-{i}" for i in range(5)]


async def _publish_redelivered(channel: aio_pika.abc.AbstractChannel, queue: str) -> None:
    """The five messages again, handed out once and given back: what a run killed after the
    destination stored them and before it acknowledged them leaves at the source."""
    for message_id in IDS:
        await channel.default_exchange.publish(
            aio_pika.Message(message_id.encode(), message_id=message_id), queue)
    declared = await channel.declare_queue(queue, passive=True)
    taken = [await declared.get(no_ack=False) for _ in IDS]
    for message in taken:
        assert message is not None
        await message.nack(requeue=True)


async def test_two_spellings_of_one_broker_share_one_ledger(tmp_path: Path) -> None:
    queue = f"migrate-spelling-{uuid.uuid4().hex[:10]}"
    connection = await aio_pika.connect(URL)
    channel = await connection.channel()
    await channel.declare_queue(queue, durable=True)
    gateway = start_gateway(tmp_path / "dest")
    try:
        destination = f"gateway://{gateway.target}/orders"
        for n, spelling in enumerate(SPELLINGS):
            await _publish_redelivered(channel, queue)
            done = migrate("copy", "--from", spelling.format(q=queue), "--to", destination,
                           "--json")
            assert done.returncode == 0, done.stderr
            # The first run stores them; every later one, whatever the spelling, finds them
            # in the first run's ledger.
            expected = '"stored": 5' if n == 0 else '"skipped": 5'
            assert expected in done.stdout, (spelling, done.stdout)
            copies = await read_part(gateway.target, "orders", "check", "ready")
            assert sorted(m.message_id for m in copies) == IDS, spelling
    finally:
        stop(gateway)
        await channel.queue_delete(queue)
        await connection.close()
