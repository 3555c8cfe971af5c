"""`gateway_telemetry_dropped_total`: the telemetry events the spool lost, by reason, on /metrics
(they showed in no metric)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from gateway.server.app import running_gateway
from gateway.telemetry.spool import DROP_REASONS, segment_name
from tests.e2e.test_metrics import scrape

CAP = 256 << 20
"""The spool's size cap in a gateway."""


def _dropped(samples: dict[str, list[tuple[dict[str, str], float]]]) -> dict[str, float]:
    return {labels["reason"]: value
            for labels, value in samples.get("gateway_telemetry_dropped_total", [])}


async def test_disk_cap_drops_show_on_metrics(tmp_path: Path) -> None:
    """Segments left over the 256 MiB cap are deleted when the gateway starts: their events are
    counted under reason="disk_cap", the other reasons are there at 0."""
    spool = tmp_path / "data" / "telemetry"
    spool.mkdir(parents=True)
    row = json.dumps({"seq": 1}) + "\n"
    (spool / segment_name(1, 3)).write_text(row * 3)  # the oldest: deleted
    with open(spool / segment_name(4, 4), "wb") as big:  # sparse: no disk, no reading
        big.truncate(CAP - 10)
    async with running_gateway(tmp_path / "data", admin_listen="127.0.0.1:0",
                               telemetry=True) as app:
        dropped = _dropped(await asyncio.to_thread(scrape, app))
    assert dropped == {reason: (3.0 if reason == "disk_cap" else 0.0)
                       for reason in DROP_REASONS}
    assert not (spool / segment_name(1, 3)).exists()
    assert os.path.getsize(spool / segment_name(4, 4)) == CAP - 10


async def test_without_telemetry_the_metric_has_no_samples(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data", admin_listen="127.0.0.1:0") as app:
        assert _dropped(await asyncio.to_thread(scrape, app)) == {}
