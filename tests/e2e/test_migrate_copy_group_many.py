"""`gateway migrate copy` from a gateway that knows more than the 1000 groups ListGroups lists:
the source group is looked up by name (ListGroups with a topic and group filter), so a group
beyond the first 1000 is not refused as unknown; `gateway admin groups --topic/--group` filter
the same way."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc
from migrate_procs import migrate, read_part, start_gateway, stop

from gateway.admin_client import AdminClient
from gateway.client import GatewayClient

MANY = 1001


async def test_a_source_group_beyond_the_first_1000_is_found(tmp_path: Path) -> None:
    source = start_gateway(tmp_path / "a")
    destination = start_gateway(tmp_path / "b")
    try:
        async with GatewayClient(source.target) as client:
            await client.publish("a-many", [b"x"])
            # (topic, group) pairs sort by topic: these 1001 come before every group of orders.
            for start in range(0, MANY, 50):
                await asyncio.gather(*(client.receive("a-many", f"g{i:04d}", policy="rocketmq",
                                                      max_messages=1)
                                       for i in range(start, min(start + 50, MANY))))
            await client.publish("orders", [f"m{i}".encode() for i in range(3)])
            async with client.consume("orders", "billing", policy="rocketmq",
                                      prefetch=1) as stream:
                msg = await stream.next(10)
                assert msg is not None and (await msg.ack()).ok
        async with grpc.aio.insecure_channel(source.target) as channel:
            admin = AdminClient(channel, timeout_s=60)
            everything = await admin.groups()
            assert everything.truncated
            assert ("orders", "billing") not in {(g.topic, g.group) for g in everything.groups}
            (only,) = (await admin.groups("orders", "billing")).groups
            assert (only.topic, only.group) == ("orders", "billing")
            assert not (await admin.groups("orders")).truncated

        to = f"gateway://{destination.target}/orders?group=billing"
        run = migrate("copy", "--from", f"gateway://{source.target}/orders?group=billing",
                      "--to", to)
        assert run.returncode == 0, run.stderr
        assert len(await read_part(destination.target, "orders", "billing", "ready")) == 2
        typo = migrate("copy", "--from", f"gateway://{source.target}/orders?group=biling",
                       "--to", to, "--dry-run")
        assert typo.returncode == 2 and "did you mean 'billing'" in typo.stderr, typo.stderr

        listed = subprocess.run(
            [sys.executable, "-m", "gateway.cli", "groups", "--target", source.target,
             "--topic", "a-many", "--group", "g1000", "--json"],
            capture_output=True, text=True, timeout=60, check=False)
        assert listed.returncode == 0, listed.stderr
        assert [(g["topic"], g["group"]) for g in json.loads(listed.stdout)["groups"]] == [
            ("a-many", "g1000")]
    finally:
        stop(source)
        stop(destination)
