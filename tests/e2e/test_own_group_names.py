"""A broadcast consumer's own group is named `group#consumer`: nobody can take that name as an
ordinary group, so nobody shares its messages, or reads them with a right to another group."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pulsar
import pytest

from adapters.pulsar.frontend import PulsarFrontEnd
from gateway.client import GatewayClient
from gateway.server.app import GatewayApp, running_gateway
from gateway.v1 import gateway_pb2, gateway_pb2_grpc
from tests.e2e.test_pulsar_frontend import QUIET, run

TOKENS = """
[[principal]]
name = "screens"
token = "screens-secret"
publish = ["news"]
consume = ["news"]
groups = ["lobby"]

[[principal]]
name = "other"
token = "other-secret"
consume = ["news"]
groups = ["lobby#*", "lobby#hall"]
"""


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[GatewayApp]:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(TOKENS)
    async with running_gateway(tmp_path / "data", tokens_file=str(tokens)) as running:
        yield running


def _meta(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


async def test_another_principal_cannot_read_a_broadcast_consumers_own_group(
    app: GatewayApp,
) -> None:
    target = f"127.0.0.1:{app.grpc_port}"
    async with GatewayClient(target, token="screens-secret") as screens:
        await screens.publish("news", [b"for the lobby screen"])
        async with screens.consume("news", "lobby", policy="rocketmq", broadcast=True,
                                   consumer_id="hall") as stream:
            got = await stream.next(10.0)
            assert got is not None and got.body == b"for the lobby screen"
            await got.ack()
        await screens.publish("news", [b"while the screen is away"])
    async with grpc.aio.insecure_channel(target) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        request = gateway_pb2.ReceiveRequest(topic="news", group="lobby#hall",
                                             policy="rocketmq-simple", max_messages=10,
                                             invisible_ms=10_000)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Receive(request, metadata=_meta("other-secret"))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "group" in (refused.value.details() or "")
        assert "#" in (refused.value.details() or "")
    # The screen's own group still holds what came while it was away.
    async with (
        GatewayClient(target, token="screens-secret") as screens,
        screens.consume("news", "lobby", policy="rocketmq", broadcast=True,
                        consumer_id="hall") as stream,
    ):
        got = await stream.next(10.0)
        assert got is not None and got.body == b"while the screen is away"
        await got.ack()


async def test_a_group_name_with_a_hash_is_refused_on_every_front_end(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data") as app:
        async with GatewayClient(f"127.0.0.1:{app.grpc_port}") as client:
            with pytest.raises(Exception) as refused:
                async with client.consume("news", "a#b", policy="rocketmq") as stream:
                    await stream.next(5.0)
            assert "'#'" in str(refused.value)
        front = PulsarFrontEnd(app.engine, "127.0.0.1", 0)
        await front.start()
        try:
            pulsar_client = pulsar.Client(f"pulsar://127.0.0.1:{front.port}",
                                          operation_timeout_seconds=10, logger=QUIET)
            try:
                with pytest.raises(pulsar.PulsarException):
                    await run(pulsar_client.subscribe, "news", "a#b")
                consumer = await run(pulsar_client.subscribe, "news", "ab")  # others are served
                await run(consumer.close)
            finally:
                await run(pulsar_client.close)
        finally:
            await front.stop()
        assert app.engine.group_state("news", "a#b") is None
