"""Server reflection lists every gRPC service the gateway's port serves, products' included, and
describes each one, read with grpcio-reflection's own client."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from gateway.server.app import running_gateway

GATEWAY_SERVICES = {
    "gateway.v1.Gateway",
    "gateway.v1.Admin",
    "grpc.health.v1.Health",
    "grpc.reflection.v1alpha.ServerReflection",
}


def listed(address: str) -> tuple[set[str], dict[str, list[str]]]:
    """The service names reflection lists, and each one's methods as described."""
    with grpc.insecure_channel(address) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        names = set(database.get_services())
        pool = DescriptorPool(database)
        methods = {
            name: [m.name for m in pool.FindServiceByName(name).methods] for name in names
        }
    return names, methods


async def test_reflection_lists_and_describes_every_service(tmp_path: Path) -> None:
    async with running_gateway(data_dir=tmp_path / "data") as app:
        assert "rocketmq" in app.front_ends  # the RocketMQ front end is mounted by default
        names, methods = await asyncio.to_thread(listed, f"127.0.0.1:{app.grpc_port}")
    assert names == GATEWAY_SERVICES | {
        "apache.rocketmq.v2.MessagingService",
        "opentelemetry.proto.collector.metrics.v1.MetricsService",  # RocketMQ SDKs' metrics
    }
    assert "SendMessage" in methods["apache.rocketmq.v2.MessagingService"]
    assert "ReceiveMessage" in methods["apache.rocketmq.v2.MessagingService"]
    assert "Publish" in methods["gateway.v1.Gateway"]
    assert "Check" in methods["grpc.health.v1.Health"]
