"""The MessagingService's gRPC method handlers: decoding and refusals at the edge.

Built from the service descriptor instead of the generated `add_..._to_server`, so that

- bytes that do not decode as the method's request type end the call with INVALID_ARGUMENT
  and a short message (the stock deserializer raises, which gRPC reports as UNKNOWN, or as
  INTERNAL on the Telemetry stream);
- a `GatewayError` a servicer method raises (a value `validation` refused, a permission
  denied) becomes the RocketMQ status of an in-band response, which is what the SDKs read;
- a call with a unary request and no valid signature is refused UNAUTHENTICATED without
  reading its request: grpc reads a unary request whole before the handler runs, so such a
  client held the call (one of the server's `--max-rpcs`) for as long as it took to send it,
  for ever when it never finished, and had the server buffer and decode up to the request
  limit (64 MiB) of each call, only to refuse it. (A Telemetry stream's first frame is still
  read, briefly, to answer bytes that do not decode INVALID_ARGUMENT.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf import message_factory
from rocketmq.grpc_protocol import service_pb2

from gateway.errors import GatewayError

from . import codec

SERVICE = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
REASON_MAX_CHARS = 120


class Undecodable:
    """Stands for a request message whose bytes did not decode."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


class StreamRefused(grpc.aio.AbortError):  # type: ignore[misc]
    """A stream's frame did not decode: its handler aborts the call INVALID_ARGUMENT."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def decoder(request_type: Any) -> Callable[[bytes], Any]:
    """Deserializer that returns `Undecodable` instead of raising."""
    name = request_type.DESCRIPTOR.full_name

    def decode(data: bytes) -> Any:
        try:
            return request_type.FromString(data)
        except Exception as error:  # every parse failure (wire format, UTF-8, depth) is the same
            reason = str(error).replace(f"Error parsing message with type '{name}': ", "")
            return Undecodable(
                f"the request is not a valid {name} ({reason[:REASON_MAX_CHARS]}): "
                f"{len(data)} bytes that do not decode"
            )

    return decode


async def _refuse_undecodable(request: Any, context: Any) -> None:
    if isinstance(request, Undecodable):
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)


def _unary_unary(behaviour: Any, response_type: Any) -> Any:
    async def handle(request: Any, context: Any) -> Any:
        await _refuse_undecodable(request, context)
        try:
            return await behaviour(request, context)
        except GatewayError as error:
            return response_type(status=codec.error_status(error))

    return handle


def _unary_stream(behaviour: Any, response_type: Any) -> Any:
    async def handle(request: Any, context: Any) -> AsyncIterator[Any]:
        await _refuse_undecodable(request, context)
        try:
            async for response in behaviour(request, context):
                yield response
        except GatewayError as error:
            yield response_type(status=codec.error_status(error))

    return handle


def _stream_stream(behaviour: Any, response_type: Any) -> Any:
    async def handle(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        async def decoded() -> AsyncIterator[Any]:
            async for request in requests:
                if isinstance(request, Undecodable):
                    # Raised, not aborted here: the servicer may read in a task of its own,
                    # and a call is aborted only from its handler's task.
                    raise StreamRefused(request.message)
                yield request

        try:
            async for response in behaviour(decoded(), context):
                yield response
        except StreamRefused as refused:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, refused.message)
        except GatewayError as error:
            yield response_type(status=codec.error_status(error))

    return handle


class _Handlers(grpc.ServiceRpcHandler):  # type: ignore[misc]
    """The service's handlers; for a call without a valid signature whose request grpc would
    read before the handler runs (a unary request), a handler that refuses it unread."""

    def __init__(self, handlers: dict[str, grpc.RpcMethodHandler],
                 refusal: Callable[[Any], str | None]) -> None:
        self._handlers = {f"/{SERVICE.full_name}/{name}": h for name, h in handlers.items()}
        self._refusal = refusal

    def service_name(self) -> str:
        return str(SERVICE.full_name)

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = self._handlers.get(details.method)
        if handler is None or not (handler.unary_unary or handler.unary_stream):
            return handler
        reason = self._refusal(details.invocation_metadata)
        if reason is None:
            return handler
        return _refused_unread(handler, reason)


def _refused_unread(handler: grpc.RpcMethodHandler, reason: str) -> grpc.RpcMethodHandler:
    """Served as a client stream (the same bytes on the wire) that is never read."""

    async def refuse(requests: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, reason)

    async def refuse_stream(requests: Any, context: Any) -> AsyncIterator[Any]:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, reason)
        yield None  # pragma: no cover - abort raises

    if handler.unary_stream:
        return grpc.stream_stream_rpc_method_handler(refuse_stream, None,
                                                     handler.response_serializer)
    return grpc.stream_unary_rpc_method_handler(refuse, None, handler.response_serializer)


def generic_handler(servicer: Any) -> grpc.GenericRpcHandler:
    """Every MessagingService method of `servicer`, wrapped as described above."""
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for method in SERVICE.methods:
        request_type = message_factory.GetMessageClass(method.input_type)
        response_type = message_factory.GetMessageClass(method.output_type)
        behaviour = getattr(servicer, method.name)
        decode = decoder(request_type)
        encode = response_type.SerializeToString
        if method.client_streaming and method.server_streaming:
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(
                _stream_stream(behaviour, response_type), decode, encode
            )
        elif method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                _unary_stream(behaviour, response_type), decode, encode
            )
        elif not method.client_streaming:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                _unary_unary(behaviour, response_type), decode, encode
            )
        else:  # pragma: no cover - the protocol has no client-streaming-only method
            raise TypeError(f"{method.full_name}: client streaming is not served")
    return _Handlers(handlers, servicer.refusal)
