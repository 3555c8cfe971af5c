"""Many large publishes at once (`--max-publish-mb`): the back end is handed at most that many
bytes of publishes at a time, every client together, and every publish is still stored. Before,
each publish went to the store at once: twenty gRPC `Publish` calls of 57 MiB sent together took
the gateway to 5.5 GB (3.8 GB with the budget: the gRPC layer still holds each request it took
in)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import grpc

from gateway.backend import OutMessage
from gateway.server.app import running_gateway
from gateway.v1 import gateway_pb2, gateway_pb2_grpc

MiB = 1 << 20


async def test_the_store_is_handed_at_most_the_budget_at_once(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "data", max_publish_mb=2) as app:
        backend = app.engine.backend
        real_publish = backend.publish
        held = 0
        most = 0

        async def publish(topic: str, messages: Sequence[OutMessage]) -> list[str]:
            nonlocal held, most
            size = sum(len(m.body) for m in messages)
            held += size
            most = max(most, held)
            try:
                await asyncio.sleep(0.05)  # a slow disk: the others arrive meanwhile
                return await real_publish(topic, messages)
            finally:
                held -= size

        backend.publish = publish  # type: ignore[method-assign]
        options = [("grpc.max_send_message_length", 64 * MiB)]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}",
                                             options=options) as channel:
            stub = gateway_pb2_grpc.GatewayStub(channel)
            bodies = [bytes([i]) * 900_000 for i in range(12)]
            replies = await asyncio.gather(*(
                stub.Publish(gateway_pb2.PublishRequest(
                    topic="big", messages=[gateway_pb2.Message(body=b)]))
                for b in bodies))
            most_of_twelve, most = most, 0
            # One over the budget goes alone.
            await stub.Publish(gateway_pb2.PublishRequest(
                topic="big", messages=[gateway_pb2.Message(body=b"x" * (3 * MiB))]))
        assert all(len(r.message_ids) == 1 for r in replies)
        assert most_of_twelve <= 2 * MiB, most_of_twelve
        assert most_of_twelve >= 2 * 900_000  # two fit together: not one at a time
        assert most == 3 * MiB
        stats = await real_publish.__self__.stats("big", "nobody", app.engine.now_ms())
        assert stats.ready == 13
