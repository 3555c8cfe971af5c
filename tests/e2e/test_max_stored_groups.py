"""`--max-stored-groups`: a group made on first use is refused once the back end keeps that many.

Every receive, subscribe or group creation on a new group name made a group the embedded store
keeps for good (its position, about 1 KB of memory each, and its rows): 40,000 receives on
made-up group names of one topic grew `gateway serve` by 195 MiB, and nothing bounded it
(`--max-groups` bounds the groups the engine runs at once, not those the store keeps). A client
that names its group after its process or its run does this by mistake. The flag's range is
checked in `test_max_topics.py` with `--max-topics`'.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pulsar
import pytest

from gateway.client import GatewayClient
from gateway.engine.clock import SystemClock
from gateway.server.app import GatewayApp, running_gateway
from tests.e2e.pulsar_stack import QUIET, run

SIMPLE = "rocketmq-simple"


async def refused(call: object) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call  # type: ignore[misc]
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    said = info.value.details() or ""
    assert "max_stored_groups" in said and "3 groups" in said, said


@contextlib.asynccontextmanager
async def one_gateway(tmp_path: Path) -> AsyncIterator[tuple[GatewayApp, GatewayClient]]:
    async with (
        running_gateway(tmp_path / "data", clock=SystemClock(), max_stored_groups=3,
                        pulsar_listen="127.0.0.1:0") as app,
        GatewayClient(f"127.0.0.1:{app.grpc_port}") as client,
    ):
        yield app, client


async def test_new_groups_past_the_limit_are_refused_and_old_ones_still_work(
    tmp_path: Path,
) -> None:
    for group in ("g1", "g2", "g3"):
        async with one_gateway(tmp_path) as (_, client):  # a restart each: counted from the store
            await client.publish("orders", [group.encode()])
            await client.receive("orders", group, policy=SIMPLE, max_messages=1, wait_ms=0)
    async with one_gateway(tmp_path) as (app, client):
        await refused(client.receive("orders", "g4", policy=SIMPLE, max_messages=1, wait_ms=0))
        await refused(client.receive("other", "g1", policy=SIMPLE, max_messages=1, wait_ms=0))
        # Pulsar: as at its maxSubscriptionsPerTopic.
        pulsar_client = pulsar.Client(f"pulsar://127.0.0.1:{app.front_ends['pulsar'].port}",
                                      operation_timeout_seconds=5, logger=QUIET)
        try:
            with pytest.raises(pulsar.NotAllowedError):
                await run(pulsar_client.subscribe, "orders", "g5")
            # An existing group: as ever, on every front end.
            consumer = await run(pulsar_client.subscribe, "orders", "g1",
                                 initial_position=pulsar.InitialPosition.Earliest)
            await client.publish("orders", [b"again"])
            message = await run(consumer.receive, 5000)
            assert message.data() in {b"g1", b"g2", b"g3", b"again"}
            await run(consumer.acknowledge, message)
        finally:
            await run(pulsar_client.close)
        got = await client.receive("orders", "g2", policy=SIMPLE, max_messages=5, wait_ms=1000)
        assert got
