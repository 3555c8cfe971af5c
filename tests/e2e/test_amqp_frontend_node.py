"""The Node.js client amqplib (unmodified, from npm) against the AMQP front end: publish with
confirms, consume, nack -> redelivered after the queue's interval.

npm installs the client into `tests/node/node_modules` (the versions in package-lock.json) the
first time; without node and npm the test is skipped and says so.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tests.amqp_front import amqp_gateway, unique
from tests.node_clients import node_script

SCALE = 0.01
INTERVAL_S = 10


async def test_amqplib_publishes_consumes_and_gets_a_nack_redelivered(tmp_path: Path) -> None:
    script = node_script("amqplib", "amqp_client.js")
    async with amqp_gateway(tmp_path / "data", time_scale=SCALE) as gw:
        queue = unique("node")
        process = await asyncio.create_subprocess_exec(
            "node", str(script), gw.url, queue,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == 0, err.decode()
    first, second = json.loads(out)
    assert first["body"] == second["body"] == "from-node"
    assert first["contentType"] == "text/plain" and first["headers"]["lang"] == "js"
    assert not first["redelivered"] and second["redelivered"]
    assert second["headers"]["x-delivery-count"] == 1
    # Redelivered after the queue's interval (10 s at time scale 0.01), not before.
    assert second["atMs"] - first["atMs"] >= INTERVAL_S * SCALE * 1000 - 20
