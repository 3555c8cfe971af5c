"""`--max-topics`: a topic made on first use is refused once the back end holds that many.
Every publish, receive and subscribe on a new name made a topic (and its group) kept for good:
50 Receive calls on made-up names left 50 topics in the store, and nothing bounded it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from gateway.client import GatewayClient
from gateway.server.app import running_gateway

REPO = Path(__file__).resolve().parents[2]


async def refused(call: object) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call  # type: ignore[misc]
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    said = info.value.details() or ""
    assert "max_topics" in said and "3 topics" in said
    return said


async def test_new_topics_past_the_limit_are_refused_and_old_ones_still_work(
    tmp_path: Path,
) -> None:
    for name in ("a", "b", "c"):
        async with one_gateway(tmp_path) as client:  # a restart each time: counted from the store
            await client.publish(name, [name.encode()])
    async with one_gateway(tmp_path) as client:
        await refused(client.publish("d", [b"d"]))
        await refused(client.receive("e", "g", policy="rocketmq-simple", max_messages=1,
                                     wait_ms=0))
        await client.publish("a", [b"again"])  # an existing topic: as ever
        got = await client.receive("a", "g", policy="rocketmq-simple", max_messages=2,
                                   wait_ms=1000)
        assert [d.body for d in got] == [b"a", b"again"]
    async with one_gateway(tmp_path) as client:
        await refused(client.publish("d", [b"d"]))
        await client.publish("b", [b"b2"])


@contextlib.asynccontextmanager
async def one_gateway(tmp_path: Path) -> AsyncIterator[GatewayClient]:
    async with (
        running_gateway(tmp_path / "data", max_topics=3) as app,
        GatewayClient(f"127.0.0.1:{app.grpc_port}") as client,
    ):
        yield client


@pytest.mark.parametrize("value", ["0", "10000001", "many"])
@pytest.mark.parametrize(("flag", "names"), [("--max-topics", "topics"),
                                             ("--max-stored-groups", "groups")])
def test_the_flag_is_checked(tmp_path: Path, value: str, flag: str, names: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(tmp_path),
         "--listen", "127.0.0.1:0", flag, value],
        capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 2, done.stderr
    assert "max" in done.stderr and names in done.stderr
