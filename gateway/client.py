"""A small asyncio client for the gateway API: batched publishes and settle-once deliveries.

    async with GatewayClient("127.0.0.1:50051") as client:
        await client.publish("orders", [b"hello"])
        async with client.consume("orders", "billing", policy="rocketmq") as stream:
            async for msg in stream:
                async with msg.process():  # ack; on an exception, fail with it as the reason
                    handle(msg.body)

A secured gateway: `GatewayClient(target, tls=ClientTLS(ca="ca.pem"), token="...")` (and
`cert=`, `key=` for mTLS). A consume loop whose stream fails raises `StreamFailed`;
`consume(..., reconnect=Reconnect())` resubscribes instead (see `gateway.client_stream` for
what happens to deliveries in flight). Other languages generate stubs from
`protos/gateway/v1/` (shipped in the wheel as `gateway/v1/*.proto`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from types import TracebackType

from gateway.client_message import Message, SettledTwice
from gateway.client_publish import Publisher, publish_request
from gateway.client_reconnect import TRANSIENT, Reconnect, StreamFailed
from gateway.client_stream import CLOSE_WAIT_S, ConsumeStream
from gateway.client_tls import ClientTLS, bearer_metadata, open_channel
from gateway.v1 import admin_pb2, admin_pb2_grpc, gateway_pb2, gateway_pb2_grpc

__all__ = [
    "CLOSE_WAIT_S",
    "TRANSIENT",
    "ClientTLS",
    "ConsumeStream",
    "GatewayClient",
    "Message",
    "Publisher",
    "Reconnect",
    "SettledTwice",
    "StreamFailed",
]


class _UnarySettler:
    """Settles deliveries of `receive()` with `Settle` calls."""

    generation = 0

    def __init__(self, stub: gateway_pb2_grpc.GatewayStub,
                 metadata: tuple[tuple[str, str], ...]) -> None:
        self._stub = stub
        self._metadata = metadata or None

    def settle_nowait(
        self, settlement: gateway_pb2.Settlement
    ) -> asyncio.Future[gateway_pb2.SettleResult]:
        return asyncio.ensure_future(self._settle(settlement))

    def ack_nowait(self, receipt: str) -> asyncio.Future[gateway_pb2.SettleResult]:
        return self.settle_nowait(gateway_pb2.Settlement(receipt=receipt, ack=gateway_pb2.Ack()))

    def fail_nowait(self, receipt: str) -> asyncio.Future[gateway_pb2.SettleResult]:
        return self.settle_nowait(gateway_pb2.Settlement(receipt=receipt,
                                                         fail=gateway_pb2.Fail()))

    def ack_quietly(self, receipt: str, generation: int) -> None:
        raise TypeError("ack_quietly needs a consume stream; use ack() after receive()")

    async def _settle(self, settlement: gateway_pb2.Settlement) -> gateway_pb2.SettleResult:
        response = await self._stub.Settle(
            gateway_pb2.SettleRequest(settlements=[settlement]), metadata=self._metadata)
        result: gateway_pb2.SettleResult = response.results[0]
        return result


class GatewayClient:
    """A connection to one gateway. `tls`: TLS settings (None: plaintext); `token`: the bearer
    token sent on every call of this client (a gateway with `--tokens-file` requires one)."""

    def __init__(
        self,
        target: str,
        *,
        tls: ClientTLS | None = None,
        token: str | None = None,
        max_message_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        options = [
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
        ]
        self.metadata = bearer_metadata(token)
        """Sent with every call (`authorization: Bearer <token>`; empty without a token)."""
        self.channel = open_channel(target, tls, options)
        self.stub = gateway_pb2_grpc.GatewayStub(self.channel)
        self.admin = admin_pb2_grpc.AdminStub(self.channel)
        self._settler = _UnarySettler(self.stub, self.metadata)

    async def __aenter__(self) -> GatewayClient:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self.channel.close()

    async def publish(
        self,
        topic: str,
        bodies: Sequence[bytes | gateway_pb2.Message],
        *,
        properties: Mapping[str, str] | None = None,
        key: str = "",
        tag: str = "",
        delay_ms: int = 0,
    ) -> list[str]:
        """Publish a batch; returns the ids once the gateway made them durable. Bytes get
        `properties`, `key`, `tag` and `delay_ms`; a `Message` is sent as it is."""
        request = publish_request(topic, bodies, properties, key, tag, delay_ms)
        response = await self.stub.Publish(request, metadata=self.metadata or None)
        return list(response.message_ids)

    def publisher(self) -> Publisher:
        """A PublishStream (enter it with `async with`): `publish` as above, pipelined on one
        stream, for publishers that send often (see `gateway.client_publish`)."""
        return Publisher(self.stub, self.metadata)

    def consume(
        self,
        topic: str,
        group: str,
        *,
        policy: str,
        options: Mapping[str, str] | None = None,
        prefetch: int = 64,
        consumer_type: gateway_pb2.ConsumerType = gateway_pb2.CONSUMER_TYPE_SHARED,
        broadcast: bool = False,
        naming: str = "",
        consumer_id: str = "",
        tag_filter: str = "",
        reconnect: Reconnect | bool | None = None,
        selector: str = "",
    ) -> ConsumeStream:
        """A push subscription (enter it with `async with`). When its stream fails, `async
        for` and `next()` raise `StreamFailed`; with `reconnect` (a `Reconnect`, or True for
        its defaults) they resubscribe with back-off instead, and deliveries in flight come
        again (see `gateway.client_stream`)."""
        again = Reconnect() if reconnect is True else (reconnect or None)
        return ConsumeStream(
            self.stub,
            gateway_pb2.Subscribe(
                topic=topic, group=group, policy=policy, policy_options=dict(options or {}),
                consumer_type=consumer_type, broadcast=broadcast, naming=naming,
                prefetch=prefetch, consumer_id=consumer_id, tag_filter=tag_filter,
                selector=selector,
            ),
            metadata=self.metadata,
            reconnect=again,
        )

    async def receive(
        self,
        topic: str,
        group: str,
        *,
        policy: str,
        max_messages: int = 16,
        invisible_ms: int = 0,
        wait_ms: int = 0,
        options: Mapping[str, str] | None = None,
        consumer_type: gateway_pb2.ConsumerType = gateway_pb2.CONSUMER_TYPE_SHARED,
        naming: str = "",
        selector: str = "",
    ) -> list[Message]:
        response = await self.stub.Receive(
            gateway_pb2.ReceiveRequest(
                topic=topic, group=group, policy=policy, policy_options=dict(options or {}),
                consumer_type=consumer_type, naming=naming, max_messages=max_messages,
                invisible_ms=invisible_ms, wait_ms=wait_ms, selector=selector,
            ),
            metadata=self.metadata or None,
        )
        return [Message(d, self._settler) for d in response.deliveries]

    async def describe(self, topic: str, group: str) -> admin_pb2.DescribeGroupResponse:
        response: admin_pb2.DescribeGroupResponse = await self.admin.DescribeGroup(
            admin_pb2.DescribeGroupRequest(topic=topic, group=group),
            metadata=self.metadata or None,
        )
        return response
