"""`gateway migrate copy` through the CLI: a missing RabbitMQ destination queue is bad usage
(exit 2, naming `to=` and the queue), not a refused copy (exit 7); nothing leaves the source."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from amqp_node import URL
from migrate_procs import migrate, read_part, start_gateway, stop

from gateway.client import GatewayClient


async def test_a_missing_rabbitmq_destination_queue_is_bad_usage(tmp_path: Path) -> None:
    queue = f"migrate-none-{uuid.uuid4().hex[:10]}"
    source = start_gateway(tmp_path / "a")
    try:
        async with GatewayClient(source.target) as client:
            await client.publish("orders", [b"one", b"two"])
        done = migrate("copy", "--from", f"gateway://{source.target}/orders?group=billing",
                       "--to", f"{URL}?queue={queue}", timeout_s=120)
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert "to=" in done.stderr and queue in done.stderr, done.stderr
        assert "guest:guest" not in done.stderr
        assert len(await read_part(source.target, "orders", "billing", "ready")) == 2
    finally:
        stop(source)
