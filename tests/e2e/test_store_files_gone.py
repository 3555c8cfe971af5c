"""The embedded store's files are deleted under a running `gateway serve` (its data directory
removed, or only the WAL): no publish gets a receipt afterwards (it would be written to a file
nobody will read again: before, every publish got one and all of them were gone after the
restart), and the gateway exits with status 75 so that its supervisor starts it afresh."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import grpc
import pytest

from gateway.client import GatewayClient
from tests.e2e.test_store_hung import gateway

pytestmark = pytest.mark.slow

EXIT_BACKEND_LOST = 75


async def publish_until_refused(client: GatewayClient, timeout_s: float = 60.0) -> int:
    """Publish until the gateway refuses (UNAVAILABLE) or goes away; return the receipts got."""
    receipts = 0
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ids = await client.publish("gone", [b"after"])
        except grpc.aio.AioRpcError as exc:
            assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc
            return receipts
        receipts += len(ids)
        await asyncio.sleep(0.01)
    raise AssertionError(f"{receipts} publishes got a receipt after the files were deleted")


@pytest.mark.parametrize("what", ["data directory", "wal"])
async def test_deleted_store_files_refuse_publishes_and_end_the_gateway(
    tmp_path: Path, what: str
) -> None:
    data = tmp_path / "data"
    log = tmp_path / "gateway.log"
    with gateway(data, log) as (proc, target):
        async with GatewayClient(target) as client:
            assert len(await client.publish("gone", [b"before"] * 10)) == 10
            if what == "wal":
                (data / "store.sqlite3-wal").unlink()
            else:
                shutil.rmtree(data)
            assert await publish_until_refused(client) == 0
        deadline = time.monotonic() + 60
        while proc.poll() is None:
            assert time.monotonic() < deadline, "the gateway did not exit"
            await asyncio.sleep(0.05)
    assert proc.returncode == EXIT_BACKEND_LOST
    assert "deleted or replaced" in log.read_text()
