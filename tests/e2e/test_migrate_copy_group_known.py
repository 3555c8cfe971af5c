"""`gateway migrate copy` from a gateway refuses a group the gateway does not know: a new group
is handed the topic from its first message, so a misspelt group copied (and removed for that
group) every message of the topic where the user meant what their group had not consumed yet.
Through the command against running gateways; the source gateway is restarted first, so that
the group is known only by the position its store keeps."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from migrate_procs import migrate, read_part, start_gateway, stop

from gateway.client import GatewayClient


async def test_an_unknown_source_group_is_refused_unless_new_group_is_said(
    tmp_path: Path,
) -> None:
    source = start_gateway(tmp_path / "a")
    destination = start_gateway(tmp_path / "b")
    try:
        async with GatewayClient(source.target) as client:
            await client.publish("orders", [f"m{i}".encode() for i in range(5)])
            async with client.consume("orders", "billing", policy="rocketmq", prefetch=2) as stream:
                for _ in range(2):
                    msg = await stream.next(10)
                    assert msg is not None
                    assert (await msg.ack()).ok
        stop(source)
        source = start_gateway(tmp_path / "a")  # billing is known by its stored position only
        to = f"gateway://{destination.target}/orders?group=billing"
        typo = f"gateway://{source.target}/orders?group=biling"
        for dry in ([], ["--dry-run"]):
            run = migrate("copy", "--from", typo, "--to", to, *dry)
            assert run.returncode == 2, (dry, run.stdout, run.stderr)
            assert "no group 'biling'" in run.stderr, run.stderr
            assert "known groups of the topic: 'billing'" in run.stderr, run.stderr
            assert "new-group=true" in run.stderr and "Traceback" not in run.stderr
        assert await read_part(destination.target, "orders", "billing", "ready") == []
        assert len(await read_part(source.target, "orders", "billing", "ready")) == 3

        bad = migrate("copy", "--from", typo + "&new-group=maybe", "--to", to)
        assert bad.returncode == 2 and "new-group=true" in bad.stderr, bad.stderr

        known = migrate("copy", "--from", f"gateway://{source.target}/orders?group=billing",
                        "--to", to)
        assert known.returncode == 0, known.stderr
        assert len(await read_part(destination.target, "orders", "billing", "ready")) == 3

        # Said to be new: the whole topic, as the user asked.
        fresh = f"gateway://{source.target}/orders?group=audit&new-group=true"
        run = migrate("copy", "--from", fresh,
                      "--to", f"gateway://{destination.target}/audit-copy")
        assert run.returncode == 0, run.stderr
        assert len(await read_part(destination.target, "audit-copy", "x", "ready")) == 5
    finally:
        stop(source)
        stop(destination)
