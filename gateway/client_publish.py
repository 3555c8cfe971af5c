"""Publishing over one PublishStream call: `GatewayClient.publisher()`.

    async with client.publisher() as publisher:
        ids = await publisher.publish("orders", [b"order-1", b"order-2"])

`publish` takes what `GatewayClient.publish` takes and returns the same ids, durable. Calls from
several tasks go out pipelined on the one stream (the gateway answers each in order); a batch
costs the gateway about a third less than a `Publish` call. A refused batch raises the
same typed error (`gateway.client_errors`) a `Publish` call would, and the stream goes on. When
the stream itself fails (the gateway went away, say), every publish waiting for an answer raises
that failure, and so does the next `publish`: open another publisher. A publish whose answer
was lost may have been stored; publishing it again may store it twice.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType

import grpc
from google.rpc import status_pb2

from gateway.client_errors import BY_CODE, GatewayRpcError, typed
from gateway.client_reconnect import StreamFailed
from gateway.v1 import gateway_pb2, gateway_pb2_grpc


def publish_request(
    topic: str, bodies: Sequence[bytes | gateway_pb2.Message], properties: Mapping[str, str] | None,
    key: str, tag: str, delay_ms: int, request: gateway_pb2.PublishRequest | None = None,
) -> gateway_pb2.PublishRequest:
    """A PublishRequest (or `request`, filled in): bytes get `properties`, `key`, `tag` and
    `delay_ms`; a `Message` is sent as it is."""
    if request is None:
        request = gateway_pb2.PublishRequest()
    request.topic = topic
    # Bytes: each message is merged from one template (the properties map is filled once,
    # not once per message, which costs several times more).
    template = gateway_pb2.Message(properties=properties or {}, key=key, tag=tag,
                                   delay_ms=delay_ms)
    messages = request.messages
    add = messages.add
    for b in bodies:
        if isinstance(b, gateway_pb2.Message):
            messages.append(b)
        else:
            message = add()
            message.MergeFrom(template)
            message.body = b
    return request


def result_error(result: gateway_pb2.PublishResult) -> GatewayRpcError:
    """The typed error of a refused request, as a Publish call of it would have raised."""
    code = getattr(grpc.StatusCode, result.error_code, grpc.StatusCode.UNKNOWN)
    status: status_pb2.Status | None = None
    if result.status:
        status = status_pb2.Status()
        try:
            status.ParseFromString(result.status)
        except Exception:  # a broken status: the plain error is still raised
            status = None
    cls = BY_CODE.get(code, GatewayRpcError)
    return cls(code, result.error, None, None, None, status)


class Publisher:
    """One PublishStream call (see the module docstring). Enter it with `async with`."""

    def __init__(
        self, stub: gateway_pb2_grpc.GatewayStub, metadata: tuple[tuple[str, str], ...]
    ) -> None:
        self._stub = stub
        self._metadata = metadata or None
        self._numbers = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[gateway_pb2.PublishResult]] = {}
        self._requests: asyncio.Queue[gateway_pb2.PublishStreamRequest | None] = asyncio.Queue()
        self._call: grpc.aio.StreamStreamCall | None = None
        self._reader: asyncio.Task[None] | None = None
        self.failure: BaseException | None = None
        """Why the stream ended, once it has failed (every later publish raises it)."""

    async def __aenter__(self) -> Publisher:
        self._call = self._stub.PublishStream(_requests(self._requests), metadata=self._metadata)
        self._reader = asyncio.ensure_future(self._read(self._call))
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """End the stream once the publishes sent so far are answered."""
        self._requests.put_nowait(None)
        if self._reader is not None:
            await asyncio.shield(self._reader)

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
        """Publish a batch on the stream; returns the ids once the gateway made them durable
        (as `GatewayClient.publish`)."""
        if self.failure is not None:
            raise self.failure
        if self._call is None:
            raise RuntimeError("enter the publisher with `async with` first")
        number = next(self._numbers)
        request = gateway_pb2.PublishStreamRequest(request_id=number)
        publish_request(topic, bodies, properties, key, tag, delay_ms, request.publish)
        future: asyncio.Future[gateway_pb2.PublishResult] = (
            asyncio.get_running_loop().create_future())
        self._waiting[number] = future
        self._requests.put_nowait(request)
        result = await future
        if result.error_code:
            raise result_error(result)
        return list(result.message_ids)

    async def _read(self, call: grpc.aio.StreamStreamCall) -> None:
        failure: BaseException
        try:
            async for result in call:
                future = self._waiting.pop(result.request_id, None)
                if future is not None and not future.done():
                    future.set_result(result)
            failure = StreamFailed(grpc.StatusCode.UNAVAILABLE, "the publish stream ended")
        except grpc.aio.AioRpcError as exc:
            failure = typed(exc)
        except asyncio.CancelledError:
            failure = StreamFailed(grpc.StatusCode.CANCELLED, "the publisher was closed")
        self.failure = failure
        waiting, self._waiting = self._waiting, {}
        for future in waiting.values():
            if not future.done():
                future.set_exception(failure)


async def _requests(
    queue: asyncio.Queue[gateway_pb2.PublishStreamRequest | None],
) -> AsyncIterator[gateway_pb2.PublishStreamRequest]:
    while True:
        item = await queue.get()
        if item is None:
            return
        yield item
