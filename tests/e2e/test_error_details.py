"""Errors carry `google.rpc.Status` details: read with grpcio-status from another process, and
raised by the Python client as typed exceptions."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import grpc
import pytest

from gateway.backend import OutMessage
from gateway.backend.memory import InMemoryBackend
from gateway.client import GatewayClient
from gateway.client_errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    ResourceExhaustedError,
    UnavailableError,
)
from gateway.errors import Unavailable
from gateway.server.app import GatewayApp, running_gateway
from gateway.v1 import gateway_pb2

ROOT = Path(__file__).resolve().parents[2]

READER = r"""
import json, sys
import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from gateway.v1 import gateway_pb2, gateway_pb2_grpc

target, topic = sys.argv[1], sys.argv[2]
with grpc.insecure_channel(target) as channel:
    stub = gateway_pb2_grpc.GatewayStub(channel)
    try:
        stub.Publish(gateway_pb2.PublishRequest(
            topic=topic, messages=[gateway_pb2.Message(body=b"x", delay_ms=-5)]), timeout=30)
    except grpc.RpcError as call:
        status = rpc_status.from_call(call)
        out = {"code": call.code().name, "status_code": status.code, "message": status.message,
               "violations": [], "infos": []}
        for detail in status.details:
            if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                out["violations"] += [{"field": v.field, "description": v.description}
                                      for v in bad.field_violations]
            elif detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                out["infos"].append({"reason": info.reason, "domain": info.domain,
                                     "metadata": dict(info.metadata)})
        print(json.dumps(out))
"""


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[GatewayApp]:
    async with running_gateway(tmp_path / "data", max_message_bytes=64 * 1024) as running:
        yield running


@pytest.fixture
async def client(app: GatewayApp) -> AsyncIterator[GatewayClient]:
    async with GatewayClient(f"127.0.0.1:{app.grpc_port}") as c:
        yield c


def topic() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


async def test_bad_request_read_by_grpcio_status_in_another_process(app: GatewayApp) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", READER, f"127.0.0.1:{app.grpc_port}", topic(),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    got = json.loads(out)
    assert got["code"] == "INVALID_ARGUMENT"
    assert got["status_code"] == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    [violation] = got["violations"]
    assert violation["field"] == "messages[0].delay_ms"
    assert "-5" in violation["description"] and "0.." in violation["description"]
    [info] = got["infos"]
    assert info == {"reason": "INVALID_ARGUMENT", "domain": "retry-gateway",
                    "metadata": {"field": "messages[0].delay_ms",
                                 "allowed": info["metadata"]["allowed"]}}


async def test_client_raises_typed_invalid_argument(client: GatewayClient) -> None:
    with pytest.raises(InvalidArgumentError) as err:
        await client.publish(topic(), [b"x"], delay_ms=-1)
    exc = err.value
    assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT  # still an AioRpcError
    assert isinstance(exc, grpc.aio.AioRpcError)
    assert exc.reason == "INVALID_ARGUMENT" and exc.domain == "retry-gateway"
    assert [v.field for v in exc.field_violations] == ["messages[0].delay_ms"]
    assert exc.metadata["field"] == "messages[0].delay_ms"


async def test_consume_with_unknown_policy_is_typed(client: GatewayClient) -> None:
    with pytest.raises(InvalidArgumentError) as err:
        async with client.consume(topic(), "g", policy="kafka"):
            pass
    assert err.value.field_violations[0].field == "policy"
    assert "rocketmq" in err.value.field_violations[0].description


async def test_stale_receipt_has_its_reason(client: GatewayClient) -> None:
    with pytest.raises(FailedPreconditionError) as err:
        await client.stub.Settle(gateway_pb2.SettleRequest(settlements=[
            gateway_pb2.Settlement(receipt="nope.1.x", ack=gateway_pb2.Ack())]))
    assert err.value.reason == "STALE_RECEIPT"


async def test_message_too_large_names_size_and_limit(client: GatewayClient) -> None:
    with pytest.raises(ResourceExhaustedError) as err:
        await client.publish(topic(), [b"x" * 70_000])
    assert err.value.reason == "MESSAGE_TOO_LARGE"
    assert err.value.metadata["limit"] == str(64 * 1024)


async def test_undecodable_request_names_the_request(app: GatewayApp) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as channel:
        call = channel.unary_unary("/gateway.v1.Gateway/Publish")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call(b"\xff\xff\xff")
    from gateway.client_errors import typed

    exc = typed(err.value)
    assert isinstance(exc, InvalidArgumentError)
    assert exc.reason == "UNDECODABLE_REQUEST"
    assert exc.field_violations[0].field == "request"


async def test_huge_values_keep_the_status_small(client: GatewayClient) -> None:
    """A value of a megabyte in the refused field: the details echo it cut short, and the
    trailer stays far below a client's metadata limit."""
    with pytest.raises(InvalidArgumentError) as err:
        await client.receive(topic(), "g", policy="p" * 200 + "\u00e9" * 250)
    exc = err.value
    assert exc.status is not None and len(exc.status.SerializeToString()) < 4096
    assert len(exc.field_violations[0].description) <= 800


class _AwayBackend(InMemoryBackend):
    async def publish(self, topic: str, messages: Sequence[OutMessage]) -> list[str]:
        raise Unavailable("the back end is away")


async def test_unavailable_carries_retry_info(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data", backend=_AwayBackend()) as app:
        client = GatewayClient(f"127.0.0.1:{app.grpc_port}")
        with pytest.raises(UnavailableError) as err:
            await client.publish(topic(), [b"x"])
        await client.close()
    assert err.value.reason == "UNAVAILABLE"
    assert err.value.retry_delay_s == 1.0
