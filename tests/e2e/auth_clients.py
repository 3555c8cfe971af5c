"""Small raw clients for the access-control tests: gateway.v1, RocketMQ 5 and Pulsar frames.

Raw, so a test sees every status a listener answers (the official clients retry or hide them).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from adapters.pulsar.wire import wire_pb2 as pb
from adapters.pulsar.wire.frames import (
    Frame,
    decode_frame,
    encode_command,
    encode_payload_command,
    frame_size,
)
from adapters.rocketmq.frontend.auth import DATE_FORMAT, DATE_HEADER, sign
from gateway.v1 import gateway_pb2

Cmd = pb.BaseCommand
WAIT_S = 5.0
TWO_PRINCIPALS = """
[[principal]]
name = "alice"
token = "alice-secret"
publish = ["*"]
consume = ["*"]
groups = ["*"]
rocketmq_access_key = "alice-ak"
rocketmq_secret_key = "alice-sk"

[[principal]]
name = "bob"
token = "bob-secret"
publish = ["*"]
consume = ["*"]
groups = ["*"]
rocketmq_access_key = "bob-ak"
rocketmq_secret_key = "bob-sk"
"""
"""A tokens file of two principals who may use every name (tests of each one's shares)."""


def bearer(token: str | None) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")] if token else []


def signed(
    access_key: str | None, secret: str, client_id: str = ""
) -> list[tuple[str, str]]:
    """RocketMQ SDK metadata: MQv2-HMAC-SHA1 over x-mq-date-time (None: no credentials)."""
    meta = [("x-mq-client-id", client_id or f"matrix-{access_key}")]
    if access_key is None:
        return meta
    now = time.strftime(DATE_FORMAT, time.gmtime())
    value = (f"MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders={DATE_HEADER}, "
             f"Signature={sign(secret, now)}")
    return [*meta, (DATE_HEADER, now), ("authorization", value)]


async def status_of(call: Any) -> grpc.StatusCode:
    try:
        await call
    except grpc.aio.AioRpcError as err:
        return err.code()
    return grpc.StatusCode.OK


def rmq_receive(topic: str, group: str, invisible_s: int = 60) -> Any:
    request = service_pb2.ReceiveMessageRequest(batch_size=1)
    request.group.name = group
    request.message_queue.topic.name = topic
    request.filter_expression.type = definition_pb2.FilterType.TAG
    request.filter_expression.expression = "*"
    request.invisible_duration.seconds = invisible_s
    request.long_polling_timeout.seconds = 0
    return request


async def rmq_receive_handles(
    stub: service_pb2_grpc.MessagingServiceStub, meta: list[tuple[str, str]], topic: str,
    group: str,
) -> tuple[int, list[str]]:
    """(status code of the receive, receipt handles received)."""
    code, handles = definition_pb2.Code.OK, []
    async for reply in stub.ReceiveMessage(rmq_receive(topic, group), metadata=meta, timeout=10):
        kind = reply.WhichOneof("content")
        if kind == "status" and reply.status.code != definition_pb2.Code.OK:
            code = reply.status.code
        elif kind == "message":
            handles.append(reply.message.system_properties.receipt_handle)
    return code, handles


def rmq_send(topic: str) -> Any:
    request = service_pb2.SendMessageRequest()
    message = request.messages.add(body=b"x")
    message.topic.name = topic
    message.system_properties.message_id = "M1"
    message.system_properties.message_type = definition_pb2.MessageType.NORMAL
    return request


class PulsarRaw:
    """One Pulsar connection speaking frames."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self._ids = iter(range(1, 1 << 30))

    @classmethod
    async def connect(cls, port: int, token: str | None) -> tuple[PulsarRaw, Frame]:
        """A connection and the server's answer to CONNECT (CONNECTED or ERROR)."""
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = cls(reader, writer)
        cmd = Cmd(type=Cmd.CONNECT)
        cmd.connect.client_version = "auth-matrix"
        cmd.connect.protocol_version = 19
        if token is not None:
            cmd.connect.auth_method_name = "token"
            cmd.connect.auth_data = token.encode()
        client.send(cmd)
        return client, await client.reply()

    def next_id(self) -> int:
        return next(self._ids)

    def send(
        self, cmd: pb.BaseCommand, metadata: pb.MessageMetadata | None = None, payload: bytes = b""
    ) -> None:
        if metadata is None:
            self.writer.write(encode_command(cmd))
        else:
            self.writer.write(encode_payload_command(cmd, metadata, payload))

    async def reply(self, timeout: float = WAIT_S) -> Frame:
        """The next frame other than PING (answered) and MESSAGE (kept in `messages`)."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + timeout
        while True:
            frame = await asyncio.wait_for(self._read(), max(give_up - loop.time(), 0.0))
            if frame.command.type == Cmd.PING:
                pong = Cmd(type=Cmd.PONG)
                pong.pong.SetInParent()
                self.send(pong)
                continue
            return frame

    async def _read(self) -> Frame:
        size = frame_size(await self.reader.readexactly(4))
        return decode_frame(await self.reader.readexactly(size))

    async def producer(self, topic: str) -> tuple[int, Frame]:
        producer_id = self.next_id()
        cmd = Cmd(type=Cmd.PRODUCER)
        cmd.producer.topic = topic
        cmd.producer.producer_id = producer_id
        cmd.producer.request_id = self.next_id()
        self.send(cmd)
        return producer_id, await self.reply()

    async def subscribe(self, topic: str, subscription: str) -> tuple[int, Frame]:
        consumer_id = self.next_id()
        cmd = Cmd(type=Cmd.SUBSCRIBE)
        cmd.subscribe.topic = topic
        cmd.subscribe.subscription = subscription
        cmd.subscribe.subType = pb.CommandSubscribe.Shared
        cmd.subscribe.initialPosition = pb.CommandSubscribe.Earliest
        cmd.subscribe.consumer_id = consumer_id
        cmd.subscribe.request_id = self.next_id()
        self.send(cmd)
        return consumer_id, await self.reply()

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()


async def consume_requests(
    topic: str, group: str, later: asyncio.Queue[gateway_pb2.ConsumeRequest | None]
) -> AsyncIterator[gateway_pb2.ConsumeRequest]:
    """A Consume stream: subscribe, then whatever is put on `later` (None ends it)."""
    yield gateway_pb2.ConsumeRequest(subscribe=gateway_pb2.Subscribe(
        topic=topic, group=group, policy="rocketmq", prefetch=0))
    while (item := await later.get()) is not None:
        yield item
