"""A copy from RabbitMQ keeps one ledger per broker, whether it reaches the broker over
`amqp://` or `amqps://`.

The ledger's name spelled the scheme (and its default port) as the URL gave it, so a copy begun
over `amqps://` and resumed over `amqp://` (or back) did not find what the first run stored and
stored every message it had not acknowledged again. The name is now the broker's, written with
`amqp://` and the `amqp://` default port for either scheme's default, and a ledger written
under the old `amqps://` spelling is still read (its keys count as copied)."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import aio_pika

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from amqp_node import URL
from migrate_procs import migrate, read_part, start_gateway, stop

from adapters.amqp.migrate import QueueSource
from gateway.admin_client import AdminClient, Target, connect
from gateway.migrate.endpoint import parse_url
from gateway.v1 import admin_pb2 as pb

IDS = [f"order-{i}" for i in range(5)]


def test_amqp_and_amqps_to_one_broker_name_one_ledger() -> None:
    def ledger(url: str) -> str:
        return QueueSource(parse_url("from", url)).ledger

    plain = ledger("amqp://u:p@Rabbit.example/%2F?queue=orders")
    assert plain == "amqp://rabbit.example:5672//?queue=orders"
    for same in ("amqps://u:p@rabbit.example/%2F?queue=orders",
                 "amqps://u:p@rabbit.example:5671/?queue=orders",
                 "amqp://u:p@rabbit.example:5672?queue=orders"):
        assert ledger(same) == plain, same
    # Another port is another listener: kept apart, TLS or not.
    assert ledger("amqps://rabbit.example:6671/%2F?queue=orders") == (
        "amqp://rabbit.example:6671//?queue=orders")
    assert ledger("amqps://rabbit.example/vh?queue=orders") != plain
    # The spelling an earlier version gave an `amqps://` source is still looked up.
    source = QueueSource(parse_url("from", "amqp://rabbit.example/%2F?queue=orders"))
    assert source.earlier_ledgers == ("amqps://rabbit.example:5671//?queue=orders",)


async def test_a_copy_begun_over_amqps_by_an_earlier_version_is_resumed_over_amqp(
    tmp_path: Path,
) -> None:
    queue = f"migrate-tls-{uuid.uuid4().hex[:10]}"
    connection = await aio_pika.connect(URL)
    channel = await connection.channel()
    await channel.declare_queue(queue, durable=True)
    gateway = start_gateway(tmp_path / "dest")
    try:
        # What an earlier version's `amqps://` run left: the copies stored at the destination
        # under its ledger spelling, the originals handed out and given back (not acknowledged).
        admin = connect(Target(gateway.target))
        try:
            request = pb.ImportMessagesRequest(
                topic="orders", ledger=f"amqps://127.0.0.1:5671//?queue={queue}")
            for message_id in IDS:
                request.messages.add(message_id=message_id, body=message_id.encode(),
                                     part=pb.MESSAGE_PART_READY, source_key=message_id)
            answer = await AdminClient(admin, timeout_s=30).import_messages(request)
            assert answer.stored == len(IDS)
        finally:
            await admin.close()
        for message_id in IDS:
            await channel.default_exchange.publish(
                aio_pika.Message(message_id.encode(), message_id=message_id), queue)
        declared = await channel.declare_queue(queue, passive=True)
        taken = [await declared.get(no_ack=False) for _ in IDS]
        for message in taken:
            assert message is not None
            await message.nack(requeue=True)

        done = migrate("copy", "--from", f"amqp://guest:guest@127.0.0.1:5672/?queue={queue}",
                       "--to", f"gateway://{gateway.target}/orders", "--json")
        assert done.returncode == 0, done.stderr
        assert '"skipped": 5' in done.stdout and '"stored": 0' in done.stdout, done.stdout
        copies = await read_part(gateway.target, "orders", "check", "ready")
        assert sorted(m.message_id for m in copies) == IDS
    finally:
        stop(gateway)
        await channel.queue_delete(queue)
        await connection.close()
