"""`naming=S` on a gateway side of `gateway migrate copy` is the gateway's to judge, not the
command's: the schemes the products installed where the command runs register need not be the
gateway's (another version, other products). A scheme the command knew and the gateway did
not passed the dry run and was refused only with the first batch (exit 7); the gateway is now
asked when the side opens, read-only, so that the dry run and the real run refuse it (exit 2,
naming the side) before anything is taken. Here the gateway serves the RabbitMQ product alone:
it knows no Pulsar scheme."""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

import aio_pika

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from amqp_node import URL
from migrate_procs import migrate

from adapters.amqp.product import PRODUCT
from gateway.server.app import GatewayApp
from gateway.server.config import build


async def test_a_naming_the_gateway_does_not_know_is_refused_before_anything_is_taken(
    tmp_path: Path,
) -> None:
    queue = f"migrate-naming-{uuid.uuid4().hex[:10]}"
    connection = await aio_pika.connect(URL)
    channel = await connection.channel()
    await channel.declare_queue(queue, durable=True)
    for i in range(3):
        await channel.default_exchange.publish(aio_pika.Message(f"m{i}".encode()), queue)
    app = GatewayApp(build(dict(listen="127.0.0.1:0", data_dir=str(tmp_path / "data"))),
                     products=[PRODUCT])
    await app.start()
    try:
        target = f"127.0.0.1:{app.grpc_port}"
        source = f"{URL}?queue={queue}"
        for dry in ([], ["--dry-run"]):
            run = await asyncio.to_thread(
                migrate, "copy", "--from", source, "--to",
                f"gateway://{target}/orders?group=billing&naming=pulsar-2.9", *dry)
            assert run.returncode == 2, (dry, run.stdout, run.stderr)
            assert "to='gateway://" in run.stderr and "naming=pulsar-2.9" in run.stderr, (
                run.stderr)
            assert "rabbitmq" in run.stderr  # the gateway's own schemes
            assert "Traceback" not in run.stderr
        declared = await channel.declare_queue(queue, passive=True)
        assert declared.declaration_result.message_count == 3  # nothing taken

        # As a source too: refused before anything is read.
        run = await asyncio.to_thread(
            migrate, "copy", "--from",
            f"gateway://{target}/orders?group=billing&naming=pulsar-2.9&new-group=true",
            "--to", f"{URL}?queue={queue}", "--dry-run")
        assert run.returncode == 2, (run.stdout, run.stderr)
        assert "from='gateway://" in run.stderr and "naming=pulsar-2.9" in run.stderr

        # A scheme it knows goes through.
        run = await asyncio.to_thread(
            migrate, "copy", "--from", source, "--to",
            f"gateway://{target}/orders?group=billing&naming=rabbitmq")
        assert run.returncode == 0, run.stderr
    finally:
        await app.stop(1.0)
        await channel.queue_delete(queue)
        await channel.queue_delete(queue + ".migrate-ledger", if_unused=False, if_empty=False)
        await connection.close()
